"""Editors: a parent sibling + one repair direction -> candidate child siblings.

One interface (``Editor.propose``), chosen by registered name (``make_editor``):

* ``deterministic`` — a library of named **edit operators**, each addressing some root-cause
  families with a spec change and/or an overlay (``harness-r1-patch-v1``) action. No LLM: this is
  what evolution runs offline and in tests. The code-hook operators are fixes of the shared fix
  library (``harness.fixes``), the one Harness-R1's rule-based engineer composes patches from.
* ``llm`` — an OpenAI-compatible model gets the parent's components, the direction and failure
  excerpts, and returns ``{"rationale", "spec_changes", "overlay"}``; the result is applied and
  validated (spec checks, ``validate_patch``, "must change something") and repaired once or
  rejected.
* ``auto`` — the deterministic operators first, the LLM editor for what they do not cover.

Every child keeps its parent's overlay actions (an overlay child appends actions; the merged
patch is re-validated, so the 12-action and one-hook-per-point limits hold). A child identical to
its parent (same sibling id) is rejected. Operator texts never mention task identifiers.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Optional, Protocol, Sequence

from harness_jax.harness import fixes
from harness_jax.harness.patches import SCHEMA_VERSION
from harness_jax.harness.siblings import Sibling
from harness_jax.harness.specs import HarnessSpec
from harness_jax.harness.validation import validate_patch
from harness_jax.harness_s.rootcause import LABELS, Direction
from harness_jax.harness_s.llm import structured_call


class NotApplicable(Exception):
    """The operator does not apply to this parent (already applied, unknown environment, ...)."""


@dataclasses.dataclass(frozen=True)
class EditContext:
    env_name: str
    protocol: str = "text"                 # "text" | "function" (the environment's protocol)
    excerpts: tuple[str, ...] = ()         # sanitised failure traces of this direction
    seed: int = 0


@dataclasses.dataclass
class EditOutcome:
    """One proposal: a child sibling, or the reasons it was rejected."""

    parent_id: str
    direction: str
    editor: str                      # "deterministic:<operator>" | "llm:<model>"
    child: Optional[Sibling] = None
    errors: list[str] = dataclasses.field(default_factory=list)
    notes: str = ""

    @property
    def ok(self) -> bool:
        return self.child is not None and not self.errors

    def to_dict(self) -> dict:
        return {"parent_id": self.parent_id, "direction": self.direction, "editor": self.editor,
                "child_id": self.child.sibling_id if self.child else None,
                "errors": self.errors, "notes": self.notes}


class Editor(Protocol):
    name: str

    def propose(self, parent: Sibling, direction: Direction, *, n: int,
                context: EditContext) -> list[EditOutcome]: ...


# ------------------------------------------------------------------------------------- helpers
def child_name(parent: Sibling, suffix: str) -> str:
    base = parent.name or parent.spec.name
    return f"{base}+{suffix}"[:120]


def with_spec(parent: Sibling, suffix: str, **changes) -> Sibling:
    """A child whose spec differs by ``changes`` (fields of HarnessSpec, validated)."""
    name = child_name(parent, suffix)
    return Sibling(parent.spec.child(name=name, **changes), parent.patch, name)


def with_actions(parent: Sibling, suffix: str, actions: Sequence[dict], env_name: str,
                 description: str = "") -> Sibling:
    """A child whose overlay is the parent's plus ``actions`` (re-validated as a whole)."""
    old = list(parent.patch.actions) if parent.patch else []
    ids = {a.get("id") for a in old if a.get("id")}
    if any(a.get("id") in ids for a in actions if a.get("id")):
        raise NotApplicable("already applied (its rule/skill id is in the parent's overlay)")
    desc = "; ".join(d for d in ((parent.patch.description if parent.patch else ""),
                                 description) if d)[:2000]
    res = validate_patch({"schema_version": SCHEMA_VERSION, "benchmark": env_name,
                          "description": desc, "actions": old + list(actions)},
                         env_name=env_name)
    if not res.ok:
        raise NotApplicable("the merged overlay is invalid: " + "; ".join(res.errors[:3]))
    name = child_name(parent, suffix)
    spec = parent.spec.child(name=name)
    return Sibling(spec, res.patch, name)


