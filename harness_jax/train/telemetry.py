"""Phase timings, throughput/MFU, the matmul-peak probe and the interactive progress bar.

Every step reports the wall time of each phase (``rollout``, ``logprob_recompute``, ``train``,
``weight_sync``, ``queue_wait``, ``eval``, ``checkpoint``), tokens/s and MFU. MFU uses the
model's analytic ``flops_per_token`` (fwd+bwd training FLOPs) over the measured train time and
the per-device peak (from the config, or measured here with a matmul when it is 0 on CPU).
"""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Optional

PHASES = ("rollout", "logprob_recompute", "train", "weight_sync", "queue_wait", "eval", "checkpoint")


class PhaseTimer:
    """Accumulates wall time per phase within one step (``with timer.phase("train"): ...``)."""

    def __init__(self):
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + float(seconds)

    def pop(self) -> dict[str, float]:
        out = {f"time/{k}_s": v for k, v in self.times.items()}
        self.times = {}
        return out


def measure_matmul_peak_flops(n: int = 1024, repeats: int = 5) -> float:
    """Achieved fp32 matmul FLOP/s of one local device (best of ``repeats``): the CPU 'peak'."""
    import jax
    import jax.numpy as jnp

    dev = jax.local_devices()[0]
    a = jax.device_put(jnp.ones((n, n), jnp.float32), dev)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def mfu(flops_per_token: float, tokens: int, seconds: float, peak_flops_per_device: float,
        num_devices: int) -> float:
    """Model FLOPs utilisation of a training phase (0 when anything is unknown)."""
    if seconds <= 0 or peak_flops_per_device <= 0 or num_devices <= 0:
        return 0.0
    return flops_per_token * tokens / seconds / (peak_flops_per_device * num_devices)


class Progress:
    """A tqdm bar with ETA in interactive runs; silent otherwise (``mode``: auto|on|off)."""

    def __init__(self, total: int, initial: int = 0, mode: str = "auto", desc: str = "grpo"):
        enabled = mode == "on" or (mode == "auto" and sys.stderr.isatty())
        self._bar = None
        if enabled:
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)

    def update(self, n: int = 1, **postfix) -> None:
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix({k: (f"{v:.3g}" if isinstance(v, float) else v)
                                       for k, v in postfix.items()}, refresh=False)
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def flops_per_token(model_cfg, seq_len: int, num_params: Optional[int] = None) -> Optional[float]:
    """Training FLOPs per token: the model config's analytic ``flops_per_token`` when it has one,
    else the 6N rule (forward + backward matmuls, attention scores ignored) from ``num_params``."""
    fn = getattr(model_cfg, "flops_per_token", None)
    if fn is not None:
        return float(fn(seq_len))
    return 6.0 * float(num_params) if num_params else None
