"""Harness specs: everything around the weights, as a versioned, serialisable, hashable record.

A ``HarnessSpec`` holds the system and task prompt templates, the tool set and its calling
convention, observation formatting, the memory/context policy and the execution rules. Its id is a
content hash (``harness_id``), so two identical harnesses share an id whatever their name;
``parent_id`` records lineage (Harness-S evolution), and ``diff_specs`` explains what a sibling
changed relative to its parent. A Harness-S sibling = a spec plus an optional overlay patch.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
from typing import Any, Optional

from harness_jax.envs.base import content_hash

CALLING_CONVENTIONS = ("qwen_xml", "json", "react")
TRUNCATE_MODES = ("head", "tail", "middle")
MEMORY_KINDS = ("full", "sliding_window")
ON_UNPARSABLE = ("feedback", "end", "pass_raw")
ON_REPEATED = ("warn", "end")


def _check(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"HarnessSpec.{field}: {msg}")


@dataclasses.dataclass(frozen=True)
class ObservationFormat:
    """How environment feedback is relayed to the policy."""

    max_chars: int = 4000          # longer observations are truncated
    truncate: str = "middle"       # head: keep the start; tail: keep the end; middle: both ends
    template: str = "{observation}"  # may use {observation}, {turn}, {turns_left}

    def validate(self):
        _check(self.max_chars >= 16, "observation.max_chars", f"must be >= 16, got {self.max_chars}")
        _check(self.truncate in TRUNCATE_MODES, "observation.truncate",
               f"must be one of {TRUNCATE_MODES}, got {self.truncate!r}")
        _check("{observation}" in self.template, "observation.template",
               "must contain '{observation}'")

    def apply(self, text: str, turn: int = 0, turns_left: int = 0, max_chars: Optional[int] = None
              ) -> str:
        text = truncate_text(str(text), max_chars or self.max_chars, self.truncate)
        return self.template.format(observation=text, turn=turn, turns_left=turns_left)


def truncate_text(text: str, max_chars: int, mode: str = "middle") -> str:
    """Shortens ``text`` to about ``max_chars`` characters, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    note = f"[... {cut} characters truncated ...]"
    if mode == "head":
        return text[:max_chars] + "\n" + note
    if mode == "tail":
        return note + "\n" + text[-max_chars:]
    half = max_chars // 2
    return text[:half] + "\n" + note + "\n" + text[len(text) - (max_chars - half):]


@dataclasses.dataclass(frozen=True)
class MemoryPolicy:
    """Context management. ``full`` keeps everything (the episode ends when the context is full);
    ``sliding_window`` re-renders the system prompt, the task and the last ``window_turns`` turns
    when the next turn would not fit, which starts a new token-exact training segment."""

    kind: str = "full"
    window_turns: int = 6
    max_context_tokens: int = 32768

    def validate(self):
        _check(self.kind in MEMORY_KINDS, "memory.kind", f"must be one of {MEMORY_KINDS}")
        _check(self.window_turns >= 1, "memory.window_turns", "must be >= 1")
        _check(self.max_context_tokens >= 64, "memory.max_context_tokens", "must be >= 64")


@dataclasses.dataclass(frozen=True)
class ExecutionRules:
    """What an action may be, how failures are relayed, when an episode stops."""

    max_turns: int = 20
    max_tokens_per_turn: int = 1024
    on_unparsable: str = "feedback"   # malformed tool calls: tell the policy / end / pass raw text
    unparsable_message: str = ("Your tool call could not be parsed: {errors}. Reply with one "
                               "well-formed tool call.")
    repeated_action_limit: int = 0    # > 0: the N-th identical consecutive action triggers
    on_repeated: str = "warn"
    repeated_message: str = ("You repeated the same action {count} times without progress; try "
                             "something different.")
    stop_on_done: bool = True
    stop_strings: tuple[str, ...] = ()  # a reply containing one of these ends the episode
    episode_timeout_s: float = 900.0

    def validate(self):
        _check(self.max_turns >= 1, "rules.max_turns", f"must be >= 1, got {self.max_turns}")
        _check(self.max_tokens_per_turn >= 1, "rules.max_tokens_per_turn", "must be >= 1")
        _check(self.on_unparsable in ON_UNPARSABLE, "rules.on_unparsable",
               f"must be one of {ON_UNPARSABLE}, got {self.on_unparsable!r}")
        _check(self.on_repeated in ON_REPEATED, "rules.on_repeated",
               f"must be one of {ON_REPEATED}, got {self.on_repeated!r}")
        _check(self.repeated_action_limit >= 0, "rules.repeated_action_limit", "must be >= 0")
        _check(self.episode_timeout_s > 0, "rules.episode_timeout_s", "must be > 0")


