"""Rescue math as pure functions: when rescue fires, how attempts are split, advantages, metrics.

Trigger (``rescue_trigger``): every one of the G rollouts under H0 failed and none was an
infrastructure error. A group with an infrastructure error is incomplete, not "all failed": it is
never rescued (the loop retries or drops it, it never scores it).

Attempts (``split_attempts``): the router's K distinct helpers share the group's G attempts
(``"split"``, the default: the group keeps its size; the higher-ranked helpers take the
remainder; with K > G only the first G helpers run) or each gets G (``"per_helper"``).

Advantages (``rescue_advantages_G``), two calibrations:

* ``"with_original"`` (default): the group statistics (mean, std) are taken over the G original
  H0 failures *and* the rescue attempts; only the rescue attempts are trained (the original
  failures' advantages are returned for logging or an optional loss term). Why the default: the
  original failures are real evidence that the task is hard for the current policy under H0, so a
  rescued success is measured against that baseline — and an all-success rescue, the best case,
  still gets a positive advantage instead of the zero that a group of identical rewards gets.
  A rescue that fails entirely still carries no signal (all rewards are equal).
* ``"replaced"``: the paper's literal reading: the rescue attempts replace the group and are
  normalised among themselves; an all-success rescue then teaches nothing.

Both use ``rl.losses.group_advantages`` (same eps guard, scale and baseline options).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np

from harness_jax.rl.losses import group_advantages, zero_variance

CALIBRATIONS = ("with_original", "replaced")
SPLIT_MODES = ("split", "per_helper")


def rescue_trigger(successes: Sequence[Optional[bool]],
                   infra_errors: Sequence[bool] = ()) -> bool:
    """True when all G rollouts failed and none was an infrastructure error.

    successes: per rollout ``True``/``False`` (``None`` marks an infrastructure error);
    infra_errors: optional explicit flags (same length).
    """
    if infra_errors and len(infra_errors) != len(successes):
        raise ValueError(f"rescue_trigger: {len(successes)} successes but {len(infra_errors)} "
                         "infrastructure flags")
    if not successes:
        return False
    if any(s is None for s in successes) or any(infra_errors):
        return False
    return not any(bool(s) for s in successes)


def split_attempts(G: int, helpers: Sequence[str], mode: str = "split") -> list[tuple[str, int]]:
    """``[(helper_id, attempts)]`` in rank order, attempts >= 1 (helpers given none are left
    out)."""
    if mode not in SPLIT_MODES:
        raise ValueError(f"split_attempts: mode={mode!r}; use one of {SPLIT_MODES}")
    if not isinstance(G, int) or G < 1:
        raise ValueError(f"split_attempts: G must be an integer >= 1, got {G!r}")
    if not helpers:
        raise ValueError("split_attempts: no helpers (the router returned none)")
    if len(set(helpers)) != len(helpers):
        raise ValueError(f"split_attempts: helpers must be distinct, got {list(helpers)}")
    if mode == "per_helper":
        return [(h, G) for h in helpers]
    k = len(helpers)
    base, rem = divmod(G, k)
    out = [(h, base + (1 if i < rem else 0)) for i, h in enumerate(helpers)]
    return [(h, n) for h, n in out if n > 0]


def rescue_advantages_G(original_rewards_G: Sequence[float], rescue_rewards_R: Sequence[float], *,
                        calibration: str = "with_original", eps: float = 1e-6,
                        scale: str = "std", baseline: str = "mean"
                        ) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages of the R rescue attempts, advantages of the G originals)``.

    With ``"replaced"`` the originals' advantages are zeros (they are not in the statistics).
    """
    if calibration not in CALIBRATIONS:
        raise ValueError(f"rescue_advantages: calibration={calibration!r}; use one of "
                         f"{CALIBRATIONS}")
    orig = np.asarray(original_rewards_G, np.float32).reshape(-1)
    resc = np.asarray(rescue_rewards_R, np.float32).reshape(-1)
    if resc.size == 0:
        raise ValueError("rescue_advantages: no rescue rewards")
    if calibration == "replaced":
        if resc.size < 2:
            return np.zeros_like(resc), np.zeros_like(orig)
        adv = np.asarray(group_advantages(resc[None, :], eps=eps, scale=scale,
                                          baseline=baseline))[0]
        return adv, np.zeros_like(orig)
    both = np.concatenate([orig, resc])
    adv = np.asarray(group_advantages(both[None, :], eps=eps, scale=scale, baseline=baseline))[0]
    return adv[orig.size:], adv[:orig.size]


