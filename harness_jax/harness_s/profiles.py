"""Behaviour profiles: how a sibling's behaviour differs from H0's, and when it helps or hurts.

Input: paired validation results — for each task, H0's episodes and the sibling's episodes
under the same policy (``PairedResult``, built from trajectories with ``pair_trajectories``).
Output per sibling, tagged with the policy version it describes::

    BehaviourProfile(helps_when=[...], hurts_when=[...], behaviour_difference=[...],
                     evidence=[...], policy_version="...", source="offline" | "llm:<model>")

Two implementations of one role:

* ``summarise_offline`` (deterministic): conditions (task category, H0's failure cause) on which
  the sibling wins or loses paired tasks, and the behaviour signals (turns, inspections, errors,
  format failures, repeated calls, harness interventions, first-turn answers) whose means differ;
* ``LLMProfiler``: an OpenAI-compatible model reads the offline statistics and paired excerpts and
  writes the same four fields (validated, repaired once, else the offline profile is kept).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Mapping, Optional, Sequence

from harness_jax.harness.traces import render_trace
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_s.rootcause import episode_signals, extract_root_cause
from harness_jax.harness_s.llm import structured_call

SIGNALS = {  # signal -> readable name (per episode means)
    "turns": "turns per episode",
    "inspections": "successful inspections (non-answer actions with data back)",
    "inspections_before_answer": "inspections before the first answer",
    "error_observations": "error observations",
    "format_failures": "unparsable replies",
    "repeated_actions": "repeated identical actions",
    "interventions": "harness interventions (hints, blocks, rewrites)",
    "answered_first_turn": "answers on the first turn (rate)",
}


@dataclasses.dataclass
class EpisodeSummary:
    """What a profile needs from one episode (JSON-serialisable)."""

    success: Optional[bool]                  # None: infrastructure failure
    status: str = ""
    cause: str = ""                          # root-cause label of a failure
    signals: dict = dataclasses.field(default_factory=dict)
    excerpt: str = ""                        # sanitised trace excerpt (for an LLM profiler)

    @classmethod
    def from_trajectory(cls, traj: Trajectory, excerpt_chars: int = 0) -> "EpisodeSummary":
        if traj.infra_error:
            return cls(None, "infra_error")
        sig = episode_signals(traj)
        keep = {k: float(sig.get(k, 0) or 0) for k in SIGNALS if k != "answered_first_turn"}
        keep["answered_first_turn"] = 1.0 if sig.get("first_answer_turn") == 0 else 0.0
        cause = extract_root_cause(traj)
        return cls(bool(traj.success), traj.status, cause.label if cause else "", keep,
                   render_trace(traj, 1)[:excerpt_chars] if excerpt_chars else "")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PairedResult:
    """H0's and one sibling's episodes on the same validation task."""

    task_id: str
    category: Optional[str]
    base: list[EpisodeSummary]
    sibling: list[EpisodeSummary]

    @staticmethod
    def _rate(eps: Sequence[EpisodeSummary]) -> Optional[float]:
        v = [e.success for e in eps if e.success is not None]
        return sum(v) / len(v) if v else None

    @property
    def base_rate(self) -> Optional[float]:
        return self._rate(self.base)

    @property
    def sibling_rate(self) -> Optional[float]:
        return self._rate(self.sibling)

    @property
    def base_cause(self) -> str:
        c = collections.Counter(e.cause.split(":", 1)[0] for e in self.base
                                if e.success is False and e.cause)
        return c.most_common(1)[0][0] if c else ""

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "category": self.category,
                "base": [e.to_dict() for e in self.base],
                "sibling": [e.to_dict() for e in self.sibling]}

    @classmethod
    def from_dict(cls, d: Mapping) -> "PairedResult":
        return cls(d["task_id"], d.get("category"), [EpisodeSummary(**e) for e in d["base"]],
                   [EpisodeSummary(**e) for e in d["sibling"]])


def pair_trajectories(base: Sequence[Trajectory], sibling: Sequence[Trajectory],
                      categories: Optional[Mapping[str, str]] = None,
                      excerpt_chars: int = 0) -> list[PairedResult]:
    """Pairs H0's and a sibling's trajectories by task id (tasks missing on either side are
    skipped)."""
    by_task: dict[str, tuple[list, list]] = collections.defaultdict(lambda: ([], []))
    for t in base:
        by_task[t.task_id][0].append(t)
    for t in sibling:
        by_task[t.task_id][1].append(t)
    out = []
    for tid in sorted(by_task):
        b, s = by_task[tid]
        if not b or not s:
            continue
        cat = (categories or {}).get(tid) or (b[0].meta or {}).get("category")
        out.append(PairedResult(tid, cat,
                                [EpisodeSummary.from_trajectory(t, excerpt_chars) for t in b],
                                [EpisodeSummary.from_trajectory(t, excerpt_chars) for t in s]))
    return out


@dataclasses.dataclass
class BehaviourProfile:
    sibling_id: str
    policy_version: str
    helps_when: list[str]
    hurts_when: list[str]
    behaviour_difference: list[str]
    evidence: list[str]
    source: str = "offline"
    stats: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "BehaviourProfile":
        return cls(**dict(d))

    def brief(self, max_items: int = 3) -> dict:
        """The four fields, shortened for prompts."""
        return {k: list(getattr(self, k))[:max_items]
                for k in ("helps_when", "hurts_when", "behaviour_difference", "evidence")}


def _mean_signals(eps: Sequence[EpisodeSummary]) -> dict[str, float]:
    eps = [e for e in eps if e.success is not None]
    return {k: (sum(e.signals.get(k, 0.0) for e in eps) / len(eps)) if eps else 0.0
            for k in SIGNALS}


def summarise_offline(sibling_id: str, pairs: Sequence[PairedResult], policy_version: str = "",
                      *, min_support: int = 2, min_abs_diff: float = 0.3,
                      min_rel_diff: float = 0.25) -> BehaviourProfile:
    """The deterministic profile over paired episode diffs (see the module docstring)."""
    scored = [p for p in pairs if p.base_rate is not None and p.sibling_rate is not None]
    helped = [p for p in scored if p.sibling_rate > p.base_rate]
    hurt = [p for p in scored if p.sibling_rate < p.base_rate]
    conds: dict[str, list[float]] = collections.defaultdict(list)
    for p in scored:
        keys = []
        if p.category:
            keys.append(f"category={p.category}")
        if p.base_cause:
            keys.append(f"H0 failure={p.base_cause}")
        for k in keys:
            conds[k].append(p.sibling_rate - p.base_rate)
    helps, hurts = [], []
    for k, deltas in sorted(conds.items()):
        up, down = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
        if up >= min_support and up >= 2 * down:
            helps.append((up, f"{k}: better on {up} of {len(deltas)} paired tasks"
                              f" (worse on {down})"))
        if down >= min_support and down >= 2 * up:
            hurts.append((down, f"{k}: worse on {down} of {len(deltas)} paired tasks"
                                f" (better on {up})"))
    mb = _mean_signals([e for p in scored for e in p.base])
    ms = _mean_signals([e for p in scored for e in p.sibling])
    diffs = []
    for k, label in SIGNALS.items():
        a, b = mb[k], ms[k]
        d = b - a
        if abs(d) >= min_abs_diff * (0.5 if k == "answered_first_turn" else 1.0) and \
                abs(d) >= min_rel_diff * max(abs(a), abs(b)):
            diffs.append((abs(d) / max(abs(a), abs(b), 1e-9),
                          f"{'more' if d > 0 else 'fewer'} {label}: {b:.2f} vs H0 {a:.2f}"))
    evidence = [f"{len(scored)} paired validation tasks at policy {policy_version or '?'}: "
                f"better on {len(helped)}, worse on {len(hurt)}, same on "
                f"{len(scored) - len(helped) - len(hurt)}"]
    if helped:
        evidence.append("better on e.g. " + ", ".join(p.task_id for p in helped[:3]))
    if hurt:
        evidence.append("worse on e.g. " + ", ".join(p.task_id for p in hurt[:3]))
    stats = {"pairs": len(scored), "helped": len(helped), "hurt": len(hurt),
             "base_signals": mb, "sibling_signals": ms,
             "base_success": (sum(p.base_rate for p in scored) / len(scored)) if scored else 0.0,
             "sibling_success": (sum(p.sibling_rate for p in scored) / len(scored))
             if scored else 0.0}
    return BehaviourProfile(
        sibling_id, str(policy_version),
        [s for _, s in sorted(helps, key=lambda x: -x[0])],
        [s for _, s in sorted(hurts, key=lambda x: -x[0])],
        [s for _, s in sorted(diffs, key=lambda x: -x[0])], evidence, "offline", stats)


PROFILE_SCHEMA = {
    "type": "object",
    "properties": {k: {"type": "array", "items": {"type": "string"}}
                   for k in ("helps_when", "hurts_when", "behaviour_difference", "evidence")},
    "required": ["helps_when", "hurts_when", "behaviour_difference", "evidence"],
}


class LLMProfiler:
    """Writes a profile with an OpenAI-compatible model from the offline statistics and paired
    excerpts; falls back to the offline profile when the answer is rejected."""

    def __init__(self, client, *, temperature: float = 0.0, seed: int = 0,
                 max_tokens: int = 800, max_pairs: int = 4, max_items: int = 6):
        self.client = client
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_pairs = max_pairs
        self.max_items = max_items
        self.log: list[dict] = []

    def _check(self, value: Any) -> tuple[Any, list[str]]:
        errs = []
        for k in PROFILE_SCHEMA["required"]:
            items = value.get(k) or []
            if len(items) > self.max_items:
                errs.append(f"{k}: at most {self.max_items} entries, got {len(items)}")
            if any(len(s) > 300 for s in items):
                errs.append(f"{k}: each entry at most 300 characters")
        if not value.get("evidence"):
            errs.append("evidence: cite at least one observation from the pairs")
        return (value, []) if not errs else (None, errs)

    def summarise(self, sibling_id: str, pairs: Sequence[PairedResult], policy_version: str = "",
                  *, description: str = "") -> BehaviourProfile:
        offline = summarise_offline(sibling_id, pairs, policy_version)
        shown = [p for p in pairs if p.base_rate != p.sibling_rate][: self.max_pairs]
        ex = []
        for p in shown:
            b = next((e.excerpt for e in p.base if e.excerpt), "")
            s = next((e.excerpt for e in p.sibling if e.excerpt), "")
            ex.append(f"## task {p.task_id} ({p.category or '-'}): H0 {p.base_rate:.2f} vs "
                      f"sibling {p.sibling_rate:.2f}\n### H0\n{b[:1500] or '(no excerpt)'}\n"
                      f"### sibling\n{s[:1500] or '(no excerpt)'}")
        msgs = [
            {"role": "system", "content":
             "You compare an agent's behaviour under a sibling harness with its behaviour under "
             "the base harness H0, on the same validation tasks with the same policy. Write a "
             "behaviour profile as JSON only: {\"helps_when\": [...], \"hurts_when\": [...], "
             "\"behaviour_difference\": [...], \"evidence\": [...]} — short statements about "
             "task conditions, not task ids; evidence cites counts from the data."},
            {"role": "user", "content":
             f"Sibling: {description or sibling_id}\nPolicy version: {policy_version or '?'}\n"
             f"Offline statistics: {offline.brief(6)}\n\nPaired excerpts:\n"
             + ("\n\n".join(ex) or "(none)")}]
        res = structured_call(self.client, msgs, schema=PROFILE_SCHEMA, check=self._check,
                              role="profiler", temperature=self.temperature, seed=self.seed,
                              max_tokens=self.max_tokens)
        self.log.append({"sibling_id": sibling_id, **res.to_dict()})
        if not res.ok:
            return offline
        v = res.value
        return BehaviourProfile(sibling_id, str(policy_version), list(v["helps_when"]),
                                list(v["hurts_when"]), list(v["behaviour_difference"]),
                                list(v["evidence"]), f"llm:{self.client.config.model}",
                                offline.stats)