@dataclasses.dataclass(frozen=True)
class HarnessSpec:
    """A harness. Serialise with ``to_dict``/``to_json``/``to_yaml``; identity is ``harness_id``."""

    name: str = "H0"
    version: int = 1
    parent_id: Optional[str] = None
    system_prompt: str = ""
    task_template: str = "{observation}"   # the first user message; may use {observation}, {env}
    preamble: tuple = ()                   # fixed opening turns before the task (role/content)
    tools: Optional[tuple] = None          # None: the environment's tool_specs(); () for none
    calling_convention: str = "qwen_xml"
    enable_thinking: bool = False
    observation: ObservationFormat = ObservationFormat()
    memory: MemoryPolicy = MemoryPolicy()
    rules: ExecutionRules = ExecutionRules()
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    notes: str = ""                        # free text (not part of the id)

    def __post_init__(self):
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "preamble", tuple(dict(m) for m in self.preamble))
        object.__setattr__(self, "rules", dataclasses.replace(
            self.rules, stop_strings=tuple(self.rules.stop_strings)))
        self.validate()

    def validate(self) -> None:
        _check(self.calling_convention in CALLING_CONVENTIONS, "calling_convention",
               f"must be one of {CALLING_CONVENTIONS}, got {self.calling_convention!r}")
        _check("{observation}" in self.task_template, "task_template",
               "must contain '{observation}' (the environment's first observation)")
        _check(self.version >= 1, "version", "must be >= 1")
        _check(self.temperature >= 0, "temperature", "must be >= 0")
        for i, m in enumerate(self.preamble):
            _check(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                   and isinstance(m.get("content"), str), f"preamble[{i}]",
                   "must be {'role': 'user'|'assistant', 'content': str}")
        if self.preamble:
            _check(self.preamble[-1]["role"] == "assistant", "preamble",
                   "must end with an assistant turn (the task follows as a user turn)")
        if self.tools is not None:
            for i, t in enumerate(self.tools):
                fn = t.get("function", t) if isinstance(t, dict) else None
                _check(isinstance(fn, dict) and isinstance(fn.get("name"), str), f"tools[{i}]",
                       "must be a JSON tool spec with function.name")
        self.observation.validate()
        self.memory.validate()
        self.rules.validate()

    # -- identity ------------------------------------------------------------------------------
    def content(self) -> dict:
        d = self.to_dict()
        for k in ("name", "version", "parent_id", "notes"):
            d.pop(k)
        return d

    @property
    def harness_id(self) -> str:
        return "h-" + content_hash(self.content())

    def child(self, name: Optional[str] = None, **changes) -> "HarnessSpec":
        """A sibling derived from this spec (``parent_id`` = this id, version + 1)."""
        return dataclasses.replace(self, name=name or f"{self.name}.child",
                                   version=self.version + 1, parent_id=self.harness_id, **changes)

    # -- serialisation ----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tools"] = None if self.tools is None else [dict(t) for t in self.tools]
        d["preamble"] = [dict(m) for m in self.preamble]
        d["rules"]["stop_strings"] = list(self.rules.stop_strings)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "HarnessSpec":
        if not isinstance(d, dict):
            raise ValueError(f"HarnessSpec.from_dict: expected a mapping, got {type(d).__name__}")
        d = dict(d)
        d.pop("harness_id", None)
        nested = {"observation": ObservationFormat, "memory": MemoryPolicy,
                  "rules": ExecutionRules}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"HarnessSpec: unknown field(s) {unknown}; known: {sorted(known)}")
        for key, sub in nested.items():
            if key in d and isinstance(d[key], dict):
                sk = {f.name for f in dataclasses.fields(sub)}
                bad = sorted(set(d[key]) - sk)
                if bad:
                    raise ValueError(f"HarnessSpec.{key}: unknown field(s) {bad}; known: "
                                     f"{sorted(sk)}")
                vals = dict(d[key])
                if "stop_strings" in vals:
                    vals["stop_strings"] = tuple(vals["stop_strings"])
                d[key] = sub(**vals)
        return cls(**d)

    def _dict_with_id(self) -> dict:
        """``to_dict`` plus the content hash, for the serialised forms (ignored when read back)."""
        d = self.to_dict()
        d["harness_id"] = self.harness_id
        return d

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self._dict_with_id(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "HarnessSpec":
        return cls.from_dict(json.loads(text))

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self._dict_with_id(), sort_keys=False, allow_unicode=True)

    @classmethod
    def from_yaml(cls, text: str) -> "HarnessSpec":
        import yaml

        return cls.from_dict(yaml.safe_load(text))

    def save(self, path: str) -> None:
        text = self.to_yaml() if path.endswith((".yaml", ".yml")) else self.to_json()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    @classmethod
    def load(cls, path: str) -> "HarnessSpec":
        if not os.path.isfile(path):
            raise FileNotFoundError(f"HarnessSpec.load: no file at {path}")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return cls.from_yaml(text) if path.endswith((".yaml", ".yml")) else cls.from_json(text)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        for i, v in enumerate(d):
            name = (v.get("function", v) or {}).get("name") if isinstance(v, dict) else None
            out.update(_flatten(v, f"{prefix}{name or i}."))
    else:
        out[prefix[:-1]] = d
    return out


def diff_specs(parent: HarnessSpec, child: HarnessSpec) -> list[str]:
    """Readable differences, one entry per changed field (multi-line texts as unified diffs)."""
    a, b = _flatten(parent.to_dict()), _flatten(child.to_dict())
    lines = []
    for key in sorted(set(a) | set(b)):
        if key in ("name", "version", "parent_id", "notes"):
            continue
        va, vb = a.get(key, "<absent>"), b.get(key, "<absent>")
        if va == vb:
            continue
        if isinstance(va, str) and isinstance(vb, str) and ("\n" in va or "\n" in vb or
                                                            len(va) + len(vb) > 120):
            ud = difflib.unified_diff(va.splitlines(), vb.splitlines(), "parent", "child",
                                      lineterm="", n=1)
            lines.append(f"{key}:\n  " + "\n  ".join(list(ud)[2:]))
        else:
            lines.append(f"{key}: {json.dumps(va, ensure_ascii=False)} -> "
                         f"{json.dumps(vb, ensure_ascii=False)}")
    return lines
