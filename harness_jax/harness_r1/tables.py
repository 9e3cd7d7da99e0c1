"""Baselines, hook ablations and transfer as library functions producing table rows.

An ``Arm`` is one row of the paper's main table: what is deployed for the frozen target on a
packet's batch. ``default`` deploys nothing (the baseline itself); ``react`` swaps the harness
(the public baseline's Thought/Action contract); ``self_refine`` wraps the target in the
draft-critique-refine agent (``agents.SelfRefine``); ``review_hint`` installs a fixed review hint
overlay; engineer arms (rule-based, prompt-based on any
endpoint, the SFT or GRPO engineer behind an engine) write one patch per packet. Every arm is
measured as a paired rerun against the cached baseline of the packet's batch, so an arm's
success is ``baseline success + Delta_B`` (an invalid or no-op patch deploys nothing and keeps
the baseline's success; an evaluation that stays incomplete after retries is an infrastructure
failure: counted, never scored).

``success_table(rows)`` gives per-benchmark success under each arm and the equal-weight mean
over benchmarks (the paper's "Avg."). ``ablate_hooks`` evaluates a patch with each lifecycle
hook point removed in turn. ``transfer`` has one engineer write patches for each of several
targets from their own packets and measures them on held-out tasks.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.harness.lint import HOOK_NAMES
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.validation import validate_patch
from harness_jax.harness_r1.baseline import Baseline, arun_baseline, run_sync
from harness_jax.harness_r1.packets import Packet, packet_from_baseline
from harness_jax.harness_r1.prompt import RESPONSE_PROTOCOL
from harness_jax.harness_r1.reward import aevaluate_patch, arerun, delta_b
from harness_jax.harness_r1.targets import as_target

# Which lifecycle hook point each typed action acts at (set_config is runtime config: none).
HOOK_OF_ACTION = {"add_or_edit_skill": "on_init", "edit_tool_hint": "on_init",
                  "add_guard_rule": "on_before_action", "add_recovery_rule": "on_post_step",
                  "set_config": None}


@dataclasses.dataclass
class Arm:
    """What is deployed: an ``engineer`` (packet -> patch), a ``harness`` override, an ``agent``
    wrapper around the target (target engine -> engine, e.g. ``agents.self_refine(tok)``), any
    of them or none (the default harness)."""

    name: str
    engineer: Any = None
    harness: Optional[HarnessSpec] = None
    agent: Any = None


@dataclasses.dataclass
class Row:
    arm: str
    benchmark: str
    target: str
    batches: int                     # batches scored (infrastructure-incomplete ones excluded)
    success_before: float            # mean baseline reward over those batches
    success_after: float
    delta: float
    valid_frac: float = 1.0
    noop_frac: float = 0.0
    infra_batches: int = 0
    target_episodes: int = 0
    improved_frac: float = 0.0       # scored batches whose success rose (Delta_B > 0)
    details: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


async def aevaluate_arm(arm: Arm, packets: Sequence[Packet], target, baselines: dict,
                        tasks: dict, *, seed: int = 0, tokenizer=None, cache=None,
                        eval_attempts: int = 3, response_protocol: str = RESPONSE_PROTOCOL,
                        require_code_hook_only: bool = False) -> Row:
    """One arm over packets of one benchmark. ``baselines``: baseline key -> ``Baseline`` (or a
    ``BaselineCache``); ``tasks``: task id -> ``Task`` (``PacketDataset.tasks``). Engineers'
    responses are validated exactly as in training (``response_protocol``,
    ``require_code_hook_only``); a row's success change is the Delta_B of what is deployed,
    whatever the training reward's options."""
    if not packets:
        raise ValueError("aevaluate_arm: no packets")
    target = as_target(target, tokenizer)
    envs = {p.env_name for p in packets}
    if len(envs) != 1:
        raise ValueError(f"aevaluate_arm: packets of several benchmarks {sorted(envs)}; one "
                         "row per benchmark")
    env = envs.pop()
    before, after, details = [], [], []
    valid = noop = infra = episodes = 0
    for i, pk in enumerate(packets):
        base = _baseline(baselines, pk.baseline_key)
        batch = [tasks[t] for t in pk.task_ids]
        b0 = base.success_rate
        if arm.engineer is None and arm.harness is None and arm.agent is None:
            before.append(b0)
            after.append(b0)
            valid += 1
            details.append({"packet": pk.packet_id, "before": b0, "after": b0})
            continue
        if arm.engineer is None:
            run = await arerun(target, base, batch, harness=arm.harness, tokenizer=tokenizer,
                               eval_attempts=eval_attempts, agent=arm.agent)
            d, complete = delta_b({t: base.rewards[t] for t in pk.task_ids}, run["rewards"])
            ok, is_noop, n_ep, errs = complete, False, len(run["trajectories"]), run["errors"]
            valid += int(complete)
        else:
            response = (await apropose(arm.engineer, pk, 1, seed * 1000 + i))[0]
            ev = await aevaluate_patch(response, env, target, batch, base, harness=arm.harness,
                                       cache=cache, tokenizer=tokenizer,
                                       eval_attempts=eval_attempts,
                                       response_protocol=response_protocol,
                                       require_code_hook_only=require_code_hook_only)
            d, ok, is_noop, n_ep, errs = ev.deployed_delta, ev.scored, ev.noop, ev.episodes, ev.errors
            valid += int(ev.valid)
        episodes += n_ep
        if not ok:
            infra += 1
            details.append({"packet": pk.packet_id, "infra_error": True, "errors": errs[:3]})
            continue
        noop += int(is_noop)
        before.append(b0)
        after.append(b0 + d)
        details.append({"packet": pk.packet_id, "before": b0, "after": b0 + d,
                        "delta": d, "noop": is_noop})
    n = len(before)
    mean = (lambda xs: sum(xs) / len(xs)) if n else (lambda xs: float("nan"))
    return Row(arm=arm.name, benchmark=env, target=str(target.identity), batches=n,
               success_before=mean(before), success_after=mean(after),
               delta=mean(after) - mean(before) if n else float("nan"),
               valid_frac=valid / len(packets), noop_frac=noop / len(packets),
               improved_frac=sum(a > b for a, b in zip(after, before)) / n if n else float("nan"),
               infra_batches=infra, target_episodes=episodes, details=details)


