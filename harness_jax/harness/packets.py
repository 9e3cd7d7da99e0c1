"""Failure packets: the deterministic, sanitised, token-budgeted view of a batch of failures that a
harness engineer (Harness-R1) reads before writing an overlay patch.

Format (Markdown, after the published "Direct Failure Trace Packet"): a header (benchmark, source
run, candidate/included counts, selection strategy), engineer instructions, then per trace the
final reward, status and turn count, runtime signals counted from the actions (tool calls, repeated
actions/observations, text-only turns, parse errors, harness interventions, environment-specific
counters), and a transcript: the first user message, ``ASSISTANT:`` text (600 chars),
``ASSISTANT_TOOL: name args`` and ``OBSERVATION:`` (middle-truncated to 1,200 chars).

Selection: failures are episodes with reward below ``threshold`` (infrastructure failures are not
failures); at most ``max_traces``, taken round-robin across batches (or lowest reward first),
until the estimated token budget (chars / 4) is used. Sanitising masks ASIN-like product ids and
absolute paths under /mnt, /root, /home, /tmp. No model labels the failures.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import re
from typing import Iterable, Optional, Sequence

from harness_jax.harness.specs import truncate_text
from harness_jax.harness.trajectory import Trajectory

INSTRUCTIONS = (
    "## Engineer instructions\n"
    "- Infer the recurring failure modes across these traces; fix causes, not single episodes.\n"
    "- Do not encode product ids, instance ids, task indices or answers in the patch.\n"
    "- Prefer auditable typed actions and small code hooks; hard-block only on conditions the "
    "runtime can observe.\n"
    "- Answer with reasoning, then one <patch>{...}</patch> JSON block "
    "(schema_version harness-r1-patch-v1).")
_ASIN = re.compile(r"\bB0[0-9A-Z]{8}\b")
_PATH = re.compile(r"(?<![\w.])/(?:mnt|root|home|tmp)(?:/[^\s'\"\]\)]*|(?![\w.\-]))")


def sanitize(text: str) -> str:
    return _ASIN.sub("[PRODUCT_ID]", _PATH.sub("[PATH]", str(text)))


@dataclasses.dataclass
class FailurePacket:
    text: str
    included: list[str]          # episode ids, in packet order
    num_candidates: int
    est_tokens: int
    meta: dict

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def runtime_signals(traj: Trajectory) -> dict:
    """Counters computed from the recorded actions and observations."""
    sig: collections.Counter = collections.Counter()
    last_act, last_obs = None, None
    for ev in traj.turns:
        acts = ev.action or []
        if not acts:
            sig["text_only_turns" if not ev.parse_errors else "unparsable_turns"] += 1
        for a in acts:
            key = json.dumps(a, sort_keys=True)
            if isinstance(a, dict):
                sig[f"tool:{a.get('name')}"] += 1
            else:
                sig["text_actions"] += 1
            if key == last_act:
                sig["repeated_actions"] += 1
            last_act = key
        if ev.observation and ev.observation == last_obs:
            sig["repeated_observations"] += 1
        last_obs = ev.observation
        low = (ev.observation or "").lower()
        if "nothing happens" in low:
            sig["nothing_happens"] += 1
        if "error" in low:
            sig["error_observations"] += 1
        sig["hook_interventions"] += len(ev.interventions)
    if traj.status in ("max_turns", "context_full"):
        sig["task_limit_reached"] += 1
    return {k: v for k, v in sorted(sig.items()) if v}


def render_trace(traj: Trajectory, index: int, first_user: Optional[str] = None) -> str:
    lines = [f"### Trace {index}", f"- final_reward: {traj.reward:.3f}",
             f"- status: {traj.status}", f"- turns: {len(traj.turns)}"]
    sig = runtime_signals(traj)
    if sig:
        lines.append("- runtime signals: " + ", ".join(f"{k}={v}" for k, v in sig.items()))
    lines.append("")
    if first_user:
        lines.append("USER: " + truncate_text(sanitize(first_user), 1200))
    for ev in traj.turns:
        text = ev.raw_text
        if "</think>" in text:
            text = text.rsplit("</think>", 1)[1]
        text = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S).strip()
        if text:
            lines.append("ASSISTANT: " + truncate_text(sanitize(text), 600, "head"))
        for a in ev.action or []:
            if isinstance(a, dict):
                lines.append(f"ASSISTANT_TOOL: {a.get('name')} "
                             + sanitize(json.dumps(a.get('arguments'), ensure_ascii=False)))
            else:
                lines.append("ASSISTANT_ACTION: " + truncate_text(sanitize(a), 600, "head"))
        for iv in ev.interventions:
            lines.append(f"HARNESS[{iv['hook']}/{iv['source']}]: "
                         + sanitize(json.dumps(iv["result"], ensure_ascii=False))[:300])
        if ev.parse_errors:
            lines.append("PARSE_ERROR: " + sanitize("; ".join(ev.parse_errors))[:300])
        if ev.observation:
            lines.append("OBSERVATION: " + truncate_text(sanitize(ev.observation), 1200))
    return "\n".join(lines)


def build_failure_packet(trajectories: Iterable[Trajectory], benchmark: str, *,
                         source_run: str = "", threshold: float = 1.0, max_traces: int = 20,
                         token_budget: int = 18000, strategy: str = "round_robin",
                         batch_key: str = "group_id",
                         first_user: Optional[dict] = None) -> FailurePacket:
    """Builds the packet from stored trajectories (deterministic for a given input).

    ``batch_key``: the trajectory attribute that names a batch for round-robin selection.
    ``first_user``: optional task_id -> first user message (the task statement) to include.
    """
    if strategy not in ("round_robin", "lowest_reward"):
        raise ValueError(f"strategy must be 'round_robin' or 'lowest_reward', got {strategy!r}")
    fails = [t for t in trajectories if not t.infra_error and float(t.reward) < threshold]
    fails.sort(key=lambda t: (t.reward, t.task_id, t.episode_id))
    if strategy == "round_robin":
        batches: dict = collections.OrderedDict()
        for t in sorted(fails, key=lambda t: (str(getattr(t, batch_key, "")), t.reward,
                                              t.episode_id)):
            batches.setdefault(str(getattr(t, batch_key, "")), []).append(t)
        order = []
        queues = [collections.deque(v) for v in batches.values()]
        while any(queues):
            for q in queues:
                if q:
                    order.append(q.popleft())
    else:
        order = fails
    header = (f"# Harness-R1 Direct Failure Trace Packet\n\n- benchmark: {benchmark}\n"
              f"- source run: {sanitize(source_run) or '-'}\n- candidates: {len(fails)}\n")
    blocks, included = [], []
    used = len(header) + len(INSTRUCTIONS) + 64
    for t in order:
        if len(included) >= max_traces:
            break
        block = render_trace(t, len(included) + 1, (first_user or {}).get(t.task_id))
        if included and (used + len(block)) / 4 > token_budget:
            break
        if not included and (used + len(block)) / 4 > token_budget:
            block = block[: max(0, token_budget * 4 - used)]
        blocks.append(block)
        included.append(t.episode_id)
        used += len(block) + 2
    text = (header + f"- included: {len(included)}\n- selection: {strategy}, reward < "
            f"{threshold}\n\n" + INSTRUCTIONS + "\n\n## Traces\n\n" + "\n\n".join(blocks))
    return FailurePacket(text=text, included=included, num_candidates=len(fails),
                         est_tokens=len(text) // 4,
                         meta={"benchmark": benchmark, "threshold": threshold,
                               "strategy": strategy, "max_traces": max_traces,
                               "token_budget": token_budget})


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The Harness-R1 baseline ``R^0`` of a batch: the unpatched target's reward for each task
    and sampling key, and the executor seed it sampled with.

    ``evaluate_patch`` reruns exactly these ``(task, sampling_key)`` episodes with the patch
    installed and the same seed, so each patched episode is paired with its baseline episode
    (identical sampling noise; a patch that changes nothing reproduces the baseline rewards).
    ``rewards``: task_id -> {sampling_key: reward}; ``seed``: ``ExecutorConfig.seed`` of the run
    (None: unseeded, so reruns are paired by key only).
    """

    rewards: dict
    seed: Optional[int] = None

    def __post_init__(self):
        for task_id, per_key in self.rewards.items():
            if not isinstance(per_key, dict) or not per_key:
                raise ValueError(f"Baseline.rewards[{task_id!r}]: expected a non-empty "
                                 "{sampling_key: reward} dict (build it with baseline_rewards)")

    def mean(self, task_id: str) -> float:
        r = self.rewards[task_id]
        return sum(r.values()) / len(r)

    def samples(self, task_ids: Sequence[str]) -> list[tuple[str, str]]:
        """``(task_id, sampling_key)`` of every baseline episode of these tasks, in order."""
        return [(t, k) for t in task_ids for k in sorted(self.rewards[t])]

    def to_dict(self) -> dict:
        return {"rewards": {t: dict(r) for t, r in self.rewards.items()}, "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict) -> "Baseline":
        return cls(rewards={t: {k: float(v) for k, v in r.items()}
                            for t, r in d["rewards"].items()}, seed=d.get("seed"))

    def fingerprint(self) -> str:
        return hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def baseline_rewards(trajectories: Sequence[Trajectory]) -> Baseline:
    """The cached Harness-R1 baseline ``R^0`` from the unpatched target's trajectories (episodes
    with infrastructure errors have no reward and are left out)."""
    rewards: dict[str, dict[str, float]] = collections.defaultdict(dict)
    seeds = set()
    for t in trajectories:
        if t.infra_error:
            continue
        key = t.meta.get("sampling_key") or t.episode_id
        if key in rewards[t.task_id]:
            raise ValueError(f"baseline_rewards: two episodes of task {t.task_id} share the "
                             f"sampling key {key!r}; give each episode its own key")
        rewards[t.task_id][key] = float(t.reward)
        seeds.add(t.meta.get("sampling_seed"))
    if len(seeds) > 1:
        raise ValueError(f"baseline_rewards: the trajectories were sampled with different seeds "
                         f"{sorted(seeds, key=str)}; a baseline comes from one run")
    return Baseline(rewards=dict(rewards), seed=seeds.pop() if seeds else None)