def append_text(base: str, text: str) -> str:
    if text.strip() in base:
        raise NotApplicable("the text is already present")
    return (base.rstrip() + "\n\n" + text).strip()


# Conditions and texts per environment (the operators are generic; these are their words).
ANSWER_CONDITION = {"any": [{"contains": ["action.text", "final answer"]},
                            {"eq": ["action.name", "commit_final_answer"]},
                            {"eq": ["action.name", "submit"]},
                            {"startswith": ["action.text", "answer:"]}]}
# An error observation: the generic predicate plus the wording of common engines/tools.
ERROR_CONDITION = {"any": [{"pred": "observation_has_error"}] + [
    {"contains": ["obs.text", w]} for w in ("no such", "doesn't exist", "does not exist",
                                            "syntax", "unknown column", "unknown table",
                                            "traceback", "timed out")]}
ENV_TEXT = {
    "dbbench": {
        "inspect": "look at the table first (e.g. SELECT * FROM the table LIMIT 5) and answer "
                   "from what the database returns",
        "recover": "The last SQL statement failed. Read the error, fix the cause (quote table "
                   "and column names with backticks, check their exact spelling against the "
                   "headers) and run the corrected statement before answering.",
        "empty": "The query returned no rows. Check the filter values against the data (exact "
                 "spelling, case, spaces; look at the distinct values of the filtered column) "
                 "before answering.",
        "format": {"text": "Format rule: every reply must end with either 'Action: Operation' "
                           "followed by exactly one ```sql block, or 'Action: Answer' followed "
                           "by a line 'Final Answer: [\"...\"]'. Nothing else is accepted.",
                   "function": "Format rule: every reply must call exactly one tool: "
                               "execute_sql with one SQL statement, or commit_final_answer "
                               "with the list of answers."},
        "example": {
            "text": [{"role": "user", "content": "Example question: How many rows does the "
                                                "table have?\nThe name of this table is Example "
                                                "table, and the headers of this table are A,B."},
                     {"role": "assistant", "content": "I need to count the rows.\nAction: "
                                                      "Operation\n```sql\nSELECT COUNT(*) FROM "
                                                      "`Example table`;\n```"},
                     {"role": "user", "content": "[(3,)]"},
                     {"role": "assistant", "content": "The table has 3 rows.\nAction: Answer\n"
                                                      "Final Answer: [\"3\"]"}],
            "function": "Worked example: to count the rows of a table, call execute_sql with "
                        "{\"query\": \"SELECT COUNT(*) FROM `Example table`\"}; it returns "
                        "[(3,)]; then call commit_final_answer with {\"answers\": [\"3\"]}."},
    },
}
GENERIC_TEXT = {
    "inspect": "inspect the environment first and answer from what it shows",
    "recover": "The last action failed. Read the error message, fix its cause and retry before "
               "answering.",
    "empty": "The last action returned nothing. Check your assumptions about names and values "
             "before answering.",
    "format": {"text": "Format rule: end every reply with exactly one action in the required "
                       "format.",
               "function": "Format rule: every reply must call exactly one tool."},
}


def env_text(ctx: EditContext, key: str) -> Any:
    return ENV_TEXT.get(ctx.env_name, {}).get(key, GENERIC_TEXT.get(key))


# ---------------------------------------------------------------------------------- operators
@dataclasses.dataclass(frozen=True)
class EditOperator:
    """A named deterministic edit; ``families`` are the root-cause families it addresses."""

    name: str
    families: tuple[str, ...]
    description: str
    apply: Callable[[Sibling, EditContext], Sibling]


OPERATORS: dict[str, EditOperator] = {}


def register_operator(op: EditOperator) -> EditOperator:
    if op.name in OPERATORS:
        raise ValueError(f"edit operator {op.name!r} is already registered")
    OPERATORS[op.name] = op
    return op


def operator(name: str, families: Sequence[str], description: str):
    def deco(fn):
        register_operator(EditOperator(name, tuple(families), description, fn))
        return fn
    return deco


