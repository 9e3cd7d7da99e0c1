"""Baselines ``R^0``: the unpatched frozen target on a task batch, run once and cached.

A ``Baseline`` holds, per task and *sampling key*, the reward of the unpatched target's episode,
plus everything needed to rerun exactly those episodes with a patch installed: the target's
identity, the environment (name + constructor arguments), the harness, the executor settings and
the base seed. Episode ``j`` of task ``t`` samples with key ``"<t>#<j>"``; the executor derives
each turn's sampling seed from ``(seed, key, turn)``, so a patched rerun of the same keys draws
the same sampling noise as its baseline episode: under a sampling target a patch that changes
nothing reproduces the baseline rewards exactly (``Delta_B = 0``).

The cache is content-addressed: the key hashes the target identity, the environment, the task
ids, the harness id, ``n_per_task``, the seed and the executor settings that change behaviour, so
a changed seed, target, harness or task set is a miss. Entries are written atomically (a temp
directory renamed into place) and only when complete: an episode that still hits an
infrastructure failure after ``attempts`` tries leaves the baseline incomplete (listed in
``missing``), never a task failure.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from typing import Any, Callable, Optional, Sequence, Union

from harness_jax.envs.base import Env, Task
from harness_jax.harness.executor import Executor, ExecutorConfig
from harness_jax.harness.patches import Patch
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_r1.targets import FrozenTarget, as_target
from harness_jax.envs import registry

log = logging.getLogger(__name__)

CACHE_PROTOCOL = "harness-r1-baseline-v1"
# ExecutorConfig fields that do not change what a completed episode does (left out of cache
# keys): parallelism, recording, hook-worker counts, and retries (they only decide whether an
# episode completes; incomplete baselines are never cached).
NON_BEHAVIOUR_EXECUTOR_FIELDS = ("concurrency", "record_hook_contexts", "overlay_workers",
                                 "infra_retries")


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _hash(obj: Any, n: int = 20) -> str:
    return hashlib.sha256(_canon(obj).encode()).hexdigest()[:n]


@dataclasses.dataclass(frozen=True)
class EnvRef:
    """An environment by registered name and constructor arguments (part of cache keys)."""

    name: str
    kwargs: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("EnvRef.name: give a registered environment name, e.g. 'dbbench'")
        try:
            json.dumps(self.kwargs)
        except TypeError as e:
            raise ValueError(f"EnvRef.kwargs: must be JSON-serialisable (they key caches and "
                             f"travel to worker processes): {e}") from e

    def make(self) -> Env:
        return registry.make(self.name, **self.kwargs)

    def to_dict(self) -> dict:
        return {"name": self.name, "kwargs": dict(self.kwargs)}

    @classmethod
    def of(cls, env: Union["EnvRef", str, dict], **kwargs) -> "EnvRef":
        if isinstance(env, EnvRef):
            return env
        if isinstance(env, dict):
            return cls(env["name"], dict(env.get("kwargs") or {}))
        return cls(env, dict(kwargs))


def sample_keys(task_ids: Sequence[str], n_per_task: int) -> list[tuple[str, str]]:
    """``(task_id, sampling_key)`` of every episode of a batch, in order."""
    if n_per_task < 1:
        raise ValueError(f"n_per_task must be >= 1, got {n_per_task}")
    return [(t, f"{t}#{j}") for t in task_ids for j in range(n_per_task)]


def executor_settings(config: ExecutorConfig) -> dict:
    """The executor fields that change episodes (the seed is keyed separately)."""
    d = dataclasses.asdict(config)
    for k in NON_BEHAVIOUR_EXECUTOR_FIELDS + ("seed",):
        d.pop(k, None)
    return d


def r1_executor_config(config: Optional[ExecutorConfig] = None) -> ExecutorConfig:
    """``config`` with Harness-R1's default effect surface: ``"public"`` (the public runtime's
    per-benchmark surface, ``harness.hooks.honoured_kinds``) unless the caller chose one; the
    baseline records it and every rerun replays it."""
    config = config or ExecutorConfig()
    if config.effect_surface is None:
        config = dataclasses.replace(config, effect_surface="public")
    return config


def baseline_key(target: dict, env: dict, task_ids: Sequence[str], harness_id: str,
                 n_per_task: int, seed: Optional[int], executor: dict) -> str:
    """Content address of a baseline run (every input that can change its rewards)."""
    return "b-" + _hash({"protocol": CACHE_PROTOCOL, "target": target, "env": env,
                         "tasks": list(task_ids), "harness": harness_id,
                         "n_per_task": n_per_task, "seed": seed, "executor": executor})


@dataclasses.dataclass
class Baseline:
    """``R^0`` of a batch and the recipe of its episodes (module docstring)."""

    target: dict                     # TargetIdentity.to_dict()
    env: dict                        # EnvRef.to_dict()
    harness: dict                    # HarnessSpec.to_dict()
    seed: Optional[int]
    n_per_task: int
    executor: dict                   # executor_settings(config)
    task_ids: list
    rewards: dict                    # task_id -> {sampling_key: reward}
    key: str = ""
    concurrency: int = 64            # episodes in flight (not part of the key); reruns reuse it
    missing: list = dataclasses.field(default_factory=list)   # [task_id, key] never completed
    trajectories: list = dataclasses.field(default_factory=list, repr=False)
    stats: dict = dataclasses.field(default_factory=dict)
    cached: bool = False

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def harness_spec(self) -> HarnessSpec:
        return HarnessSpec.from_dict(self.harness)

    @property
    def env_ref(self) -> EnvRef:
        return EnvRef.of(self.env)

    def mean(self, task_id: str) -> float:
        r = self.rewards[task_id]
        return sum(r.values()) / len(r)

    def means(self) -> dict:
        return {t: self.mean(t) for t in self.task_ids if self.rewards.get(t)}

    @property
    def success_rate(self) -> float:
        """Mean over tasks of the mean episode reward (the batch's R^0)."""
        m = self.means()
        return sum(m.values()) / len(m) if m else 0.0

    def samples(self, task_ids: Optional[Sequence[str]] = None) -> list[tuple[str, str]]:
        """``(task_id, sampling_key)`` of the baseline episodes of these tasks."""
        ids = self.task_ids if task_ids is None else task_ids
        return [(t, k) for t in ids for k in sorted(self.rewards.get(t, {}))]

    def fingerprint(self) -> str:
        return _hash({"key": self.key, "rewards": self.rewards, "seed": self.seed})

    def check_covers(self, task_ids: Sequence[str]) -> None:
        bad = [t for t in task_ids if len(self.rewards.get(t, {})) != self.n_per_task]
        if bad:
            raise ValueError(f"baseline {self.key}: no complete baseline for task(s) {bad[:3]}; "
                             "the rerun must use the baseline's task identities (rerun the "
                             "baseline if it had infrastructure failures)")

    def summary(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("trajectories")
        d.pop("cached")
        return d

    @classmethod
    def from_summary(cls, d: dict, trajectories: Sequence[Trajectory] = ()) -> "Baseline":
        d = dict(d)
        d["rewards"] = {t: {k: float(v) for k, v in r.items()} for t, r in d["rewards"].items()}
        return cls(**d, trajectories=list(trajectories))


class BaselineCache:
    """``root/<key[:4]>/<key>/{baseline.json, trajectories.jsonl}``, written atomically."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.hits = 0
        self.misses = 0

    def path(self, key: str) -> str:
        return os.path.join(self.root, key[:4], key)

    def get(self, key: str, with_trajectories: bool = True) -> Optional[Baseline]:
        d = self.path(key)
        meta = os.path.join(d, "baseline.json")
        if not os.path.exists(meta):
            self.misses += 1
            return None
        with open(meta, encoding="utf-8") as f:
            summary = json.load(f)
        trajs = []
        if with_trajectories:
            with open(os.path.join(d, "trajectories.jsonl"), encoding="utf-8") as f:
                trajs = [Trajectory.from_dict(json.loads(line)) for line in f if line.strip()]
        self.hits += 1
        b = Baseline.from_summary(summary, trajs)
        b.cached = True
        return b

    def put(self, baseline: Baseline) -> str:
        if not baseline.complete:
            raise ValueError(f"BaselineCache.put: baseline {baseline.key} is incomplete "
                             f"({len(baseline.missing)} episodes missing); only complete "
                             "baselines are cached")
        final = self.path(baseline.key)
        if os.path.exists(final):
            return final
        os.makedirs(os.path.dirname(final), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(final))
        try:
            with open(os.path.join(tmp, "trajectories.jsonl"), "w", encoding="utf-8") as f:
                for t in baseline.trajectories:
                    f.write(json.dumps(t.to_dict(), ensure_ascii=False, default=str) + "\n")
            with open(os.path.join(tmp, "baseline.json"), "w", encoding="utf-8") as f:
                json.dump(baseline.summary(), f, ensure_ascii=False, indent=1)
            try:
                os.rename(tmp, final)
            except OSError:
                if not os.path.exists(os.path.join(final, "baseline.json")):
                    raise
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
        return final


# ------------------------------------------------------------------------------------------
# Running keyed episodes (the paired-seed mechanism)
# ------------------------------------------------------------------------------------------
def _task_statement(traj: Trajectory) -> Optional[str]:
    for rec in traj.hook_contexts:
        if rec.get("hook") == "on_init":
            return (rec.get("ctx") or {}).get("task", {}).get("instruction")
    return None


async def run_keyed(target: FrozenTarget, env: EnvRef, harness: HarnessSpec,
                    samples: Sequence[tuple[Task, str]], *, seed: Optional[int],
                    config: ExecutorConfig, tokenizer=None, overlay=None, attempts: int = 3,
                    run_tag: str = "", env_factory: Optional[Callable[[], Env]] = None,
                    ) -> tuple[dict, list[Trajectory], list[str], dict]:
    """Runs one episode per ``(task, sampling_key)`` with the given overlay
    (``Executor.run_samples``: each turn seeded from ``(seed, key, turn)``), retrying episodes
    that end in infrastructure failures (at most ``attempts`` rounds, never "until positive").

    Returns ``(rewards, trajectories, errors, hook_effects)``: ``rewards[task][key]`` (None when
    the episode never completed), the final trajectory of every sample (``run_id`` =
    ``run_tag``, ``meta["sampling_key"]``, the task statement in ``meta["task_statement"]``),
    the infrastructure errors seen, and the overlay's per-hook effect counters summed over the
    run.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    tag = run_tag or f"run-{uuid.uuid4().hex[:10]}"
    cfg = dataclasses.replace(config, seed=seed, record_hook_contexts=True)
    ex = Executor(target, env_factory or env.make, harness, tokenizer=tokenizer,
                  overlay=overlay, config=cfg, run_id=tag, env_name=env.name)

    rewards: dict = {}
    for task, key in samples:
        rewards.setdefault(task.task_id, {})[key] = None
    final: dict[str, Trajectory] = {}
    errors: list[str] = []
    todo = list(samples)
    try:
        for _ in range(attempts):
            if not todo:
                break
            trajs = await ex.run_samples(todo)
            again = []
            for (task, key), traj in zip(todo, trajs):
                final[key] = traj
                if traj.infra_error:
                    again.append((task, key))
                    errors.extend(traj.errors[-1:])
                else:
                    rewards[task.task_id][key] = float(traj.reward)
            todo = again
        effects = ex.overlay.stats_dict() if ex.overlay is not None else {}
    finally:
        if isinstance(overlay, Patch):      # the executor installed it: stop its hook workers
            ex.close()
    out = []
    for task, key in samples:
        traj = final[key]
        statement = _task_statement(traj)
        traj.hook_contexts = []
        if statement is not None:
            traj.meta["task_statement"] = statement
        out.append(traj)
    return rewards, out, errors, effects


async def arun_baseline(target, env: Union[EnvRef, str], tasks: Sequence[Task],
                        harness: HarnessSpec, *, n_per_task: int = 1, seed: Optional[int] = 0,
                        config: Optional[ExecutorConfig] = None,
                        cache: Optional[BaselineCache] = None, tokenizer=None,
                        attempts: int = 3, store=None) -> Baseline:
    """The unpatched target on ``tasks`` (``n_per_task`` episodes each), from the cache when
    this exact run was made before."""
    target = as_target(target, tokenizer)
    env = EnvRef.of(env)
    if not isinstance(harness, HarnessSpec):
        raise TypeError(f"harness must be a HarnessSpec, got {type(harness).__name__}")
    if not tasks:
        raise ValueError("arun_baseline: tasks is empty; give the batch B")
    ids = [t.task_id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError("arun_baseline: duplicate tasks in the batch; each task once "
                         "(n_per_task sets the episodes per task)")
    wrong = sorted({t.env_name for t in tasks} - {env.name})
    if wrong:
        raise ValueError(f"arun_baseline: tasks of environment(s) {wrong} given for env "
                         f"{env.name!r}")
    config = r1_executor_config(config)
    settings = executor_settings(config)
    key = baseline_key(target.identity.to_dict(), env.to_dict(), ids, harness.harness_id,
                       n_per_task, seed, settings)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    by_id = {t.task_id: t for t in tasks}
    samples = [(by_id[t], k) for t, k in sample_keys(ids, n_per_task)]
    t0 = time.perf_counter()
    rewards, trajs, errors, _ = await run_keyed(target, env, harness, samples, seed=seed,
                                                config=config, tokenizer=tokenizer,
                                                attempts=attempts, run_tag=f"{key}")
    missing = [[t, k] for t, per in rewards.items() for k, r in per.items() if r is None]
    base = Baseline(target=target.identity.to_dict(), env=env.to_dict(),
                    harness=harness.to_dict(), seed=seed, n_per_task=n_per_task,
                    executor=settings, task_ids=ids,
                    rewards={t: {k: r for k, r in per.items() if r is not None}
                             for t, per in rewards.items()},
                    key=key, concurrency=config.concurrency, missing=missing,
                    trajectories=trajs,
                    stats={"episodes": len(samples), "wall_s": round(time.perf_counter() - t0, 3),
                           "infra_errors": errors[:20],
                           "turns": sum(len(t.turns) for t in trajs)})
    if missing:
        log.warning("baseline %s: %d episode(s) still failed with infrastructure errors; the "
                    "baseline is incomplete and not cached", key, len(missing))
    elif cache is not None:
        cache.put(base)
    if store is not None:
        for t in trajs:
            store.append(t)
    return base


def run_baseline(target, env: Union[EnvRef, str], tasks: Sequence[Task], harness: HarnessSpec,
                 **kw) -> Baseline:
    """Synchronous ``arun_baseline`` (not from inside a running event loop)."""
    return run_sync(arun_baseline(target, env, tasks, harness, **kw), "run_baseline")


def run_sync(coro, name: str):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(f"{name} blocks; inside a running event loop await a{name} instead")
