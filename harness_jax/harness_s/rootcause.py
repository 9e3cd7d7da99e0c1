"""Root causes of failed episodes and the repair directions they form.

``extract_root_cause(trajectory)`` is deterministic: it reads the recorded turns (actions,
parse errors, observations, status) and returns one primary label, first match wins:

====================================  ========================================================
``unparsable_action``                  at least half the turns had no parsable action (parse
                                       errors, an environment "wrong format" reply, a text reply
                                       where a tool call was required)
``repeated_action``                    the episode ended repeating the same action
``context_full``                       the context budget ran out
``turn_limit``                         the turn limit ended the episode without an answer
``time_limit``                         the episode's wall-clock limit ended it
``answered_after_error``               the answer came right after an error observation
``tool_error:<class>``                 an environment/tool error was never recovered from
                                       (``<class>``: unknown_column, unknown_table,
                                       syntax_error, timeout, bad_arguments, unknown_tool,
                                       type_error, other)
``answered_without_inspecting``        the answer came before any successful observation
``empty_result``                       the last observation before the answer was empty
``no_answer``                          the episode ended without an answer
``wrong_answer``                       answered after inspecting, no error: the extractor
                                       cannot say why (``certain=False``)
====================================  ========================================================

Infrastructure failures and successes get no label (``None``): an infrastructure failure is
never a task failure. What the extractor cannot label (``certain=False``) may be relabelled by
the optional ``LLMDiagnoser`` (OpenAI-compatible, JSON schema, repaired once or rejected; a
rejection keeps the extractor's label). ``repair_directions`` groups labels: each label with at
least ``min_failures`` failures is a repair direction.

Answer actions and error texts are recognised by regexes that environments may extend
(``register_answer_pattern``, ``register_error_class``).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import re
from typing import Any, Iterable, Optional, Sequence

from harness_jax.harness.traces import render_trace, runtime_signals
from harness_jax.harness.trajectory import Trajectory
from harness_jax.harness_s.llm import structured_call

LABELS = {
    "unparsable_action": "most replies had no parsable action (format errors)",
    "repeated_action": "the agent repeated the same action until the episode ended",
    "context_full": "the context budget ran out",
    "turn_limit": "the turn limit ended the episode before an answer",
    "time_limit": "the episode's wall-clock limit ended it",
    "answered_after_error": "the agent answered right after an error instead of fixing it",
    "tool_error": "an environment/tool error was never recovered from (tool_error:<class>)",
    "answered_without_inspecting": "the agent answered before looking at any data",
    "empty_result": "the last observation before the answer was empty",
    "no_answer": "the episode ended without an answer",
    "wrong_answer": "answered after inspecting without errors; the cause is semantic",
}
LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{2,40}(:[a-z0-9_]{2,40})?$")

ERROR_CLASSES: list[tuple[str, re.Pattern]] = [
    ("unknown_column", re.compile(r"no such column|unknown column|column \S+ does not exist", re.I)),
    ("unknown_table", re.compile(r"no such table|table \S+ doesn't exist|unknown table|"
                                 r"relation \S+ does not exist", re.I)),
    ("syntax_error", re.compile(r"syntax error|error in your sql syntax|incomplete input|"
                                r"unrecognized token", re.I)),
    ("timeout", re.compile(r"timed? ?out|max_statement_time|execution was interrupted", re.I)),
    ("bad_arguments", re.compile(r"needs the argument|missing (?:required )?argument|"
                                 r"invalid argument", re.I)),
    ("unknown_tool", re.compile(r"unknown tool|no such tool|unknown function", re.I)),
    ("type_error", re.compile(r"datatype mismatch|type ?error|incorrect \w+ value", re.I)),
    ("other", re.compile(r"\berror\b|\bexception\b|traceback|\bfailed\b", re.I)),
]
FORMAT_ERRORS = re.compile(
    r"does not match the required format|could not be parsed|no tool was called|"
    r"must be followed by one sql|is not a valid action|invalid action format|"
    r"not an operation, and no", re.I)
ANSWER_TOOLS = re.compile(r"^(commit_final_answer|submit|answer|final_answer|finish|"
                          r"submit_answer)$", re.I)
ANSWER_TEXT = re.compile(r"final answer\s*:|^\s*answer\s*:|action:\s*answer\b", re.I | re.M)
ROWS = re.compile(r"^\s*\[\s*[\(\[\{]")   # a result set (rows may contain the word "error")
EMPTY_OBS = re.compile(r"^\s*(\[\s*\]|\(\s*\)|none|null|\(no observation\)|)\s*$", re.I)


def register_error_class(name: str, pattern: str) -> None:
    """Adds an error class checked before the generic ``other`` (e.g. an API's error codes)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{1,30}", name):
        raise ValueError(f"error class name {name!r} must be snake_case")
    ERROR_CLASSES.insert(len(ERROR_CLASSES) - 1, (name, re.compile(pattern, re.I)))


def register_answer_pattern(tool_names: Sequence[str] = (), text_pattern: str = "") -> None:
    """Teaches the extractor another environment's answer action (tool names or text regex)."""
    global ANSWER_TOOLS, ANSWER_TEXT
    if tool_names:
        names = "|".join(re.escape(n) for n in tool_names)
        ANSWER_TOOLS = re.compile(f"{ANSWER_TOOLS.pattern[:-2]}|{names})$", re.I)
    if text_pattern:
        re.compile(text_pattern)
        ANSWER_TEXT = re.compile(f"{ANSWER_TEXT.pattern}|{text_pattern}", re.I | re.M)


def error_class(text: str) -> Optional[str]:
    """The error class of an observation (None when it reads as a normal result)."""
    if not text or FORMAT_ERRORS.search(text) or ROWS.match(text):
        return None
    head = text[:600]
    for name, rx in ERROR_CLASSES:
        if rx.search(head):
            return name
    return None


def is_answer_action(action: Any) -> bool:
    if isinstance(action, dict):
        return bool(ANSWER_TOOLS.match(str(action.get("name") or "")))
    return bool(ANSWER_TEXT.search(str(action or "")))


def _is_format_failure(ev) -> bool:
    if ev.parse_errors and not ev.action:
        return True
    return bool(FORMAT_ERRORS.search(ev.observation or ""))


@dataclasses.dataclass(frozen=True)
class RootCause:
    """The primary root cause of one failed episode."""

    episode_id: str
    task_id: str
    label: str
    certain: bool = True           # False: the extractor's fallback; a diagnoser may relabel it
    source: str = "extractor"      # "extractor" | "llm:<model>"
    evidence: str = ""             # the error text / reply excerpt that shows the cause
    category: Optional[str] = None
    signals: dict = dataclasses.field(default_factory=dict)

    @property
    def family(self) -> str:
        """The label without its class suffix (``tool_error:timeout`` -> ``tool_error``)."""
        return self.label.split(":", 1)[0]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RootCause":
        return cls(**d)


def episode_signals(traj: Trajectory) -> dict:
    """Counters of one episode used by root causes, router features and behaviour profiles."""
    sig = dict(runtime_signals(traj))
    n_turns = len(traj.turns)
    answers = errors = empties = fmt = inspections = 0
    inspections_before_answer = -1
    first_answer_turn = -1
    tools: collections.Counter = collections.Counter()
    for ev in traj.turns:
        if _is_format_failure(ev):
            fmt += 1
        for a in ev.action or []:
            if is_answer_action(a):
                answers += 1
                if first_answer_turn < 0:
                    first_answer_turn = ev.index
                    inspections_before_answer = inspections
            else:
                tools[a.get("name") if isinstance(a, dict) else "text"] += 1
        cls = error_class(ev.observation or "")
        if cls is not None:
            errors += 1
        elif ev.action and not any(is_answer_action(a) for a in ev.action) and not \
                FORMAT_ERRORS.search(ev.observation or ""):
            if EMPTY_OBS.match(ev.observation or ""):
                empties += 1
            else:
                inspections += 1
    lps = [lp for s in traj.segments for lp, m in zip(s.logprobs, s.loss_mask) if m]
    sig.update(turns=n_turns, answers=answers, error_observations=errors,
               empty_observations=empties, format_failures=fmt, inspections=inspections,
               first_answer_turn=first_answer_turn,
               inspections_before_answer=inspections_before_answer,
               interventions=sum(len(ev.interventions) for ev in traj.turns),
               mean_logprob=(sum(lps) / len(lps)) if lps else 0.0,
               last_tool=(max(tools, key=tools.get) if tools else ""))
    return sig


def extract_root_cause(traj: Trajectory) -> Optional[RootCause]:
    """The deterministic label of a failed episode; None for successes and infra failures."""
    if traj.infra_error or traj.success:
        return None
    sig = episode_signals(traj)
    turns = traj.turns
    n = len(turns)
    category = traj.meta.get("category") if isinstance(traj.meta, dict) else None

    def rc(label, evidence="", certain=True):
        ev = re.sub(r"\s+", " ", str(evidence)).strip()[:300]
        return RootCause(traj.episode_id, traj.task_id, label, certain, "extractor", ev,
                         category, sig)

    # the answer turn and what came before it
    ans_idx = next((i for i, ev in enumerate(turns) if any(is_answer_action(a)
                                                           for a in ev.action or [])), None)
    answered = ans_idx is not None
    fmt_turns = [ev for ev in turns if _is_format_failure(ev)]
    if n and (len(fmt_turns) * 2 >= n or (not answered and turns[-1] in fmt_turns)):
        ev = fmt_turns[-1]
        return rc("unparsable_action", "; ".join(ev.parse_errors) or ev.observation
                  or ev.raw_text)
    eval_status = str((traj.evaluation or {}).get("status", ""))
    if traj.status == "repeated_action" or (not answered and sig.get("repeated_actions", 0) >= 2
                                            and n >= 3):
        last = turns[-1].action if turns else None
        return rc("repeated_action", json.dumps(last, ensure_ascii=False, default=str))
    if traj.status == "context_full":
        return rc("context_full", f"{n} turns")
    if traj.status == "time_limit":
        return rc("time_limit", "; ".join(traj.errors[-1:]))
    if not answered and (traj.status == "max_turns" or eval_status == "limit_reached"):
        return rc("turn_limit", f"{n} turns without an answer")
    before = turns[:ans_idx] if answered else turns
    obs_turns = [ev for ev in before if ev.action and not FORMAT_ERRORS.search(ev.observation or "")]
    if answered and obs_turns:
        cls = error_class(obs_turns[-1].observation or "")
        if cls is not None:
            return rc("answered_after_error", obs_turns[-1].observation)
    errs = [(i, error_class(ev.observation or "")) for i, ev in enumerate(obs_turns)]
    errs = [(i, c) for i, c in errs if c is not None]
    if errs:
        last_i, cls = errs[-1]
        recovered = any(error_class(ev.observation or "") is None
                        and not EMPTY_OBS.match(ev.observation or "")
                        for ev in obs_turns[last_i + 1:])
        if not recovered:
            return rc(f"tool_error:{cls}", obs_turns[last_i].observation)
    good = [ev for ev in obs_turns if error_class(ev.observation or "") is None
            and not EMPTY_OBS.match(ev.observation or "")]
    if answered and not good:
        if obs_turns and EMPTY_OBS.match(obs_turns[-1].observation or ""):
            return rc("empty_result", json.dumps(obs_turns[-1].action, default=str))
        return rc("answered_without_inspecting", turns[ans_idx].raw_text)
    if answered and obs_turns and EMPTY_OBS.match(obs_turns[-1].observation or ""):
        return rc("empty_result", json.dumps(obs_turns[-1].action, default=str))
    if not answered:
        return rc("no_answer", f"status={traj.status}")
    return rc("wrong_answer", turns[ans_idx].raw_text, certain=False)


# ------------------------------------------------------------------------------------- LLM diagnoser
DIAGNOSIS_SCHEMA = {
    "type": "object",
    "properties": {"root_cause": {"type": "string"}, "explanation": {"type": "string"},
                   "evidence": {"type": "string"}},
    "required": ["root_cause", "explanation"],
}


class LLMDiagnoser:
    """Labels what the extractor cannot (``certain=False``) with an OpenAI-compatible model.

    The model sees the known labels and one sanitised trace excerpt (the failure-packet
    rendering) and answers ``{"root_cause", "explanation", "evidence"}``; the label must be
    snake_case (a known one or a new one such as ``misread_question``). One repair round, then
    the extractor's label is kept.
    """

    def __init__(self, client, *, temperature: float = 0.0, seed: int = 0,
                 max_tokens: int = 400, excerpt_chars: int = 3000):
        self.client = client
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.excerpt_chars = excerpt_chars
        self.log: list[dict] = []

    def _messages(self, traj: Trajectory, cause: RootCause) -> list[dict]:
        known = "\n".join(f"- {k}: {v}" for k, v in LABELS.items())
        excerpt = render_trace(traj, 1)[: self.excerpt_chars]
        return [
            {"role": "system", "content":
             "You diagnose why an LLM agent failed a task inside its harness. Name the single "
             "most specific root cause a harness change could address. Use one of the known "
             "labels, or a new snake_case label (at most 40 characters) when none fits.\n"
             f"Known labels:\n{known}\n"
             'Answer with JSON only: {"root_cause": str, "explanation": str, "evidence": str}.'},
            {"role": "user", "content":
             f"The extractor's tentative label: {cause.label}\nTask category: "
             f"{cause.category or '-'}\n\n{excerpt}"}]

    @staticmethod
    def _check(value: Any) -> tuple[Any, list[str]]:
        label = str(value.get("root_cause", "")).strip().lower()
        if not LABEL_RE.match(label):
            return None, [f"root_cause {label!r} must be snake_case, 3-40 characters "
                          "(optionally family:class)"]
        if label.startswith(("infra", "success")):
            return None, ["root_cause: infrastructure failures and successes are not root causes"]
        return dict(value, root_cause=label), []

    def diagnose(self, traj: Trajectory, cause: RootCause) -> RootCause:
        res = structured_call(self.client, self._messages(traj, cause), schema=DIAGNOSIS_SCHEMA,
                              check=self._check, role="diagnoser",
                              temperature=self.temperature, seed=self.seed,
                              max_tokens=self.max_tokens)
        self.log.append({"episode_id": traj.episode_id, "tentative": cause.label,
                         **res.to_dict(), "label": res.value["root_cause"] if res.ok else None})
        if not res.ok:
            return cause
        return dataclasses.replace(
            cause, label=res.value["root_cause"], certain=True,
            source=f"llm:{self.client.config.model}",
            evidence=str(res.value.get("evidence") or res.value.get("explanation") or "")[:300])


# ----------------------------------------------------------------------------------- directions
@dataclasses.dataclass
class Direction:
    """A repair direction: a root cause shared by at least ``min_failures`` failures."""

    name: str
    count: int
    episode_ids: list[str]
    task_ids: list[str]
    examples: list[RootCause]

    @property
    def family(self) -> str:
        return self.name.split(":", 1)[0]

    def to_dict(self) -> dict:
        return {"name": self.name, "count": self.count, "episode_ids": self.episode_ids,
                "task_ids": self.task_ids, "examples": [e.to_dict() for e in self.examples]}


def label_failures(trajectories: Iterable[Trajectory], diagnoser: Optional[LLMDiagnoser] = None
                   ) -> tuple[list[RootCause], dict]:
    """Root causes of every failed episode (extractor, then the diagnoser for uncertain ones).

    Returns ``(causes, report)``; ``report`` counts successes, infrastructure failures
    (excluded), labels, and the diagnoser's relabelled / rejected calls.
    """
    causes, report = [], collections.Counter()
    for t in trajectories:
        if t.infra_error:
            report["infra_excluded"] += 1
            continue
        c = extract_root_cause(t)
        if c is None:
            report["successes"] += 1
            continue
        if not c.certain and diagnoser is not None:
            c2 = diagnoser.diagnose(t, c)
            report["diagnosed" if c2.source != "extractor" else "diagnoser_rejected"] += 1
            c = c2
        causes.append(c)
    report["failures"] = len(causes)
    out = dict(report)
    out["labels"] = dict(collections.Counter(c.label for c in causes).most_common())
    return causes, out


def repair_directions(causes: Sequence[RootCause], min_failures: int = 2,
                      max_directions: Optional[int] = None, max_examples: int = 3
                      ) -> list[Direction]:
    """Labels with at least ``min_failures`` failures, most frequent first (ties by name)."""
    if min_failures < 1:
        raise ValueError(f"min_failures must be >= 1, got {min_failures}")
    groups: dict[str, list[RootCause]] = collections.defaultdict(list)
    for c in causes:
        groups[c.label].append(c)
    dirs = [Direction(name, len(cs), [c.episode_id for c in cs],
                      sorted({c.task_id for c in cs}), cs[:max_examples])
            for name, cs in groups.items() if len(cs) >= min_failures]
    dirs.sort(key=lambda d: (-d.count, d.name))
    return dirs[:max_directions] if max_directions else dirs


def mean_confidence(sig: dict) -> float:
    """The policy's mean per-token probability over its sampled tokens (1.0 when unknown)."""
    return math.exp(min(0.0, float(sig.get("mean_logprob", 0.0))))
