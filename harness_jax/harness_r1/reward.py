"""The engineer's reward: the frozen target's paired improvement when a patch is installed.

``Delta_B(P) = mean_i (R_i^P - R_i^0)``; ``R_i`` is task i's mean over its episodes; ``R^0`` comes
from the cached ``Baseline``, and the patched rerun replays exactly the baseline's episodes (same
target, environment, harness, executor settings, task ids, sampling keys and seed), so the two
runs are paired per episode. The reward (``RewardSpec``; the paper's defaults give
``r = Delta_B`` for a valid, firing, complete patch and 0 otherwise):

* valid, fires at run time, complete: ``Delta_B + valid_bonus`` (negative when the patch hurts);
* unparsable / invalid (schema, leakage, lint): ``valid=False``, reward ``invalid_reward``;
* a runtime no-op (valid, but no hook point took an effect the runtime honoured during the whole
  rerun and it sets no runtime config): ``noop=True``, rejected like an invalid patch (the
  public runtime's ``reject_runtime_noop_patch``): reward ``invalid_reward``;
* incomplete (some episode still failed with an infrastructure error after
  ``eval_attempts`` rounds): ``complete=False, infra_error=True``. Its reward is 0 as the method
  states, but such a sample is NOT scored for training: ``group_advantages_K`` leaves it out of
  the group statistics (an infrastructure failure is never a task failure, and never a lesson
  for the engineer). A hook's effect cannot cause one: the executor ignores effects that do not
  fit the episode and scores an environment failure on a hook's action as a task failure.

``RewardSpec.adv_baseline`` chooses what the K rewards are compared with: ``"group"`` (the
paper's ``(r_k - mu_B) / sigma_B`` over the K samples) or ``"group_with_noop"`` (a virtual "no
patch" sample of reward 0 -- the exact Delta_B of deploying nothing -- joins the mean and std, so
a patch that hurts is pushed down even when every sample of the packet hurts).

Evaluations are cached content-addressed (``RewardCache``, file-locked JSON): the key hashes the
normalised patch, the task ids, the baseline's fingerprint, the target identity, the environment,
the harness and the executor settings. K samples of one packet are parsed, validated and
installed independently; identical normalised patches are evaluated once; the distinct ones run
in parallel (in this process, or on an ``EvaluationPool`` of worker processes).
"""
from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import os
import time
import uuid
from typing import Any, Optional, Sequence

import numpy as np

from harness_jax.envs.base import Task
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.overlay import took_effect
from harness_jax.harness.patches import Patch
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.validation import validate_patch
from harness_jax.harness_r1.baseline import Baseline, EnvRef, run_keyed, run_sync
from harness_jax.harness_r1.targets import FrozenTarget, TargetIdentity, as_target
from harness_jax.rl.losses import group_advantages
from harness_jax.types import TokenSegment
from harness_jax.harness.overlay import reject_runtime_noop

REWARD_PROTOCOL = "harness-r1-reward-v1"
ADV_BASELINES = ("group", "group_with_noop")