def fix_hook(name: str) -> str:
    """The code of the library fix ``name`` as a standalone hook (``harness.fixes``: the one
    fix library Harness-R1's rule-based engineer composes from)."""
    return fixes.hook_code([fixes.library("dbbench")[name]], "dbbench")


SCHEMA_PREVIEW_HOOK = fix_hook("schema_preview")


@operator("schema_preview", ("answered_without_inspecting", "tool_error", "empty_result",
                             "wrong_answer"),
          "tell the policy, before its first decision, exactly how to preview the table")
def _schema_preview(parent: Sibling, ctx: EditContext) -> Sibling:
    if parent.patch and "make_pre_hint" in parent.patch.code_hooks():
        raise NotApplicable("the parent already has a make_pre_hint code hook")
    return with_actions(parent, "schema_preview", [
        {"type": "add_code_hook", "hook": "make_pre_hint", "code": SCHEMA_PREVIEW_HOOK}],
        ctx.env_name, "preview the table before the first query")


@operator("inspect_before_answer", ("answered_without_inspecting",),
          "block an answer given on the first turn, before any inspection")
def _inspect_before_answer(parent: Sibling, ctx: EditContext) -> Sibling:
    return with_actions(parent, "inspect_before_answer", [
        {"type": "add_guard_rule", "id": "hs_inspect_first",
         "when": {"all": [{"lt": ["state.turn", 1]}, ANSWER_CONDITION]},
         "effect": "block_and_prompt",
         "message": "Do not answer yet: " + env_text(ctx, "inspect") + "."}],
        ctx.env_name, "no answer before inspecting")


@operator("error_recovery_hint", ("tool_error", "answered_after_error"),
          "after an error observation, tell the policy how to recover")
def _error_recovery(parent: Sibling, ctx: EditContext) -> Sibling:
    return with_actions(parent, "error_recovery_hint", [
        {"type": "add_recovery_rule", "id": "hs_error_recovery",
         "when": ERROR_CONDITION, "effect": "inject_hint",
         "message": env_text(ctx, "recover")}], ctx.env_name, "recover from errors")


BLOCK_AFTER_ERROR_HOOK = fix_hook("block_answer_after_error")


def _with_guard(parent: Sibling, ctx: EditContext, name: str, code: str, summary: str) -> Sibling:
    """``parent`` plus one ``on_before_action`` code hook (one guard per sibling: a parent that
    already has one is not applicable)."""
    if parent.patch and "on_before_action" in parent.patch.code_hooks():
        raise NotApplicable("the parent already has an on_before_action code hook")
    return with_actions(parent, name, [
        {"type": "add_code_hook", "hook": "on_before_action", "code": code}], ctx.env_name, summary)


@operator("block_answer_after_error", ("answered_after_error",),
          "block an answer that directly follows an error observation")
def _block_after_error(parent: Sibling, ctx: EditContext) -> Sibling:
    return _with_guard(parent, ctx, "block_answer_after_error", BLOCK_AFTER_ERROR_HOOK, "no answer right after an error")


@operator("empty_result_hint", ("empty_result",),
          "after an empty observation, tell the policy to check its filter values")
def _empty_result(parent: Sibling, ctx: EditContext) -> Sibling:
    return with_actions(parent, "empty_result_hint", [
        {"type": "add_recovery_rule", "id": "hs_empty_result",
         "when": {"any": [{"pred": "observation_empty"}, {"eq": ["obs.text", "[]"]},
                          {"eq": ["obs.text", "()"]}]},
         "effect": "inject_hint", "message": env_text(ctx, "empty")}],
        ctx.env_name, "recover from empty results")


@operator("worked_example", ("unparsable_action", "wrong_answer", "no_answer"),
          "show one complete worked example of the interaction format")
def _worked_example(parent: Sibling, ctx: EditContext) -> Sibling:
    ex = (ENV_TEXT.get(ctx.env_name, {}).get("example") or {}).get(ctx.protocol)
    if ex is None:
        raise NotApplicable(f"no worked example for {ctx.env_name}/{ctx.protocol}")
    if isinstance(ex, str):
        return with_spec(parent, "worked_example",
                         system_prompt=append_text(parent.spec.system_prompt, ex))
    pre = list(parent.spec.preamble)
    if any(m.get("content") == ex[0]["content"] for m in pre):
        raise NotApplicable("the worked example is already in the preamble")
    if pre and pre[-1]["role"] != "assistant":
        raise NotApplicable("the parent's preamble does not end with an assistant turn")
    return with_spec(parent, "worked_example", preamble=tuple(pre + [dict(m) for m in ex]))


