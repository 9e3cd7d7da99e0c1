"""Failure packets: the deterministic, sanitised, token-budgeted view of a batch's failures that
the engineer reads, and the packet dataset (train / validation / held-out splits).

``extract_packet(trajectories, budget_tokens)`` keeps the failed episodes (reward below the
threshold; infrastructure failures are not failures) and writes, within the budget (tokens
estimated as characters / 4, as the published packets do):

* a header: benchmark, batch size, baseline success, failures and how many are included;
* the runtime constraints the engineer must respect (turn limit, protocol, tools), when known;
* the engineer instructions (``INSTRUCTIONS``);
* per included failure: the task category, the outcome (final reward, status, turns), the end
  state (the agent's final answer, rounds, status; never gold labels), the runtime signals, the
  task statement and the transcript (``harness.traces.render_transcript``: assistant text, tool
  calls, harness interventions, parse errors, observations, each truncated).

Selection is round-robin across tasks (one failure of each task before a second of any), tasks
and episodes in sorted order, so the same trajectories always give the same packet, whatever
order they come in. IDs and absolute paths are masked (``harness.traces.sanitize``).
``packet.features`` are counters over the failures that the offline rule-based engineer reads.

Splits: packet ``train`` / ``validation`` / ``held_out`` come from the environments' own splits
(``PACKET_SPLITS``: train / search / selection). The ``test`` split stays sealed: a packet split
drawn from it loads only inside ``registry.sealed_test_access`` (final evaluation).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import re
import time
from typing import Any, Callable, Iterable, Optional, Sequence
import contextlib

from harness_jax.envs.base import Task
from harness_jax.harness.specs import truncate_text
from harness_jax.harness.traces import render_transcript, runtime_signals, sanitize
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_r1.baseline import EnvRef, run_baseline
from harness_jax.harness_r1.targets import TargetIdentity, as_target
from harness_jax.envs import registry
# which actions commit an episode's answer per benchmark: one table for the feature counters and
# the fix library (re-exported here)
from harness_jax.harness.fixes import ENV_PROFILES, env_profile  # noqa: F401

log = logging.getLogger(__name__)

PACKET_FORMAT = "harness-r1-packet-v1"
INSTRUCTIONS = (
    "## Engineer instructions\n"
    "- Infer the recurring failure modes across these traces; fix causes, not single episodes.\n"
    "- Do not encode product ids, instance ids, task indices or answers in the patch.\n"
    "- Prefer auditable typed actions and small code hooks; hard-block only on conditions the "
    "runtime can observe.\n"
    "- Answer with reasoning, then one <patch>{...}</patch> JSON block "
    "(schema_version harness-r1-patch-v1).")
PACKET_SPLITS = {"train": "train", "validation": "search", "held_out": "selection"}
# Evaluation fields that describe the end state without revealing the gold answer.
END_STATE_FIELDS = ("status", "answer", "rounds", "steps", "game_score")
TRUNCATED = "\n[... trace truncated to fit the packet budget ...]"

_ERROR_WORDS = re.compile(r"error|exception|invalid|not found|failed|unknown column|no such",
                          re.I)


def is_final_action(action: Any, env_name: str) -> bool:
    """Whether an action (JSON form) commits the episode's answer in ``env_name``."""
    prof = env_profile(env_name)
    if isinstance(action, dict):
        if action.get("name") not in prof["final_tools"]:
            return False
        pattern = prof["final_tools"][action["name"]]
        args = json.dumps(action.get("arguments"), ensure_ascii=False)
        return pattern is None or re.search(pattern, args, re.I) is not None
    if isinstance(action, str) and prof["final_text"]:
        return re.search(prof["final_text"], action, re.I) is not None
    return False


def _sort_key(t: Trajectory) -> tuple:
    return (t.task_id, str(t.meta.get("sampling_key") or t.episode_id))