@dataclasses.dataclass
class RescueRecord:
    """What happened to one group in a step (filled by the loop, summarised here)."""

    original_rewards: list[float]
    triggered: bool
    infra_error: bool = False                       # an original rollout hit infrastructure
    helper_results: dict = dataclasses.field(default_factory=dict)  # sid -> [success|None]
    final_rewards: list[float] = dataclasses.field(default_factory=list)  # the group's advantage statistics
    trained_rewards: Optional[list] = None          # rewards of the episodes trained after rescue (None: final_rewards)
    wall_s: float = 0.0                             # rescue rollouts' wall time
    started: Optional[float] = None                 # perf_counter() when the rescue began ...
    ended: Optional[float] = None                   # ... and ended (concurrent rescues overlap)


def _busy_seconds(records: Sequence[RescueRecord]) -> float:
    """Wall time during which at least one rescue ran: the union of the records' ``[started,
    ended]`` intervals (rescues of concurrent groups overlap), plus ``wall_s`` of records
    without an interval."""
    spans = sorted((r.started, r.ended) for r in records if r.started is not None and r.ended is not None)
    total, cur = 0.0, None
    for a, b in spans:
        if cur is None or a > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    if cur is not None:
        total += cur[1] - cur[0]
    return total + sum(r.wall_s for r in records if r.started is None or r.ended is None)


def rescue_step_metrics(records: Sequence[RescueRecord], step_wall_s: float = 0.0) -> dict:
    """Per-step rescue statistics: trigger rate, rescue success rate (triggered groups with at
    least one successful helper attempt), helper attempt success rate, zero-variance fraction
    before and after rescue, per-helper calls/attempts/successes, rescue wall time (the union
    of the concurrent rescues' intervals) as a fraction of ``step_wall_s``.

    The zero-variance fraction after rescue is reported under both calibrations' readings:
    ``zero_variance_after`` over the rewards of the episodes trained (``"replaced"``: the injected
    original failures are no signal, so an all-success rescue still counts as zero-variance) and
    ``zero_variance_after_with_original`` over the advantage statistics (original failures
    included under ``"with_original"``, where an all-success rescue carries signal)."""
    n = len(records)

    def zero_var(r):
        return len(r) == 0 or bool(zero_variance(np.asarray(r, np.float32)[None, :])[0])

    trig = [r for r in records if r.triggered]
    rescued = [r for r in trig if any(a is True for att in r.helper_results.values()
                                      for a in att)]
    per: dict[str, dict] = {}
    att_n = att_s = 0
    for r in trig:
        for sid, att in r.helper_results.items():
            p = per.setdefault(sid, {"calls": 0, "attempts": 0, "successes": 0})
            p["calls"] += 1
            ok = [a for a in att if a is not None]
            p["attempts"] += len(ok)
            p["successes"] += sum(ok)
            att_n += len(ok)
            att_s += sum(ok)
    wall = _busy_seconds(records)
    return {"groups": n, "rescue_triggered": len(trig),
            "rescue_trigger_rate": len(trig) / n if n else 0.0,
            "rescue_success_rate": len(rescued) / len(trig) if trig else 0.0,
            "helper_attempt_success_rate": att_s / att_n if att_n else 0.0,
            "zero_variance_before": (sum(zero_var(r.original_rewards) for r in records) / n)
            if n else 0.0,
            "zero_variance_after": (sum(zero_var(r.final_rewards or r.original_rewards if r.trained_rewards is None
                                                 else r.trained_rewards) for r in records) / n) if n else 0.0,
            "zero_variance_after_with_original": (sum(zero_var(r.final_rewards or r.original_rewards)
                                                      for r in records) / n) if n else 0.0,
            "infra_groups": sum(r.infra_error for r in records),
            "per_helper": per, "rescue_wall_s": wall,
            "rescue_wall_fraction": wall / step_wall_s if step_wall_s > 0 else 0.0}