async def apropose(engineer, packet: Packet, k: int, seed: int) -> list[str]:
    """An engineer's responses from inside an event loop (model engineers sample
    asynchronously; the offline and endpoint ones are called directly)."""
    fn = getattr(engineer, "apropose", None)
    return await fn(packet, k, seed) if fn is not None else engineer.propose(packet, k, seed)


def evaluate_arm(arm: Arm, packets: Sequence[Packet], target, baselines, tasks, **kw) -> Row:
    return run_sync(aevaluate_arm(arm, packets, target, baselines, tasks, **kw),
                    "evaluate_arm")


def _baseline(baselines, key: str) -> Baseline:
    b = baselines.get(key)
    if b is None:
        raise KeyError(f"no cached baseline {key}; build the packets (and their baselines) with "
                       "the same cache first")
    return b


def success_table(rows: Sequence[Row]) -> dict:
    """``{"benchmarks": [...], "arms": {arm: {benchmark: success, "mean": equal-weight mean}}}``
    (a benchmark an arm has no row for makes its mean NaN rather than silently re-weighting)."""
    benches = sorted({r.benchmark for r in rows})
    arms: dict = {}
    for r in rows:
        arms.setdefault(r.arm, {})[r.benchmark] = r.success_after
    for a, per in arms.items():
        vals = [per.get(b, float("nan")) for b in benches]
        per["mean"] = sum(vals) / len(vals) if vals else float("nan")
    return {"benchmarks": benches, "arms": arms}