def failure_features(failures: Sequence[Trajectory], env_name: str) -> dict:
    """Counters over failed episodes (the rule-based engineer's input)."""
    sig: collections.Counter = collections.Counter()
    feats: collections.Counter = collections.Counter()
    statuses: collections.Counter = collections.Counter()
    cats: collections.Counter = collections.Counter()
    for t in failures:
        sig.update(runtime_signals(t))
        statuses[t.status] += 1
        cats[str(t.meta.get("category") or "-")] += 1
        acts = [a for ev in t.turns for a in (ev.action or [])]
        obs = [ev.observation or "" for ev in t.turns]
        finals = [i for i, ev in enumerate(t.turns)
                  if any(is_final_action(a, env_name) for a in (ev.action or []))]
        if finals:
            first = finals[0]
            if first == 0:
                feats["answered_without_inspecting"] += 1
            elif _ERROR_WORDS.search(obs[first - 1]):
                feats["answered_after_error"] += 1
            else:
                feats["wrong_answer"] += 1
        elif t.status in ("max_turns", "context_full", "time_limit", "repeated_action"):
            feats["ran_out_of_turns"] += 1
        if any(_ERROR_WORDS.search(o) for o in obs):
            feats["saw_errors"] += 1
        if any(ev.parse_errors or not ev.action for ev in t.turns):
            feats["format_errors"] += 1
        if len(acts) != len({json.dumps(a, sort_keys=True) for a in acts}):
            feats["repeated_actions"] += 1
        if any("nothing happens" in o.lower() for o in obs):
            feats["no_effect_actions"] += 1
    return {"episodes": len(failures), "failure_modes": dict(sorted(feats.items())),
            "signals": dict(sorted(sig.items())), "statuses": dict(sorted(statuses.items())),
            "categories": dict(sorted(cats.items()))}


def select_failures(failures: Sequence[Trajectory], strategy: str = "round_robin"
                    ) -> list[Trajectory]:
    """Order of inclusion: ``round_robin`` over tasks (sorted), or ``lowest_reward`` first."""
    if strategy not in ("round_robin", "lowest_reward"):
        raise ValueError(f"strategy must be 'round_robin' or 'lowest_reward', got {strategy!r}")
    ordered = sorted(failures, key=lambda t: (float(t.reward),) + _sort_key(t))
    if strategy == "lowest_reward":
        return ordered
    by_task: dict = collections.OrderedDict()
    for t in sorted(failures, key=_sort_key):
        by_task.setdefault(t.task_id, collections.deque()).append(t)
    out = []
    while any(by_task.values()):
        for q in by_task.values():
            if q:
                out.append(q.popleft())
    return out


def _end_state(traj: Trajectory) -> str:
    ev = traj.evaluation or {}
    parts = [f"{k}={sanitize(json.dumps(ev[k], ensure_ascii=False))[:200]}"
             for k in END_STATE_FIELDS if k in ev]
    return "; ".join(parts)


def render_failure(traj: Trajectory, index: int) -> str:
    """One failure's block: outcome, end state, runtime signals, the task statement, then the
    transcript (``harness.traces.render_transcript``, the assistant text left out when it is
    exactly the text action sent)."""
    lines = [f"### Failure {index}", f"- task category: {traj.meta.get('category') or '-'}",
             f"- outcome: reward {float(traj.reward):.3f}, status {traj.status}, "
             f"{len(traj.turns)} turn(s)"]
    end = _end_state(traj)
    if end:
        lines.append(f"- end state: {end}")
    sig = runtime_signals(traj)
    if sig:
        lines.append("- runtime signals: " + ", ".join(f"{k}={v}" for k, v in sig.items()))
    lines.append("")
    statement = traj.meta.get("task_statement")
    if statement:
        lines.append("TASK: " + truncate_text(sanitize(statement), 1200))
    return "\n".join(lines + render_transcript(traj, dedupe_text_actions=True))


def _constraints_text(constraints: Optional[dict]) -> str:
    if not constraints:
        return ""
    rows = [f"- {k.replace('_', ' ')}: {sanitize(json.dumps(v, ensure_ascii=False))}"
            for k, v in sorted(constraints.items()) if v not in (None, "", [], {})]
    return "## Runtime constraints\n" + "\n".join(rows) + "\n\n" if rows else ""


