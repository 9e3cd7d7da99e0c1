"""Per-platform XLA flags that overlap collectives with compute, set by the launchers.

FSDP gathers every layer's weights in the forward and again in the backward pass, and
reduce-scatters their gradients; without a latency-hiding scheduler and collective pipelining
these collectives run back to back with the matmuls instead of under them. ``apply(platform)``
adds the platform's flags to the environment before the backend starts (``XLA_FLAGS`` for GPU,
``LIBTPU_INIT_ARGS`` for TPU; libtpu reads its own variable), never overriding a flag the user
already set. The launchers call it first thing, before ``distributed.initialize`` (which starts
the backend), with ``config.mesh.platform``.

Flag names are checked against the XLA / libtpu binaries in tests (an unknown flag aborts XLA at
start-up), not their effect: that needs the accelerator (``benchmarks/accel_probe.py``).
"""
from __future__ import annotations

import os
from typing import Mapping, MutableMapping, Optional

# GPU (XLA_FLAGS): the latency-hiding scheduler; FSDP all-gathers / reduce-scatters and
# data-parallel all-reduces pipelined across the scanned layer loop (issued one iteration
# ahead); double buffering of while loops so that pipelining has a buffer to fill; collective
# combining thresholds large enough for one layer's weights.
GPU_FLAGS = (
    "--xla_gpu_enable_latency_hiding_scheduler=true",
    "--xla_gpu_enable_pipelined_all_gather=true",
    "--xla_gpu_enable_pipelined_reduce_scatter=true",
    "--xla_gpu_enable_pipelined_all_reduce=true",
    "--xla_gpu_enable_while_loop_double_buffering=true",
    "--xla_gpu_enable_highest_priority_async_stream=true",
    "--xla_gpu_all_gather_combine_threshold_bytes=536870912",
    "--xla_gpu_reduce_scatter_combine_threshold_bytes=536870912",
    "--xla_gpu_all_reduce_combine_threshold_bytes=536870912",
)

# TPU (LIBTPU_INIT_ARGS): the latency-hiding scheduler; asynchronous all-gather, all-reduce and
# collective-permute; collective fusion (FSDP gathers fused into the consuming loop and issued
# several steps ahead); the data-parallel all-reduce optimisation; overlapping compute with
# collectives on the TensorCore.
TPU_FLAGS = (
    "--xla_tpu_enable_latency_hiding_scheduler=true",
    "--xla_enable_async_all_gather=true",
    "--xla_enable_async_all_reduce=true",
    "--xla_enable_async_collective_permute=true",
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true",
    "--xla_tpu_data_parallel_opt_different_sized_ops=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
)

FLAGS = {"gpu": ("XLA_FLAGS", GPU_FLAGS), "tpu": ("LIBTPU_INIT_ARGS", TPU_FLAGS), "cpu": (None, ())}


def _name(flag: str) -> str:
    return flag.split("=", 1)[0]


def merged(existing: str, flags) -> str:
    """``existing`` (a flags string) with ``flags`` appended, except those it already sets."""
    have = {_name(f) for f in existing.split()}
    extra = [f for f in flags if _name(f) not in have]
    return " ".join(existing.split() + extra)


def apply(platform: str, environ: Optional[MutableMapping[str, str]] = None) -> dict:
    """Add ``platform``'s flags ("cpu" | "gpu" | "tpu") to ``environ`` (default ``os.environ``).

    Must run before the JAX backend starts. Returns ``{variable: value}`` of what was set
    (empty for CPU). A flag the user set already keeps the user's value.
    """
    if platform not in FLAGS:
        raise ValueError(f"xla_flags.apply: platform {platform!r}; use one of {', '.join(FLAGS)}")
    environ = os.environ if environ is None else environ
    var, flags = FLAGS[platform]
    if var is None:
        return {}
    environ[var] = merged(environ.get(var, ""), flags)
    return {var: environ[var]}


def describe(environ: Optional[Mapping[str, str]] = None) -> dict:
    """The flag variables as they are now (for the run's log)."""
    environ = os.environ if environ is None else environ
    return {v: environ.get(v, "") for v, _ in FLAGS.values() if v}
