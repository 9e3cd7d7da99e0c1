"""Process start-up: multi-host initialisation when the environment asks for it, and a log of
the process index, devices and platform (so a wrong topology shows up in the first lines)."""
from __future__ import annotations

import os

from absl import logging

_MULTIHOST_ENV = ("JAX_COORDINATOR_ADDRESS", "COORDINATOR_ADDRESS")


def wants_distributed(environ=os.environ) -> bool:
    """True when the environment describes a multi-process run (explicit coordinator, SLURM with
    several tasks, or a multi-host TPU slice)."""
    if any(environ.get(k) for k in _MULTIHOST_ENV):
        return True
    if int(environ.get("SLURM_NTASKS", "1") or 1) > 1:
        return True
    hosts = environ.get("TPU_WORKER_HOSTNAMES", "")
    return "," in hosts


def initialize_and_log() -> None:
    import jax

    if wants_distributed():
        addr = os.environ.get("JAX_COORDINATOR_ADDRESS") or os.environ.get("COORDINATOR_ADDRESS")
        kw = {}
        if addr:
            kw = dict(coordinator_address=addr,
                      num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                      process_id=int(os.environ["JAX_PROCESS_ID"]))
        jax.distributed.initialize(**kw)
    logging.info("process %d/%d; %d local / %d global devices; platform %s; devices %s",
                 jax.process_index(), jax.process_count(), jax.local_device_count(),
                 jax.device_count(), jax.default_backend(), jax.local_devices()[:8])