@dataclasses.dataclass
class Packet:
    """A failure packet and the batch it came from."""

    text: str
    env_name: str
    est_tokens: int
    included: list                      # sampling keys (or episode ids) in packet order
    num_failures: int
    features: dict
    task_ids: list = dataclasses.field(default_factory=list)   # the batch B (reruns use all)
    baseline_key: str = ""
    target_key: str = ""
    baseline_success: Optional[float] = None
    split: str = ""
    meta: dict = dataclasses.field(default_factory=dict)

    @property
    def packet_id(self) -> str:
        blob = json.dumps({"text": self.text, "tasks": self.task_ids,
                           "baseline": self.baseline_key}, sort_keys=True)
        return "p-" + hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def task_id(self) -> str:
        """The packet id: the training loop identifies the items of its stream by ``task_id``
        (the engineer's stream is a stream of packets)."""
        return self.packet_id

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["packet_id"] = self.packet_id
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Packet":
        d = dict(d)
        d.pop("packet_id", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"Packet: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)


def extract_packet(trajectories: Iterable[Trajectory], budget_tokens: int, *,
                   env_name: Optional[str] = None, threshold: float = 1.0,
                   max_traces: int = 20, strategy: str = "round_robin",
                   constraints: Optional[dict] = None) -> Packet:
    """The failure packet of a batch's trajectories (deterministic; module docstring).

    ``budget_tokens``: the packet's estimated size (chars / 4) never exceeds it; the first
    failure is truncated when it alone does not fit (and left out when fewer than 200
    characters would remain for it). ``env_name`` defaults to the
    trajectories' environment. ``constraints``: runtime facts shown to the engineer (e.g.
    ``{"max_turns": 20, "protocol": "text"}``).
    """
    trajs = list(trajectories)
    if not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise ValueError(f"budget_tokens must be a positive int, got {budget_tokens!r}")
    if max_traces < 1:
        raise ValueError(f"max_traces must be >= 1, got {max_traces}")
    for i, t in enumerate(trajs):
        if not isinstance(t, Trajectory):
            raise TypeError(f"trajectories[{i}]: expected a Trajectory, got {type(t).__name__}")
    envs = sorted({t.env_name for t in trajs})
    env = env_name or (envs[0] if len(envs) == 1 else "")
    if not env:
        raise ValueError(f"extract_packet: trajectories of several environments {envs}; a packet "
                         "is one benchmark's batch (give env_name, or split them)")
    scored = [t for t in trajs if not t.infra_error]
    failures = [t for t in scored if float(t.reward) < threshold]
    order = select_failures(failures, strategy)
    tasks = sorted({t.task_id for t in scored})
    success = (sum(float(t.reward) for t in scored) / len(scored)) if scored else 0.0
    fixed_head = (f"# Harness-R1 Failure Packet\n\n- benchmark: {env}\n"
                  f"- batch: {len(tasks)} tasks, {len(scored)} episodes, mean baseline reward "
                  f"{success:.3f}\n")
    body_head = _constraints_text(constraints) + INSTRUCTIONS + "\n\n## Failures\n\n"

    def assemble(blocks: list[str]) -> str:
        return (fixed_head + f"- failures: {len(failures)} (included {len(blocks)}; "
                f"{strategy} over tasks, reward < {threshold:g})\n\n" + body_head
                + "\n\n".join(blocks))

    limit = budget_tokens * 4
    if len(assemble([])) > limit:
        raise ValueError(f"budget_tokens={budget_tokens} is too small: the packet's header and "
                         f"instructions alone need {len(assemble([])) // 4 + 1} tokens")
    blocks: list[str] = []
    included: list[str] = []
    for t in order:
        if len(blocks) >= max_traces:
            break
        block = render_failure(t, len(blocks) + 1)
        if len(assemble(blocks + [block])) > limit:
            if blocks:
                break
            room = limit - len(assemble([""])) - len(TRUNCATED)
            if room < 200:
                break
            block = block[:room] + TRUNCATED
        blocks.append(block)
        included.append(str(t.meta.get("sampling_key") or t.episode_id))
    text = assemble(blocks)
    feats = failure_features(failures, env)
    return Packet(text=text, env_name=env, est_tokens=len(text) // 4, included=included,
                  num_failures=len(failures), features=feats, task_ids=tasks,
                  baseline_success=success,
                  meta={"format": PACKET_FORMAT, "budget_tokens": budget_tokens,
                        "threshold": threshold, "strategy": strategy, "max_traces": max_traces,
                        "constraints": dict(constraints or {})})


def constraints_of(baseline) -> dict:
    """The runtime facts of a baseline's harness and environment shown in its packet."""
    h = baseline.harness
    rules = h.get("rules", {})
    out = {"max_turns": rules.get("max_turns"),
           "protocol": baseline.env.get("kwargs", {}).get("protocol"),
           "calling_convention": h.get("calling_convention")}
    tools = h.get("tools")
    if tools:
        out["tools"] = [(t.get("function", t) or {}).get("name") for t in tools]
    return out


def packet_from_baseline(baseline, budget_tokens: int, *, split: str = "", **kw) -> Packet:
    """``extract_packet`` over a cached baseline, tagged with its batch and target."""
    pk = extract_packet(baseline.trajectories, budget_tokens, env_name=baseline.env["name"],
                        constraints=constraints_of(baseline), **kw)
    pk.task_ids = list(baseline.task_ids)
    pk.baseline_key = baseline.key
    pk.target_key = _target_key(baseline.target)
    pk.baseline_success = baseline.success_rate
    pk.split = split
    return pk


def _target_key(target: dict) -> str:
    return TargetIdentity.from_dict(target).key


# ------------------------------------------------------------------------------------------
# The packet dataset
# ------------------------------------------------------------------------------------------
class PacketDataset:
    """``root/packets-<split>.jsonl`` plus ``root/manifest.json`` (how they were made)."""

    SPLITS = tuple(PACKET_SPLITS)

    def __init__(self, root: str):
        self.root = os.path.abspath(root)

    def path(self, split: str) -> str:
        if split not in self.SPLITS:
            raise ValueError(f"packet split {split!r}: expected one of {self.SPLITS}")
        return os.path.join(self.root, f"packets-{split}.jsonl")

    def write(self, split: str, packets: Sequence[Packet]) -> str:
        os.makedirs(self.root, exist_ok=True)
        p = self.path(split)
        tmp = p + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for pk in packets:
                f.write(json.dumps(pk.to_dict(), ensure_ascii=False) + "\n")
        os.replace(tmp, p)
        return p

    def load(self, split: str) -> list[Packet]:
        p = self.path(split)
        if not os.path.exists(p):
            raise FileNotFoundError(f"no {split} packets at {p}; build them with "
                                    "`python -m harness_jax.harness_r1.dataset packets ...`")
        with open(p, encoding="utf-8") as f:
            return [Packet.from_dict(json.loads(line)) for line in f if line.strip()]

    def write_tasks(self, split: str, tasks: Sequence) -> str:
        """The tasks of a split's packets (reruns need the task data, not only the ids)."""
        os.makedirs(self.root, exist_ok=True)
        p = self.path(split).replace("packets-", "tasks-")
        with open(p + ".tmp", "w", encoding="utf-8") as f:
            for t in tasks:
                f.write(json.dumps({"env_name": t.env_name, "data": t.data, "split": t.split,
                                    "category": t.category}, ensure_ascii=False) + "\n")
        os.replace(p + ".tmp", p)
        return p

    def tasks(self, split: Optional[str] = None) -> dict:
        """task id -> ``Task`` over one split (or all)."""
        out = {}
        for s in ([split] if split else self.splits()):
            p = self.path(s).replace("packets-", "tasks-")
            if not os.path.exists(p):
                continue
            with open(p, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        d = json.loads(line)
                        t = Task(d["env_name"], d["data"], d.get("split", "train"),
                                 d.get("category"))
                        out[t.task_id] = t
        return out

    def batch(self, packet: Packet) -> list:
        """The packet's batch B as tasks (in the packet's order)."""
        tasks = self.tasks(packet.split or None)
        missing = [t for t in packet.task_ids if t not in tasks]
        if missing:
            raise KeyError(f"packet {packet.packet_id}: task(s) {missing[:3]} are not in the "
                           f"dataset at {self.root}")
        return [tasks[t] for t in packet.task_ids]

    def splits(self) -> list[str]:
        return [s for s in self.SPLITS if os.path.exists(self.path(s))]

    def write_manifest(self, manifest: dict) -> None:
        os.makedirs(self.root, exist_ok=True)
        with open(os.path.join(self.root, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)

    def manifest(self) -> dict:
        p = os.path.join(self.root, "manifest.json")
        if not os.path.exists(p):
            return {}
        with open(p, encoding="utf-8") as f:
            return json.load(f)


def chunk(tasks: Sequence, size: int) -> list[list]:
    """Consecutive batches of ``size`` (a short tail batch is dropped: every B has n tasks)."""
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {size}")
    return [list(tasks[i:i + size]) for i in range(0, len(tasks) - size + 1, size)]


def build_packet_dataset(target, env, harness, out_dir: str, *, batches: dict,
                         batch_size: int = 10, budget_tokens: int = 18000, n_per_task: int = 1,
                         seed: int = 0, cache=None, tokenizer=None, config=None,
                         env_splits: Optional[dict] = None, split_kwargs: Optional[dict] = None,
                         progress: Optional[Callable[[str, int, int], None]] = None
                         ) -> PacketDataset:
    """Runs (or reads from ``cache``) the baselines of ``batches[split]`` batches of
    ``batch_size`` tasks from each packet split's environment split and writes the packets.

    ``batches``: packet split -> number of batches, e.g. ``{"train": 20, "held_out": 5}``.
    ``env_splits``: packet split -> environment split (default ``PACKET_SPLITS``).
    Batches without a failure give no packet (counted in the manifest). The engineer's training
    data: it is built inside ``registry.training_scope`` unless a packet split is mapped to the
    environment's ``test`` split (a final-evaluation set, built inside the caller's
    ``registry.sealed_test_access``).
    """
    mapping = dict(PACKET_SPLITS, **(env_splits or {}))
    unknown = sorted(set(batches) - set(PacketDataset.SPLITS))
    if unknown:
        raise ValueError(f"batches: unknown packet split(s) {unknown}; use {PacketDataset.SPLITS}")
    evaluation = any(mapping[s] == "test" for s in batches)
    with (contextlib.nullcontext() if evaluation else registry.training_scope("harness_r1 packets")):
        return _build_packet_dataset(target, env, harness, out_dir, batches, batch_size, budget_tokens,
                                     n_per_task, seed, cache, tokenizer, config, mapping, split_kwargs,
                                     progress)


def _build_packet_dataset(target, env, harness, out_dir, batches, batch_size, budget_tokens, n_per_task,
                          seed, cache, tokenizer, config, mapping, split_kwargs, progress) -> PacketDataset:
    target = as_target(target, tokenizer)
    env = EnvRef.of(env)
    ds = PacketDataset(out_dir)
    manifest = {"format": PACKET_FORMAT, "target": target.identity.to_dict(),
                "env": env.to_dict(), "harness_id": harness.harness_id,
                "batch_size": batch_size, "budget_tokens": budget_tokens,
                "n_per_task": n_per_task, "seed": seed, "splits": {}}
    t0 = time.perf_counter()
    for split, n_batches in batches.items():
        env_split = mapping[split]
        tasks = registry.load_split(env.name, env_split, n=n_batches * batch_size, seed=seed,
                                    **(split_kwargs or {}))
        groups = chunk(tasks, batch_size)[:n_batches]
        packets, episodes, cached, no_failure, kept = [], 0, 0, 0, []
        for i, batch in enumerate(groups):
            base = run_baseline(target, env, batch, harness, n_per_task=n_per_task, seed=seed,
                                cache=cache, tokenizer=tokenizer, config=config)
            if not base.complete:
                raise RuntimeError(f"{split} batch {i}: the baseline has {len(base.missing)} "
                                   "episodes with infrastructure failures; fix the environment "
                                   "or target and rerun (nothing was scored)")
            episodes += 0 if base.cached else len(base.trajectories)
            cached += int(base.cached)
            pk = packet_from_baseline(base, budget_tokens, split=split)
            if pk.num_failures == 0:
                no_failure += 1
            else:
                packets.append(pk)
                kept.extend(batch)
            if progress is not None:
                progress(split, i + 1, len(groups))
        ds.write(split, packets)
        ds.write_tasks(split, kept)
        manifest["splits"][split] = {"env_split": env_split, "batches": len(groups),
                                     "packets": len(packets), "no_failure_batches": no_failure,
                                     "cached_baselines": cached, "target_episodes": episodes}
    manifest["wall_s"] = round(time.perf_counter() - t0, 2)
    manifest["target_usage"] = target.usage()
    ds.write_manifest(manifest)
    return ds