@operator("format_reminder", ("unparsable_action",),
          "state the action format as a hard rule in the system prompt")
def _format_reminder(parent: Sibling, ctx: EditContext) -> Sibling:
    text = env_text(ctx, "format")[ctx.protocol if ctx.protocol in ("text", "function")
                                   else "text"]
    return with_spec(parent, "format_reminder",
                     system_prompt=append_text(parent.spec.system_prompt, text))


@operator("larger_turn_budget", ("turn_limit", "no_answer"),
          "allow 1.5x more turns (capped at 100)")
def _larger_turns(parent: Sibling, ctx: EditContext) -> Sibling:
    old = parent.spec.rules.max_turns
    new = min(100, int(math.ceil(old * 1.5)))
    if new <= old:
        raise NotApplicable(f"max_turns is already {old}")
    return with_spec(parent, "larger_turn_budget",
                     rules=dataclasses.replace(parent.spec.rules, max_turns=new))


@operator("stall_recovery", ("turn_limit", "repeated_action", "no_answer"),
          "when the episode stalls, tell the policy to change course or commit its answer")
def _stall(parent: Sibling, ctx: EditContext) -> Sibling:
    return with_actions(parent, "stall_recovery", [
        {"type": "set_config", "field": "stall_turns", "value": 2},
        {"type": "add_recovery_rule", "id": "hs_stall", "when": {"pred": "stalled"},
         "effect": "inject_hint",
         "message": "You are not making progress. Try a clearly different action, or commit "
                    "your best answer now."}], ctx.env_name, "break stalls")


@operator("repeat_guard", ("repeated_action",),
          "warn from the second identical consecutive action")
def _repeat_guard(parent: Sibling, ctx: EditContext) -> Sibling:
    r = parent.spec.rules
    if r.repeated_action_limit and r.repeated_action_limit <= 2:
        raise NotApplicable("a repeat limit <= 2 is already set")
    return with_spec(parent, "repeat_guard",
                     rules=dataclasses.replace(r, repeated_action_limit=2, on_repeated="warn"))


@operator("shorter_observations", ("context_full",),
          "halve the observation budget and keep a sliding window of turns")
