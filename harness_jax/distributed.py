"""Multi-host start-up: ``jax.distributed.initialize`` from explicit values, flags or env.

Resolution order for each setting: the explicit argument, then the absl flag (when
``define_flags()`` was called and flags were parsed), then the environment:

=====================  ==============================  ======================================
setting                flag                            environment
=====================  ==============================  ======================================
coordinator address    ``--coordinator_address``       ``HJ_COORDINATOR_ADDRESS`` or
                                                       ``JAX_COORDINATOR_ADDRESS``
number of processes    ``--num_processes``             ``HJ_NUM_PROCESSES`` / ``JAX_NUM_PROCESSES``
this process's index   ``--process_id``                ``HJ_PROCESS_ID`` / ``JAX_PROCESS_ID``
=====================  ==============================  ======================================

With none of them set, ``initialize`` still starts multi-host JAX when the environment shows a
multi-process launch JAX can discover by itself (a SLURM job with several tasks, a multi-host TPU
slice: ``TPU_WORKER_HOSTNAMES`` lists several hosts), or when ``auto=True``; otherwise nothing is
initialised (returns False), so the same entry point runs on a laptop and on a pod. Either way
it logs the process index, device counts and platform, so a wrong topology shows up in the first
lines, and it turns on JAX's persistent compilation cache (``harness_jax.compile_cache``). On CPU
the cross-process collectives use gloo (set before initialisation). This is the one start-up
path: the launchers call ``initialize()`` first thing.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

import jax
from absl import flags

from harness_jax import xla_flags

from harness_jax import compile_cache

_FLAGS_DEFINED = False


def define_flags() -> None:
    """Define ``--coordinator_address``, ``--num_processes``, ``--process_id`` (idempotent)."""
    global _FLAGS_DEFINED
    if _FLAGS_DEFINED:
        return
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0 for jax.distributed")
    flags.DEFINE_integer("num_processes", None, "total number of processes (hosts)")
    flags.DEFINE_integer("process_id", None, "index of this process in [0, num_processes)")
    _FLAGS_DEFINED = True


def _flag(name):
    if not _FLAGS_DEFINED:
        return None
    f = flags.FLAGS
    try:
        return getattr(f, name) if f.is_parsed() else None
    except AttributeError:
        return None


def _env(*names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return v
    return None


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
    coordinator_address: Optional[str] = None
    num_processes: Optional[int] = None
    process_id: Optional[int] = None

    def validate(self) -> None:
        if self.num_processes is None or self.num_processes <= 1:
            return
        if not self.coordinator_address:
            raise ValueError("distributed: num_processes > 1 needs a coordinator address "
                             "(--coordinator_address or HJ_COORDINATOR_ADDRESS=host:port)")
        if self.process_id is None or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"distributed: process_id={self.process_id} must be in [0, {self.num_processes}) "
                             f"(--process_id or HJ_PROCESS_ID)")


def resolve(coordinator_address=None, num_processes=None, process_id=None) -> DistributedConfig:
    addr = coordinator_address or _flag("coordinator_address") or _env("HJ_COORDINATOR_ADDRESS",
                                                                        "JAX_COORDINATOR_ADDRESS",
                                                                        "COORDINATOR_ADDRESS")
    n = num_processes if num_processes is not None else _flag("num_processes")
    n = n if n is not None else _env("HJ_NUM_PROCESSES", "JAX_NUM_PROCESSES")
    pid = process_id if process_id is not None else _flag("process_id")
    pid = pid if pid is not None else _env("HJ_PROCESS_ID", "JAX_PROCESS_ID")
    cfg = DistributedConfig(addr, None if n is None else int(n), None if pid is None else int(pid))
    cfg.validate()
    return cfg


def discoverable_multiprocess(environ=None) -> bool:
    """True when the environment describes a multi-process launch that
    ``jax.distributed.initialize()`` discovers without arguments (SLURM with several tasks, a
    multi-host TPU slice)."""
    environ = os.environ if environ is None else environ
    if int(environ.get("SLURM_NTASKS", "1") or 1) > 1:
        return True
    return "," in environ.get("TPU_WORKER_HOSTNAMES", "")


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *, auto: bool = False,
               initialization_timeout: int = 300, platform: Optional[str] = None) -> bool:
    """Initialise multi-process JAX when configured or discoverable; returns True when it did.

    Must run before any JAX computation. ``platform`` ("cpu" | "gpu" | "tpu", the run's
    ``config.mesh.platform``): first add that platform's XLA flags (``harness_jax.xla_flags``;
    latency hiding, collective pipelining). Turns on the persistent compilation cache
    (``harness_jax.compile_cache``) and logs the process index, device counts and platform.
    """
    if platform is not None:
        set_flags = xla_flags.apply(platform)
        if set_flags:
            logging.info("XLA flags for %s: %s", platform, set_flags)
    compile_cache.enable()
    cfg = resolve(coordinator_address, num_processes, process_id)
    if cfg.num_processes is not None and cfg.num_processes > 1:
        if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=cfg.coordinator_address,
                                   num_processes=cfg.num_processes, process_id=cfg.process_id,
                                   initialization_timeout=initialization_timeout)
        started = True
    elif auto or discoverable_multiprocess():
        jax.distributed.initialize()
        started = True
    else:
        started = False
    _log()
    return started


def _log():
    logging.info("process %d/%d; %d local / %d global devices; platform %s; devices %s", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count(), jax.default_backend(),
                 jax.local_devices()[:8])


def is_main_process() -> bool:
    return jax.process_index() == 0