def table_markdown(table: dict, percent: bool = True) -> str:
    benches = table["benchmarks"]
    scale = 100.0 if percent else 1.0
    head = "| arm | " + " | ".join(benches) + " | mean |\n|---|" + "---|" * (len(benches) + 1)
    lines = [head]
    for arm, per in table["arms"].items():
        cells = [per.get(b, float("nan")) for b in benches] + [per["mean"]]
        lines.append(f"| {arm} | " + " | ".join(
            "-" if isinstance(v, float) and math.isnan(v) else f"{v * scale:.1f}"
            for v in cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# Hook ablation
# ------------------------------------------------------------------------------------------
def hook_points(patch: dict) -> list[str]:
    """The lifecycle hook points a (normalised) patch acts at, in lifecycle order."""
    used = set()
    for a in patch["actions"]:
        h = a["hook"] if a["type"] == "add_code_hook" else HOOK_OF_ACTION.get(a["type"])
        if h:
            used.add(h)
    return [h for h in HOOK_NAMES if h in used]


def without_hook(patch: dict, hook: str) -> dict:
    """The patch with every action at ``hook`` removed."""
    if hook not in HOOK_NAMES:
        raise ValueError(f"hook {hook!r}: expected one of {HOOK_NAMES}")
    keep = [a for a in patch["actions"]
            if (a["hook"] if a["type"] == "add_code_hook" else HOOK_OF_ACTION.get(a["type"]))
            != hook]
    return dict(patch, actions=keep)


async def aablate_hooks(patch_text: Any, env_name: str, target, tasks: Sequence[Task],
                        baseline: Baseline, **kw) -> list[dict]:
    """Delta_B of the full patch and of the patch without each of its hook points.

    Rows ``{"removed": None | hook, "delta", "drop"}``; ``drop = full delta - ablated delta``
    (how much that hook point contributes). Removing the only hook point leaves no patch:
    its delta is 0 by definition (nothing is deployed)."""
    res = validate_patch(patch_text, env_name=env_name,
                         response_protocol=kw.get("response_protocol", "free"))
    if not res.ok:
        raise ValueError(f"aablate_hooks: the patch is invalid: {res.errors[:3]}")
    patch = res.patch.to_dict()
    full = await aevaluate_patch(patch, env_name, target, tasks, baseline, **kw)
    rows = [{"removed": None, "delta": full.delta, "drop": 0.0, "complete": full.complete}]
    for hook in hook_points(patch):
        reduced = without_hook(patch, hook)
        if not reduced["actions"]:
            rows.append({"removed": hook, "delta": 0.0, "drop": full.delta, "complete": True})
            continue
        ev = await aevaluate_patch(reduced, env_name, target, tasks, baseline, **kw)
        rows.append({"removed": hook, "delta": ev.delta, "drop": full.delta - ev.delta,
                     "complete": ev.complete})
    return rows


def ablate_hooks(patch_text: Any, env_name: str, target, tasks: Sequence[Task],
                 baseline: Baseline, **kw) -> list[dict]:
    return run_sync(aablate_hooks(patch_text, env_name, target, tasks, baseline, **kw),
                    "ablate_hooks")


# ------------------------------------------------------------------------------------------
# Transfer
# ------------------------------------------------------------------------------------------
async def atransfer(engineer, targets: Sequence[Any], env, harness: HarnessSpec,
                    packet_tasks: Sequence[Task], heldout_tasks: Sequence[Task], *,
                    seeds: Sequence[int] = (0,), n_per_task: int = 1,
                    budget_tokens: int = 18000, baseline_cache=None, reward_cache=None,
                    tokenizer=None, config=None) -> list[dict]:
    """For each target: its baseline on ``packet_tasks`` -> its packet -> one patch from
    ``engineer`` (a new patch per target, as in the paper) -> Delta_B on ``heldout_tasks``,
    paired per seed. Rows ``{"target", "valid", "packet_success", "heldout_before",
    "heldout_after", "delta", "delta_std", "seeds"}``."""
    rows = []
    for spec in targets:
        target = as_target(spec, tokenizer)
        base = await arun_baseline(target, env, packet_tasks, harness, n_per_task=n_per_task,
                                   seed=seeds[0], cache=baseline_cache, tokenizer=tokenizer,
                                   config=config)
        pk = packet_from_baseline(base, budget_tokens)
        response = (await apropose(engineer, pk, 1, seeds[0]))[0]
        deltas, befores = [], []
        valid = False
        for s in seeds:
            held = await arun_baseline(target, env, heldout_tasks, harness,
                                       n_per_task=n_per_task, seed=s, cache=baseline_cache,
                                       tokenizer=tokenizer, config=config)
            ev = await aevaluate_patch(response, held.env["name"], target, heldout_tasks, held,
                                       cache=reward_cache, tokenizer=tokenizer,
                                       response_protocol=RESPONSE_PROTOCOL)
            valid = ev.valid
            if ev.scored:
                deltas.append(ev.deployed_delta)
                befores.append(held.success_rate)
        mean_d = statistics.fmean(deltas) if deltas else float("nan")
        b0 = statistics.fmean(befores) if befores else float("nan")
        rows.append({"target": str(target.identity), "target_key": target.key, "valid": valid,
                     "packet_success": base.success_rate, "packet_failures": pk.num_failures,
                     "heldout_before": b0, "heldout_after": b0 + mean_d, "delta": mean_d,
                     "delta_std": statistics.pstdev(deltas) if len(deltas) > 1 else 0.0,
                     "seeds": len(deltas)})
    return rows


def transfer(engineer, targets, env, harness, packet_tasks, heldout_tasks, **kw) -> list[dict]:
    return run_sync(atransfer(engineer, targets, env, harness, packet_tasks, heldout_tasks,
                              **kw), "transfer")
