"""Harness-R1 patch reward: the frozen target's paired improvement on the same task batch.

``r(B, P) = (1/n) * sum_i (R_i^P - R_i^0)`` when the patch ``P`` is valid, fires at run time and
its evaluation is complete, else ``0`` (unparsable, invalid, runtime no-op, or incomplete
evaluations all earn 0). ``R_i`` is task i's mean reward over its baseline episodes.

The baseline ``R^0`` is one type, ``packets.Baseline`` (``packets.baseline_rewards`` builds it
from the unpatched target's trajectories and caches nothing else): per task and sampling key, the
reward, plus the executor seed. The patched rerun replays exactly those ``(task, sampling_key)``
episodes with the same seed, so under a sampling target each patched episode draws the same
sampling noise as its baseline episode (a patch that changes nothing gives exactly
``Delta_B = 0``), and a patch that never fires during the rerun is a runtime no-op (reward 0)
without needing recorded hook contexts; ``dry_run_contexts`` can still reject such patches
before the rerun, cheaply. Episodes that hit infrastructure errors are re-run (the whole
evaluation at most ``eval_attempts`` times, never "until positive"); if some episode still has
no result the evaluation is incomplete.

``RewardCache`` is content-addressed: the key hashes the cache protocol version, the normalised
patch, the batch's task ids, the baseline's fingerprint and a reward-context dict holding every
knob that could change the reward (target model/version, harness id, thresholds, max turns...).
Identical candidate patches (common among K = 8 samples) are evaluated once.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
from typing import Any, Callable, Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.harness.executor import Executor, ExecutorConfig
from harness_jax.harness.packets import Baseline
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.validation import validate_patch

CACHE_PROTOCOL = "harness-jax-reward-v2"


@dataclasses.dataclass
class PatchEval:
    reward: float
    valid: bool
    complete: bool
    errors: list[str]
    patch_id: str = ""
    delta: float = 0.0
    noop: bool = False            # valid, but it never fired during the rerun
    patched: dict = dataclasses.field(default_factory=dict)    # task_id -> mean patched reward
    baseline: dict = dataclasses.field(default_factory=dict)   # task_id -> mean baseline reward
    cached: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def delta_reward(baseline: Baseline, patched: dict[str, dict[str, Optional[float]]]
                 ) -> tuple[float, bool]:
    """Mean paired improvement over the batch and whether every baseline episode has a patched
    result. ``patched``: task_id -> {sampling_key: reward or None}."""
    if not baseline.rewards:
        raise ValueError("delta_reward: empty baseline; run the unpatched target first")
    deltas = []
    for task_id, base in baseline.rewards.items():
        got = patched.get(task_id) or {}
        if any(got.get(k) is None for k in base):
            return 0.0, False
        deltas.append(sum(float(got[k]) - float(r) for k, r in base.items()) / len(base))
    return sum(deltas) / len(deltas), True


class RewardCache:
    """JSON files under ``root`` keyed by a hash of everything that determines the reward."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    @staticmethod
    def key(patch: dict, task_ids: Sequence[str], reward_context: dict) -> str:
        blob = json.dumps({"protocol": CACHE_PROTOCOL, "patch": patch,
                           "tasks": list(task_ids), "context": reward_context},
                          sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha1(blob.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key + ".json")

    def get(self, key: str) -> Optional[dict]:
        p = self._path(key)
        if not os.path.exists(p):
            return None
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    def put(self, key: str, value: dict) -> None:
        p = self._path(key)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            tmp = f"{p}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(value, f)
            os.replace(tmp, p)
            fcntl.flock(lock, fcntl.LOCK_UN)


async def evaluate_patch(patch_json_or_model_text: Any, *, env_name: str, engine,
                         env_factory: Callable, tasks: Sequence[Task], harness: HarnessSpec,
                         baseline: Baseline, tokenizer=None,
                         require_code_hook_only: bool = False,
                         response_protocol: str = "free",
                         dry_run_contexts: Optional[Sequence[dict]] = None,
                         eval_attempts: int = 3, config: ExecutorConfig = ExecutorConfig(),
                         cache: Optional[RewardCache] = None,
                         reward_context: Optional[dict] = None, store=None,
                         run_id: str = "") -> PatchEval:
    """Validates a candidate patch, reruns the frozen target with it on the baseline's episodes
    of ``tasks`` and returns its reward (``PatchEval.reward``; 0 unless valid, fired and
    complete). ``config.seed`` must be the baseline's seed (the rerun is paired with it)."""
    if eval_attempts < 1:
        raise ValueError(f"eval_attempts must be >= 1, got {eval_attempts}")
    if not isinstance(baseline, Baseline):
        raise TypeError(f"evaluate_patch: baseline must be a packets.Baseline (build it with "
                        f"packets.baseline_rewards(trajectories)), got {type(baseline).__name__}")
    missing = [t.task_id for t in tasks if t.task_id not in baseline.rewards]
    if missing:
        raise ValueError(f"evaluate_patch: baseline has no reward for task(s) {missing[:3]}; "
                         "the baseline must cover the same task identities as the rerun")
    if config.seed != baseline.seed:
        raise ValueError(f"evaluate_patch: config.seed={config.seed} but the baseline was sampled "
                         f"with seed {baseline.seed}; rerun with ExecutorConfig(seed="
                         f"{baseline.seed}) so each patched episode is paired with its baseline")
    batch = Baseline({t.task_id: baseline.rewards[t.task_id] for t in tasks}, baseline.seed)
    base = {t.task_id: batch.mean(t.task_id) for t in tasks}
    res = validate_patch(patch_json_or_model_text, env_name=env_name,
                         require_code_hook_only=require_code_hook_only,
                         response_protocol=response_protocol, dry_run_contexts=dry_run_contexts)
    if not res.ok:
        return PatchEval(0.0, False, False, res.errors, baseline=base)
    patch = res.patch
    key = None
    if cache is not None:
        ctx = dict(reward_context or {})
        ctx.setdefault("harness_id", harness.harness_id)
        ctx.setdefault("env_name", env_name)
        ctx["baseline"] = batch.fingerprint()
        key = RewardCache.key(patch.to_dict(), [t.task_id for t in tasks], ctx)
        hit = cache.get(key)
        if hit is not None:
            return PatchEval(**{**hit, "cached": True})
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=patch,
                  config=config, run_id=run_id, store=store, env_name=env_name)
    by_id = {t.task_id: t for t in tasks}
    patched: dict[str, dict[str, Optional[float]]] = {t.task_id: {} for t in tasks}
    todo = batch.samples([t.task_id for t in tasks])
    errors: list[str] = []
    try:
        for _ in range(eval_attempts):
            if not todo:
                break
            trajs = await ex.run_samples([(by_id[t], k) for t, k in todo])
            again = []
            for (task_id, k), traj in zip(todo, trajs):
                if traj.infra_error:
                    again.append((task_id, k))
                    errors.extend(traj.errors[-1:])
                else:
                    patched[task_id][k] = float(traj.reward)
            todo = again
        fired = ex.overlay.fired()
    finally:
        ex.close()
    delta, complete = delta_reward(batch, patched)
    if not complete:
        errors.append(f"incomplete evaluation: {len(todo)} episode(s) without a result after "
                      f"{eval_attempts} attempt(s)")
    noop = complete and not fired
    if noop:
        errors.append("runtime no-op: the patch never fired during the rerun (valid, but it "
                      "changes nothing)")
    means = {t: (sum(r.values()) / len(r) if r and None not in r.values() else None)
             for t, r in patched.items()}
    out = PatchEval(reward=delta if complete and not noop else 0.0, valid=True,
                    complete=complete, errors=errors, patch_id=patch.patch_id, delta=delta,
                    noop=noop,
                    patched=means, baseline=base)
    if cache is not None and complete:
        cache.put(key, out.to_dict())
    return out
