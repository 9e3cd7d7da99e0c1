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

With none of them set and a single process, nothing is initialised (``initialize`` returns
False), so the same entry point runs on a laptop and on a pod. On TPU pods and SLURM,
``jax.distributed.initialize()`` can discover everything itself: pass ``auto=True``.
On CPU the cross-process collectives use gloo (set before initialisation).
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

import jax

_FLAGS_DEFINED = False


def define_flags() -> None:
    """Define ``--coordinator_address``, ``--num_processes``, ``--process_id`` (idempotent)."""
    global _FLAGS_DEFINED
    if _FLAGS_DEFINED:
        return
    from absl import flags
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0 for jax.distributed")
    flags.DEFINE_integer("num_processes", None, "total number of processes (hosts)")
    flags.DEFINE_integer("process_id", None, "index of this process in [0, num_processes)")
    _FLAGS_DEFINED = True


def _flag(name):
    if not _FLAGS_DEFINED:
        return None
    from absl import flags
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
                                                                        "JAX_COORDINATOR_ADDRESS")
    n = num_processes if num_processes is not None else _flag("num_processes")
    n = n if n is not None else _env("HJ_NUM_PROCESSES", "JAX_NUM_PROCESSES")
    pid = process_id if process_id is not None else _flag("process_id")
    pid = pid if pid is not None else _env("HJ_PROCESS_ID", "JAX_PROCESS_ID")
    cfg = DistributedConfig(addr, None if n is None else int(n), None if pid is None else int(pid))
    cfg.validate()
    return cfg


def initialize(coordinator_address: Optional[str] = None, num_processes: Optional[int] = None,
               process_id: Optional[int] = None, *, auto: bool = False,
               initialization_timeout: int = 300) -> bool:
    """Initialise multi-process JAX when configured; returns True when it did.

    Must run before any JAX computation. Logs the process index, device counts and platform.
    """
    if auto:
        jax.distributed.initialize()
        _log()
        return True
    cfg = resolve(coordinator_address, num_processes, process_id)
    if cfg.num_processes is None or cfg.num_processes <= 1:
        return False
    if os.environ.get("JAX_PLATFORMS", "").startswith("cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=cfg.coordinator_address, num_processes=cfg.num_processes,
                               process_id=cfg.process_id, initialization_timeout=initialization_timeout)
    _log()
    return True


def _log():
    logging.info("jax.distributed: process %d/%d, %d local / %d global devices (%s)", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count(), jax.devices()[0].platform)


def is_main_process() -> bool:
    return jax.process_index() == 0