def _shorter_obs(parent: Sibling, ctx: EditContext) -> Sibling:
    o, m = parent.spec.observation, parent.spec.memory
    if o.max_chars <= 400 and m.kind == "sliding_window":
        raise NotApplicable("observations are already short and the memory slides")
    return with_spec(parent, "shorter_observations",
                     observation=dataclasses.replace(o, max_chars=max(400, o.max_chars // 2)),
                     memory=dataclasses.replace(m, kind="sliding_window"))


NORMALISE_ANSWER_HOOK = fix_hook("answer_format_normaliser")


@operator("answer_format_normaliser", ("wrong_answer",),
          "normalise the final answer (list syntax, stray quotes, trailing periods)")
def _normalise_answer(parent: Sibling, ctx: EditContext) -> Sibling:
    return _with_guard(parent, ctx, "answer_format_normaliser", NORMALISE_ANSWER_HOOK, "normalise answers")


ANSWER_FROM_RESULT_HOOK = fix_hook("answer_from_result")


@operator("answer_from_result", ("wrong_answer",),
          "an answer right after a query result is rewritten to that result's values")
def _answer_from_result(parent: Sibling, ctx: EditContext) -> Sibling:
    return _with_guard(parent, ctx, "answer_from_result", ANSWER_FROM_RESULT_HOOK, "answer with the last result's values")


def operators_for(direction: str) -> list[EditOperator]:
    """Registered operators addressing ``direction`` (its full label or its family)."""
    fam = direction.split(":", 1)[0]
    return [op for op in OPERATORS.values() if direction in op.families or fam in op.families]


# ------------------------------------------------------------------------------------ editors
class DeterministicEditor:
    """Applies the registered operators of a direction, in registration order."""

    name = "deterministic"

    def __init__(self, operators: Optional[Sequence[str]] = None):
        unknown = [o for o in operators or () if o not in OPERATORS]
        if unknown:
            raise ValueError(f"unknown edit operator(s) {unknown}; registered: {sorted(OPERATORS)}")
        self.only = set(operators) if operators else None
        self.skipped: list[dict] = []

    def propose(self, parent: Sibling, direction: Direction, *, n: int,
                context: EditContext) -> list[EditOutcome]:
        out: list[EditOutcome] = []
        for op in operators_for(direction.name):
            if len(out) >= n:
                break
            if self.only is not None and op.name not in self.only:
                continue
            try:
                child = op.apply(parent, context)
            except NotApplicable as e:
                self.skipped.append({"parent_id": parent.sibling_id, "operator": op.name,
                                     "direction": direction.name, "reason": str(e)})
                continue
            o = EditOutcome(parent.sibling_id, direction.name, f"deterministic:{op.name}",
                            child, notes=op.description)
            if child.sibling_id == parent.sibling_id:
                o.child, o.errors = None, ["the edit changed nothing"]
            out.append(o)
        return out


# Spec fields an LLM editor may change (dotted paths into HarnessSpec).
EDITABLE_SPEC_PATHS = (
    "system_prompt", "task_template", "preamble", "rules.max_turns", "rules.max_tokens_per_turn",
    "rules.on_unparsable", "rules.unparsable_message", "rules.repeated_action_limit",
    "rules.on_repeated", "rules.repeated_message", "observation.max_chars",
    "observation.truncate", "observation.template", "memory.kind", "memory.window_turns")


def apply_spec_changes(spec: HarnessSpec, changes: dict, name: str) -> HarnessSpec:
    """``spec.child`` with dotted-path changes; ValueError naming the path when one is bad."""
    if not isinstance(changes, dict):
        raise ValueError("spec_changes must be an object of {dotted.path: value}")
    top: dict[str, Any] = {}
    nested: dict[str, dict] = {}
    for path, value in changes.items():
        if path not in EDITABLE_SPEC_PATHS:
            raise ValueError(f"spec_changes.{path}: not editable; editable paths: "
                             f"{', '.join(EDITABLE_SPEC_PATHS)}")
        if "." in path:
            sec, field = path.split(".", 1)
            nested.setdefault(sec, {})[field] = value
        else:
            top[path] = tuple(value) if path == "preamble" and isinstance(value, list) else value
    for sec, fields in nested.items():
        top[sec] = dataclasses.replace(getattr(spec, sec), **fields)
    try:
        return spec.child(name=name, **top)
    except (TypeError, ValueError) as e:
        raise ValueError(f"spec_changes: {e}") from None


EDIT_SCHEMA = {
    "type": "object",
    "properties": {"rationale": {"type": "string"},
                   "spec_changes": {"type": ["object", "null"]},
                   "overlay": {"type": ["object", "null"]}},
    "required": ["rationale"],
}


class LLMEditor:
    """An LLM proposes one child per call (``n`` calls with seeds ``seed .. seed+n-1``)."""

    name = "llm"

    def __init__(self, client, *, temperature: float = 0.7, seed: int = 0,
                 max_tokens: int = 2048, max_excerpt_chars: int = 6000):
        self.client = client
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.max_excerpt_chars = max_excerpt_chars
        self.log: list[dict] = []

    def messages(self, parent: Sibling, direction: Direction, context: EditContext) -> list[dict]:
        spec = parent.spec.to_dict()
        spec.pop("tools", None)
        overlay = parent.patch.to_dict() if parent.patch else None
        excerpts = "\n\n".join(context.excerpts)[: self.max_excerpt_chars] or "(none)"
        return [
            {"role": "system", "content":
             "You edit an LLM agent's harness (prompts, execution rules and a runtime overlay) "
             "to fix ONE recurring failure cause, without changing anything unrelated. Reply "
             "with JSON only: {\"rationale\": str, \"spec_changes\": {dotted.path: value} or "
             "null, \"overlay\": the child's COMPLETE overlay patch (start from the parent's) "
             "or null to keep the parent's}.\nEditable spec paths: "
             + ", ".join(EDITABLE_SPEC_PATHS) + ".\nOverlay format: {\"schema_version\": "
             f"\"{SCHEMA_VERSION}\", \"benchmark\": \"{context.env_name}\", \"description\": "
             "str, \"actions\": [1-12 of set_config | edit_tool_hint | add_or_edit_skill | "
             "add_guard_rule | add_recovery_rule | add_code_hook]}. Never mention task ids, "
             "instance ids or answers."},
            {"role": "user", "content":
             f"Environment: {context.env_name} ({context.protocol} protocol)\n"
             f"Direction: {direction.name} — {LABELS.get(direction.family, 'see the excerpts')}"
             f" ({direction.count} failures)\n\nParent spec:\n"
             f"{json.dumps(spec, indent=1, ensure_ascii=False)}\n\nParent overlay:\n"
             f"{json.dumps(overlay, indent=1, ensure_ascii=False)}\n\nFailure excerpts:\n"
             f"{excerpts}"}]

    def _make_check(self, parent: Sibling, direction: Direction, context: EditContext, idx: int):
        def check(value: Any) -> tuple[Any, list[str]]:
            name = child_name(parent, f"llm-{direction.name.replace(':', '-')}-{idx}")
            try:
                spec = apply_spec_changes(parent.spec, value.get("spec_changes") or {}, name)
            except ValueError as e:
                return None, [str(e)]
            patch = parent.patch
            if value.get("overlay") is not None:
                res = validate_patch(value["overlay"], env_name=context.env_name)
                if not res.ok:
                    return None, ["overlay: " + e for e in res.errors[:6]]
                patch = res.patch
            child = Sibling(spec, patch, name)
            if child.sibling_id == parent.sibling_id:
                return None, ["the edit changes nothing: change the spec or the overlay"]
            return child, []
        return check

    def propose(self, parent: Sibling, direction: Direction, *, n: int,
                context: EditContext) -> list[EditOutcome]:
        out = []
        msgs = self.messages(parent, direction, context)
        for i in range(n):
            res = structured_call(self.client, msgs, schema=EDIT_SCHEMA,
                                  check=self._make_check(parent, direction, context, i),
                                  role="editor", temperature=self.temperature,
                                  seed=self.seed + context.seed + i, max_tokens=self.max_tokens)
            self.log.append({"parent_id": parent.sibling_id, "direction": direction.name,
                             **res.to_dict()})
            ed = f"llm:{self.client.config.model}"
            if res.ok:
                out.append(EditOutcome(parent.sibling_id, direction.name, ed, res.value,
                                       notes="repaired" if res.repaired else ""))
            else:
                out.append(EditOutcome(parent.sibling_id, direction.name, ed, None,
                                       errors=res.errors))
        return out


class AutoEditor:
    """Deterministic operators first; the LLM editor fills what they leave (novel directions)."""

    name = "auto"

    def __init__(self, deterministic: DeterministicEditor, llm: LLMEditor):
        self.deterministic = deterministic
        self.llm = llm

    def propose(self, parent: Sibling, direction: Direction, *, n: int,
                context: EditContext) -> list[EditOutcome]:
        out = self.deterministic.propose(parent, direction, n=n, context=context)
        have = sum(o.ok for o in out)
        if have < n:
            out += self.llm.propose(parent, direction, n=n - have, context=context)
        return out


EDITORS = ("deterministic", "llm", "auto")


def make_editor(name: str, *, client=None, operators: Optional[Sequence[str]] = None,
                **llm_kwargs) -> Editor:
    """The editor registered as ``name``; ``client`` (an OpenAIChatClient) for llm/auto."""
    if name not in EDITORS:
        raise ValueError(f"unknown editor {name!r}; registered: {', '.join(EDITORS)}")
    if name == "deterministic":
        return DeterministicEditor(operators)
    if client is None:
        raise ValueError(f"editor {name!r} needs an OpenAI-compatible client (client=...)")
    llm = LLMEditor(client, **llm_kwargs)
    return llm if name == "llm" else AutoEditor(DeterministicEditor(operators), llm)
