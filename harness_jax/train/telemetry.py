"""Phase timings, the matmul-peak probe and the interactive progress bar.

Every step reports the wall time of each phase (``rollout``, ``logprob_recompute``, ``train``,
``weight_sync``, ``queue_wait``, ``eval``, ``checkpoint``), tokens/s and MFU (``rl.perf``: the
model's analytic training FLOPs over the measured train time and the per-device peak, from the
config or measured here with a matmul when it is 0 on CPU).
"""
from __future__ import annotations

import contextlib
import sys
import time

PROGRESS_MODES = ("auto", "on", "off")   # progress bars: only on a TTY, always, never (``Progress``)
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
