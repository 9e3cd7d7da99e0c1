"""MFU: the one computation used by the learner (per optimizer step) and by the training loop
(per rollout batch).

A step's model FLOPs are the learner's ``flops_per_token(seq_len)`` times its tokens: the model
config's analytic count (``Qwen3_5Config.flops_per_token``: forward + backward matmuls and
attention scores), handed to the learner by whoever builds it, else the 6N rule from the
parameter count. MFU is those FLOPs over the measured time and the devices' summed peak.
"""
from __future__ import annotations


def mfu(model_flops: float, seconds: float, peak_flops_per_device: float, num_devices: int) -> float:
    """Model FLOPs utilisation: ``model_flops / seconds / (peak * devices)``; 0 when the time or
    the peak is unknown."""
    if seconds <= 0 or peak_flops_per_device <= 0 or num_devices <= 0:
        return 0.0
    return float(model_flops) / seconds / (peak_flops_per_device * num_devices)
