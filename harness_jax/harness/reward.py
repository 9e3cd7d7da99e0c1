"""Harness-R1 patch reward: the frozen target's paired improvement on the same task batch.

``r(B, P) = (1/n) * sum_i (R_i^P - R_i^0)`` when the patch ``P`` is valid and its evaluation is
complete, else ``0`` (unparsable, invalid, runtime no-op, or incomplete evaluations all earn 0).
The baseline rewards ``R^0`` are computed once per batch and cached by the caller; the patched
rerun uses the same task identities. Episodes that hit infrastructure errors are re-run (the
whole evaluation at most ``eval_attempts`` times, never "until positive"); if some task still has
no result the evaluation is incomplete.

``RewardCache`` is content-addressed: the key hashes the cache protocol version, the normalised
patch, the batch's task ids and a reward-context dict holding every knob that could change the
reward (target model/version, harness id, thresholds, max turns, seeds...). Identical candidate
patches (common among K = 8 samples) are evaluated once.
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
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.validation import validate_patch

CACHE_PROTOCOL = "harness-jax-reward-v1"


@dataclasses.dataclass
class PatchEval:
    reward: float
    valid: bool
    complete: bool
    errors: list[str]
    patch_id: str = ""
    delta: float = 0.0
    patched: dict = dataclasses.field(default_factory=dict)    # task_id -> mean patched reward
    baseline: dict = dataclasses.field(default_factory=dict)   # task_id -> mean baseline reward
    cached: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def delta_reward(baseline: dict[str, float], patched: dict[str, Optional[float]]
                 ) -> tuple[float, bool]:
    """Mean paired improvement over the batch and whether every task has a patched result."""
    if not baseline:
        raise ValueError("delta_reward: empty baseline; run the unpatched target first")
    missing = [t for t in baseline if patched.get(t) is None]
    if missing:
        return 0.0, False
    return sum(float(patched[t]) - float(baseline[t]) for t in baseline) / len(baseline), True


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
                         baseline: dict[str, float], tokenizer=None,
                         require_code_hook_only: bool = False,
                         response_protocol: str = "free",
                         dry_run_contexts: Optional[Sequence[dict]] = None,
                         eval_attempts: int = 3, config: ExecutorConfig = ExecutorConfig(),
                         cache: Optional[RewardCache] = None,
                         reward_context: Optional[dict] = None, store=None,
                         run_id: str = "") -> PatchEval:
    """Validates a candidate patch, reruns the frozen target with it on ``tasks`` and returns
    its reward (``PatchEval.reward``; 0 unless valid and complete)."""
    if eval_attempts < 1:
        raise ValueError(f"eval_attempts must be >= 1, got {eval_attempts}")
    missing = [t.task_id for t in tasks if t.task_id not in baseline]
    if missing:
        raise ValueError(f"evaluate_patch: baseline has no reward for task(s) {missing[:3]}; "
                         "the baseline must cover the same task identities as the rerun")
    res = validate_patch(patch_json_or_model_text, env_name=env_name,
                         require_code_hook_only=require_code_hook_only,
                         response_protocol=response_protocol, dry_run_contexts=dry_run_contexts)
    base = {t.task_id: float(baseline[t.task_id]) for t in tasks}
    if not res.ok:
        return PatchEval(0.0, False, False, res.errors, baseline=base)
    patch = res.patch
    key = None
    if cache is not None:
        ctx = dict(reward_context or {})
        ctx.setdefault("harness_id", harness.harness_id)
        ctx.setdefault("env_name", env_name)
        key = RewardCache.key(patch.to_dict(), [t.task_id for t in tasks], ctx)
        hit = cache.get(key)
        if hit is not None:
            hit = dict(hit)
            hit["cached"] = True
            return PatchEval(**hit)
    ex = Executor(engine, env_factory, harness, tokenizer=tokenizer, overlay=patch,
                  config=config, run_id=run_id, store=store, env_name=env_name)
    patched: dict[str, Optional[float]] = {t.task_id: None for t in tasks}
    todo = list(tasks)
    errors: list[str] = []
    try:
        for _ in range(eval_attempts):
            if not todo:
                break
            trajs = await ex.run_episodes(todo, n_per_task=1)
            again = []
            for task, traj in zip(todo, trajs):
                if traj.infra_error:
                    again.append(task)
                    errors.extend(traj.errors[-1:])
                else:
                    patched[task.task_id] = float(traj.reward)
            todo = again
    finally:
        if ex.overlay is not None:
            ex.overlay.close()
    delta, complete = delta_reward(base, patched)
    if not complete:
        errors.append(f"incomplete evaluation: {len(todo)} task(s) without a result after "
                      f"{eval_attempts} attempt(s)")
    out = PatchEval(reward=delta if complete else 0.0, valid=True, complete=complete,
                    errors=errors, patch_id=patch.patch_id, delta=delta, patched=patched,
                    baseline=base)
    if cache is not None and complete:
        cache.put(key, out.to_dict())
    return out