@dataclasses.dataclass(frozen=True)
class RewardSpec:
    """How an evaluated patch is rewarded and compared (module docstring); the defaults are the
    paper's and the public code's (``invalid_patch`` score 0.0, ``valid_bonus`` 0.0, GRPO over
    the K samples)."""

    invalid_reward: float = 0.0        # reward of an invalid, unparsable or runtime no-op patch
    valid_bonus: float = 0.0           # added to Delta_B of a valid, firing, complete patch
    adv_baseline: str = "group"        # "group" | "group_with_noop" (ADV_BASELINES)

    def __post_init__(self):
        if self.adv_baseline not in ADV_BASELINES:
            raise ValueError(f"RewardSpec.adv_baseline={self.adv_baseline!r}: use one of "
                             f"{ADV_BASELINES}")
        for name in ("invalid_reward", "valid_bonus"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v != v or abs(v) > 10:
                raise ValueError(f"RewardSpec.{name}={v!r}: a finite number in [-10, 10] "
                                 "(Delta_B itself lies in [-1, 1])")

    def of(self, *, valid: bool, complete: bool, noop: bool, delta: float) -> float:
        """The reward of one evaluation."""
        if not valid or (complete and noop):
            return float(self.invalid_reward)
        if not complete:
            return 0.0                      # infrastructure: not scored anyway
        return float(delta) + float(self.valid_bonus)

    @property
    def noop_arm(self) -> bool:
        return self.adv_baseline == "group_with_noop"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class RewardCache:
    """JSON files under ``root`` keyed by a hash of everything that determines a reward; writes
    are atomic and file-locked, so pool workers and several runs can share one cache."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    @staticmethod
    def key(patch: dict, task_ids: Sequence[str], reward_context: dict) -> str:
        blob = json.dumps({"protocol": REWARD_PROTOCOL, "patch": patch,
                           "tasks": list(task_ids), "context": reward_context},
                          sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:40]

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


@dataclasses.dataclass
class PatchEvaluation:
    reward: float
    valid: bool
    complete: bool
    errors: list
    patch_id: str = ""
    delta: float = 0.0               # Delta_B even when the reward is zeroed (no-op: exactly 0)
    noop: bool = False
    infra_error: bool = False        # incomplete because of infrastructure: not scored
    patched: dict = dataclasses.field(default_factory=dict)    # task -> mean patched reward
    baseline: dict = dataclasses.field(default_factory=dict)   # task -> mean baseline reward
    episodes: int = 0                # target episodes run for this evaluation (0 when cached)
    hook_effects: dict = dataclasses.field(default_factory=dict)
    wall_s: float = 0.0
    cached: bool = False
    duplicate_of: Optional[int] = None   # in a group: the sample whose evaluation this reuses

    @property
    def deployed_delta(self) -> float:
        """Delta_B of what this sample deploys: its patch when valid, firing and complete;
        nothing (0.0) otherwise. The success change a table reports, whatever the reward."""
        return float(self.delta) if self.valid and self.complete and not self.noop else 0.0

    def task_deltas(self) -> dict:
        """Per task, ``R^P - R^0`` of what this sample deploys (0.0 for every task when it
        deploys nothing): the paired per-task values intervals are taken over."""
        if not (self.valid and self.complete and not self.noop):
            return {t: 0.0 for t in self.baseline}
        return {t: float(self.patched[t]) - float(b) for t, b in self.baseline.items()}

    @property
    def scored(self) -> bool:
        """Whether the sample counts for training (everything except infrastructure failures)."""
        return not self.infra_error

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _means(per: dict) -> dict:
    return {t: (sum(r.values()) / len(r) if r and None not in r.values() else None)
            for t, r in per.items()}


def delta_b(baseline: dict, patched: dict) -> tuple[float, bool]:
    """``(Delta_B, complete)`` from per-episode rewards ``{task: {key: reward}}``; a task's
    term is the mean over its keys of ``R^P - R^0``; incomplete when any episode lacks a
    patched result (then 0)."""
    if not baseline:
        raise ValueError("delta_b: empty baseline; run the unpatched target first")
    terms = []
    for task, base in baseline.items():
        got = patched.get(task) or {}
        if any(got.get(k) is None for k in base):
            return 0.0, False
        terms.append(sum(float(got[k]) - float(r) for k, r in base.items()) / len(base))
    return sum(terms) / len(terms), True


def check_pairing(target: FrozenTarget, env_name: str, baseline: Baseline,
                  tasks: Sequence[Task]) -> list[str]:
    """The task ids of a rerun, after checking it can be paired with ``baseline``."""
    if not isinstance(baseline, Baseline):
        raise TypeError(f"baseline must be a harness_r1.Baseline (run_baseline builds it), got "
                        f"{type(baseline).__name__}")
    if TargetIdentity.from_dict(baseline.target) != target.identity:
        raise ValueError(
            f"baseline.target: the baseline was run on {TargetIdentity.from_dict(baseline.target)}"
            f" but the rerun target is {target.identity}; run a baseline for this target "
            "(baselines are never reused across targets or serving set-ups)")
    if baseline.env["name"] != env_name:
        raise ValueError(f"env_name: {env_name!r} but the baseline ran on "
                         f"{baseline.env['name']!r}")
    bad = [i for i, t in enumerate(tasks) if not isinstance(t, Task)]
    if bad:
        raise TypeError(f"tasks[{bad[0]}]: expected a Task (the rerun needs the task data), got "
                        f"{type(tasks[bad[0]]).__name__}")
    ids = [t.task_id for t in tasks]
    if not ids:
        raise ValueError("tasks is empty; give the batch B the baseline ran on")
    baseline.check_covers(ids)
    return ids


def _reward_context(target: FrozenTarget, baseline: Baseline, harness: HarnessSpec,
                    extra: Optional[dict]) -> dict:
    ctx = {"protocol": REWARD_PROTOCOL, "target": target.identity.to_dict(),
           "baseline": baseline.fingerprint(), "env": baseline.env,
           "harness": harness.harness_id, "executor": baseline.executor}
    if extra:
        ctx["extra"] = extra
    return ctx


async def arerun(target: FrozenTarget, baseline: Baseline, tasks: Sequence[Task], *,
                 patch: Optional[Patch] = None, harness: Optional[HarnessSpec] = None,
                 tokenizer=None, eval_attempts: int = 3, concurrency: Optional[int] = None,
                 run_tag: str = "", agent=None) -> dict:
    """Reruns the baseline's episodes of ``tasks`` (paired keys and seed) with ``patch``
    installed and/or another ``harness`` and/or the target inside an ``agent`` wrapper
    (``agents.SelfRefine``: target -> engine); returns ``{"rewards", "trajectories", "errors",
    "fired", "hook_effects"}``."""
    harness = harness or baseline.harness_spec
    cfg = ExecutorConfig(**{k: v for k, v in baseline.executor.items()
                            if k in {f.name for f in dataclasses.fields(ExecutorConfig)}})
    cfg = dataclasses.replace(cfg, concurrency=concurrency or baseline.concurrency)
    by_id = {t.task_id: t for t in tasks}
    samples = [(by_id[t], k) for t, k in baseline.samples(list(by_id))]
    tag = run_tag or f"rerun-{uuid.uuid4().hex[:10]}"
    engine = agent(target) if agent is not None else target
    rewards, trajs, errors, effects = await run_keyed(
        engine, baseline.env_ref, harness, samples, seed=baseline.seed, config=cfg,
        tokenizer=tokenizer, overlay=patch, attempts=eval_attempts, run_tag=tag)
    fired = patch is not None and (bool(patch.config()) or took_effect(effects))
    return {"rewards": rewards, "trajectories": trajs, "errors": errors, "fired": fired,
            "hook_effects": effects}


async def aevaluate_patch(patch_text: Any, env_name: str, target, tasks: Sequence[Task],
                          baseline: Baseline, *, cache: Optional[RewardCache] = None,
                          eval_attempts: int = 3, require_code_hook_only: bool = False,
                          response_protocol: str = "free", tokenizer=None,
                          harness: Optional[HarnessSpec] = None,
                          concurrency: Optional[int] = None, store=None,
                          reward_context: Optional[dict] = None,
                          dry_run_contexts: Optional[Sequence[dict]] = None,
                          reward: Optional[RewardSpec] = None) -> PatchEvaluation:
    """Validates ``patch_text`` (a patch dict, its JSON, or the engineer's raw reply), reruns
    the frozen target on the baseline's episodes of ``tasks`` with it installed, and returns
    the reward (module docstring). ``harness`` reruns under another harness (the baseline's by
    default; a ReAct/Self-Refine comparison); ``reward_context`` adds keys to the cache key;
    ``dry_run_contexts`` (hook contexts recorded with ``ExecutorConfig(record_hook_contexts=
    True)``) rejects a patch that would change nothing on them before any rerun (a cheap early
    no-op check; the rerun's own no-op rule applies regardless); ``reward`` (a ``RewardSpec``,
    default the paper's) turns the evaluation into the reward."""
    spec = reward or RewardSpec()
    if eval_attempts < 1:
        raise ValueError(f"eval_attempts must be >= 1, got {eval_attempts}")
    target = as_target(target, tokenizer)
    ids = check_pairing(target, env_name, baseline, tasks)
    base_ep = {t: dict(baseline.rewards[t]) for t in ids}
    base_means = {t: baseline.mean(t) for t in ids}
    res = validate_patch(patch_text, env_name=env_name,
                         require_code_hook_only=require_code_hook_only,
                         response_protocol=response_protocol)
    if res.ok and dry_run_contexts is not None:
        msg = reject_runtime_noop(res.patch, dry_run_contexts, env_name=env_name)
        if msg:
            return PatchEvaluation(spec.of(valid=True, complete=True, noop=True, delta=0.0), True,
                                   True, [msg], patch_id=res.patch.patch_id, noop=True,
                                   baseline=base_means)
    if not res.ok:
        return PatchEvaluation(spec.invalid_reward, False, False, list(res.errors),
                               baseline=base_means)
    patch = res.patch
    harness = harness or baseline.harness_spec
    key = None
    if cache is not None:
        key = RewardCache.key(patch.to_dict(), ids,
                              _reward_context(target, baseline, harness, reward_context))
        hit = cache.get(key)
        if hit is not None:
            hit = {k: v for k, v in hit.items() if k in
                   {f.name for f in dataclasses.fields(PatchEvaluation)}}
            hit["reward"] = spec.of(valid=True, complete=hit["complete"], noop=hit["noop"],
                                    delta=hit["delta"])
            return PatchEvaluation(**{**hit, "cached": True, "episodes": 0})
    t0 = time.perf_counter()
    run = await arerun(target, baseline, list(tasks), patch=patch, harness=harness,
                       tokenizer=tokenizer, eval_attempts=eval_attempts,
                       concurrency=concurrency, run_tag=f"{patch.patch_id}-{uuid.uuid4().hex[:6]}")
    if store is not None:
        for t in run["trajectories"]:
            store.append(t)
    delta, complete = delta_b(base_ep, run["rewards"])
    errors = list(run["errors"])
    missing = sum(r is None for per in run["rewards"].values() for r in per.values())
    if not complete:
        errors.append(f"incomplete evaluation: {missing} episode(s) without a result after "
                      f"{eval_attempts} attempt(s) (infrastructure; not scored)")
    noop = complete and not run["fired"]
    if noop:
        errors.append("runtime no-op: the patch never took effect during the rerun (valid, but "
                      "it changes nothing)")
    out = PatchEvaluation(reward=spec.of(valid=True, complete=complete, noop=noop, delta=delta),
                          valid=True,
                          complete=complete, errors=errors, patch_id=patch.patch_id, delta=delta,
                          noop=noop, infra_error=not complete, patched=_means(run["rewards"]),
                          baseline=base_means, episodes=len(run["trajectories"]),
                          hook_effects=run["hook_effects"],
                          wall_s=round(time.perf_counter() - t0, 3))
    if cache is not None and complete:
        cache.put(key, out.to_dict())
    return out


def evaluate_patch(patch_text: Any, env_name: str, target, tasks: Sequence[Task],
                   baseline: Baseline, **kw) -> PatchEvaluation:
    """Synchronous ``aevaluate_patch``: ``ev.reward``, ``ev.valid``, ``ev.complete``."""
    return run_sync(aevaluate_patch(patch_text, env_name, target, tasks, baseline, **kw),
                    "evaluate_patch")


# ------------------------------------------------------------------------------------------
# K samples of one packet
# ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class GroupEvaluation:
    """The K evaluations of one packet and their sequence-level advantages."""

    evaluations: list                    # PatchEvaluation per sample, in sample order
    rewards_K: np.ndarray
    scored_K: np.ndarray                 # False: infrastructure-incomplete (not trained on)
    advantages_K: np.ndarray
    unique_patches: int                  # distinct valid patches
    evaluated: int                       # distinct patches actually rerun (not cached)
    zero_variance: bool

    def metrics(self) -> dict:
        ev = self.evaluations
        k = len(ev)
        return {"k": k, "valid_frac": sum(e.valid for e in ev) / k,
                "noop_frac": sum(e.noop for e in ev) / k,
                "infra_frac": sum(e.infra_error for e in ev) / k,
                "mean_reward": float(np.mean(self.rewards_K)),
                "mean_delta": float(np.mean([e.deployed_delta for e in ev])),
                "max_reward": float(np.max(self.rewards_K)),
                "unique_patches": self.unique_patches, "evaluated": self.evaluated,
                "duplicates": sum(e.duplicate_of is not None for e in ev),
                "valid": sum(e.valid for e in ev),
                "cache_hits": sum(e.cached and e.duplicate_of is None for e in ev),
                "zero_variance": self.zero_variance,
                "target_episodes": sum(e.episodes for e in ev)}


def group_advantages_K(rewards_K, scored_K=None, eps: float = 1e-6,
                       noop_arm: bool = False) -> tuple[np.ndarray, bool]:
    """Sequence-level GRPO advantages of one packet's K samples, ``(A_K, zero_variance)``.

    ``A_k = (r_k - mean) / max(std, eps)`` over the scored samples (``rl.losses.
    group_advantages``, population std); unscored samples (infrastructure-incomplete) get 0 and
    are left out of the mean and std. ``noop_arm``: a virtual sample of reward 0 (deploying no
    patch) joins the mean and std without getting an advantage (``RewardSpec.adv_baseline=
    "group_with_noop"``; the loop's ``Group.baseline_rewards`` is the same math). A packet whose
    rewards in the statistics are all equal (or that has fewer than two of them) is
    zero-variance: every advantage is exactly 0.
    """
    r_K = np.asarray(rewards_K, np.float32)
    if r_K.ndim != 1:
        raise ValueError(f"rewards_K must be 1-D (one packet's K rewards), got {r_K.shape}")
    s_K = np.ones_like(r_K, bool) if scored_K is None else np.asarray(scored_K, bool)
    if s_K.shape != r_K.shape:
        raise ValueError(f"scored_K shape {s_K.shape} != rewards_K shape {r_K.shape}")
    adv_K = np.zeros_like(r_K)
    idx = np.flatnonzero(s_K)
    stats = np.concatenate([np.zeros(int(noop_arm), np.float32), r_K[idx]])
    if len(stats) < 2 or stats.max() == stats.min() or not len(idx):
        return adv_K, True
    adv_K[idx] = np.asarray(group_advantages(stats[None], eps=eps))[0][int(noop_arm):]
    return adv_K, False


def advantages_NK(rewards_NK, scored_NK=None, eps: float = 1e-6,
                  noop_arm: bool = False) -> tuple[np.ndarray, dict]:
    """``group_advantages_K`` per packet of a step's ``[N packets, K samples]`` rewards;
    returns ``(A_NK, {"zero_variance_frac", "zero_variance_packets", "scored_frac"})``."""
    r_NK = np.asarray(rewards_NK, np.float32)
    if r_NK.ndim != 2:
        raise ValueError(f"rewards_NK must be [num_packets, K], got shape {r_NK.shape}")
    s_NK = np.ones_like(r_NK, bool) if scored_NK is None else np.asarray(scored_NK, bool)
    out = np.zeros_like(r_NK)
    zv = 0
    for n in range(r_NK.shape[0]):
        out[n], z = group_advantages_K(r_NK[n], s_NK[n], eps, noop_arm)
        zv += int(z)
    n = max(r_NK.shape[0], 1)
    return out, {"zero_variance_frac": zv / n, "zero_variance_packets": zv,
                 "scored_frac": float(s_NK.mean()) if s_NK.size else 0.0}


async def aevaluate_group(responses: Sequence[Any], env_name: str, target,
                          tasks: Sequence[Task], baseline: Baseline, *,
                          cache: Optional[RewardCache] = None, pool=None,
                          eps: float = 1e-6, **kw) -> GroupEvaluation:
    """Evaluates a packet's K engineer responses (module docstring): each parsed and validated
    independently, identical normalised patches evaluated once, the distinct ones in parallel
    (``pool``: an ``EvaluationPool`` of worker processes; else concurrently here). ``reward=``
    (a ``RewardSpec``) sets the rewards and the advantage baseline."""
    if not responses:
        raise ValueError("aevaluate_group: no responses")
    spec = kw.get("reward") or RewardSpec()
    target = as_target(target, kw.get("tokenizer"))
    check_pairing(target, env_name, baseline, tasks)
    proto = {k: kw[k] for k in ("require_code_hook_only", "response_protocol") if k in kw}
    first: dict[str, int] = {}
    pid_of: dict[int, str] = {}
    results: list[Optional[PatchEvaluation]] = [None] * len(responses)
    todo: list[tuple[int, Patch]] = []
    for i, r in enumerate(responses):
        v = validate_patch(r, env_name=env_name, **proto)
        if not v.ok:
            results[i] = PatchEvaluation(spec.invalid_reward, False, False, list(v.errors),
                                         baseline={t: baseline.mean(t) for t in
                                                   [x.task_id for x in tasks]})
            continue
        pid = pid_of[i] = v.patch.patch_id
        if pid in first:
            continue
        first[pid] = i
        todo.append((i, v.patch))
    if pool is not None:
        opts = {k: v for k, v in kw.items() if k != "tokenizer"}
        evs = await asyncio.gather(*(asyncio.wrap_future(pool.submit(
            p.to_dict(), env_name, tasks, baseline, **opts)) for _, p in todo))
    else:
        evs = await asyncio.gather(*(aevaluate_patch(p.to_dict(), env_name, target, tasks,
                                                     baseline, cache=cache, **kw)
                                     for _, p in todo))
    for (i, _), ev in zip(todo, evs):
        results[i] = ev
    for i in range(len(responses)):
        if results[i] is None:
            j = first[pid_of[i]]
            results[i] = dataclasses.replace(results[j], duplicate_of=j, episodes=0)
    rewards = np.asarray([e.reward for e in results], np.float32)
    scored = np.asarray([e.scored for e in results], bool)
    adv, zv = group_advantages_K(rewards, scored, eps, spec.noop_arm)
    return GroupEvaluation(evaluations=results, rewards_K=rewards, scored_K=scored,
                           advantages_K=adv, unique_patches=len(todo),
                           evaluated=sum(not e.cached for e in evs), zero_variance=zv)


def evaluate_group(responses: Sequence[Any], env_name: str, target, tasks: Sequence[Task],
                   baseline: Baseline, **kw) -> GroupEvaluation:
    """Synchronous ``aevaluate_group``."""
    return run_sync(aevaluate_group(responses, env_name, target, tasks, baseline, **kw),
                    "evaluate_group")


def engineer_segments(prompt_ids, results, group: GroupEvaluation, packet_id: str = "") -> list:
    """The K samples of one packet as the learner's ``TokenSegment``s: prompt (mask 0) +
    sampled response (mask 1, the engine's log-probs), ``advantage`` = the sample's sequence-
    level ``A_k`` shared by all its tokens, ``reward`` = ``r_k``, one group per packet.
    Unscored samples (infrastructure-incomplete evaluations) are left out: they are not a
    lesson for the engineer. ``results``: the engine's ``GenerateResult`` per sample."""
    if len(results) != len(group.evaluations):
        raise ValueError(f"engineer_segments: {len(results)} results for "
                         f"{len(group.evaluations)} evaluated samples")
    p = [int(t) for t in prompt_ids]
    out = []
    for k, (res, ev) in enumerate(zip(results, group.evaluations)):
        if not group.scored_K[k]:
            continue
        ids = [int(t) for t in res.token_ids]
        if not ids:
            continue
        out.append(TokenSegment(
            token_ids=p + ids, loss_mask=[0] * len(p) + [1] * len(ids),
            rollout_logprobs=[0.0] * len(p) + [float(x) for x in res.logprobs],
            reward=float(ev.reward), advantage=float(group.advantages_K[k]),
            group_id=packet_id, episode_id=f"{packet_id}/{k}", task_id=packet_id,
            policy_version=int(res.weight_version), turn_starts=[len(p)],
            success=ev.reward > 0))
    return out
