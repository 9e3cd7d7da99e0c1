"""Model FLOPs and MFU: the one computation used by the learner (per optimizer step) and by the
training loop (per rollout batch).

Training FLOPs per token are the model config's analytic ``flops_per_token(seq_len)`` (forward
+ backward matmuls and attention scores) when it has one, else the 6N rule from the parameter
count. MFU is those FLOPs over the measured time and the devices' summed peak.
"""
from __future__ import annotations

from typing import Callable, Optional


def flops_per_token_fn(model_cfg, num_params: Optional[int] = None) -> Optional[Callable[[int], float]]:
    """``seq_len -> training FLOPs per token`` for a model config (analytic when the config has
    ``flops_per_token``, else ``6 * num_params``); None when neither is known."""
    fn = getattr(model_cfg, "flops_per_token", None)
    if fn is not None:
        return lambda seq_len: float(fn(seq_len))
    if num_params:
        n = float(num_params)
        return lambda seq_len: 6.0 * n
    return None


def mfu(model_flops: float, seconds: float, peak_flops_per_device: float, num_devices: int) -> float:
    """Model FLOPs utilisation: ``model_flops / seconds / (peak * devices)``; 0 when the time or
    the peak is unknown."""
    if seconds <= 0 or peak_flops_per_device <= 0 or num_devices <= 0:
        return 0.0
    return float(model_flops) / seconds / (peak_flops_per_device * num_devices)
