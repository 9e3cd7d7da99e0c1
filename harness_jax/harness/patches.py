"""The overlay patch format (structurally compatible with ``harness-r1-patch-v1``).

A patch is ``{"schema_version": "harness-r1-patch-v1", "benchmark", "description",
"actions": [...]}`` with 1-12 typed actions:

* ``set_config``        ``{"field", "value"}`` (or ``{"values": {field: value}}``): bounded, typed
  runtime knobs (``CONFIG_FIELDS``); toggles of built-in modules are refused;
* ``edit_tool_hint``    ``{"tool", "mode": append|prepend|replace, "text"}``;
* ``add_or_edit_skill`` ``{"id", "text", "task_types" (<= 16), "keywords" (<= 32)}``;
* ``add_guard_rule``    ``{"id", "when": COND, "effect", "message", "action"?}`` checked before an
  action reaches the environment (effects block_and_prompt / rewrite_action / force_action /
  inject_hint);
* ``add_recovery_rule`` the same after each environment step (effects inject_hint / force_action);
* ``add_code_hook``     ``{"hook": on_init|make_pre_hint|on_before_action|on_post_step,
  "code": "def hook(ctx, nb): ..."}``.

Conditions: ``{"all": [..]}``, ``{"any": [..]}``, ``{"not": C}``, ``{"eq"|"ne"|"gt"|"gte"|"lt"|
"lte"|"contains"|"startswith"|"endswith": [PATH, VALUE]}``, ``{"pred": NAME}``; nesting <= 8;
``PATH`` a dotted path under ``action.``, ``state.``, ``task.`` or ``obs.``; predicates come from a
per-environment registry. Conditions are evaluated host-side by a small pure interpreter.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Callable, Optional

from harness_jax.envs.base import content_hash
from harness_jax.harness.lint import HOOK_NAMES

SCHEMA_VERSION = "harness-r1-patch-v1"
MAX_ACTIONS = 12
MAX_CONDITION_DEPTH = 8
MAX_TEXT = 900
ACTION_TYPES = ("set_config", "edit_tool_hint", "add_or_edit_skill", "add_guard_rule",
                "add_recovery_rule", "add_code_hook")
GUARD_EFFECTS = ("block_and_prompt", "rewrite_action", "force_action", "inject_hint")
RECOVERY_EFFECTS = ("inject_hint", "force_action")
COMPARATORS = ("eq", "ne", "gt", "gte", "lt", "lte", "contains", "startswith", "endswith")
PATH_ROOTS = ("action", "state", "task", "obs")
SKILL_ID = re.compile(r"^[a-z][a-z0-9_\-]{0,47}$")

# Bounded runtime knobs a patch may set: name -> (type, min, max).
CONFIG_FIELDS: dict[str, tuple] = {
    "max_observation_chars": (int, 200, 20000),
    "repeated_action_limit": (int, 1, 20),
    "stall_turns": (int, 1, 50),
    "max_hint_chars": (int, 50, 900),
}
_MODULE_TOGGLE = re.compile(r"^(enable|disable|use|module|builtin|h[2-5])[_\-]", re.I)


def _state_view(view: dict, path: str) -> Any:
    cur: Any = view
    for part in path.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and part.isdigit():
            i = int(part)
            cur = cur[i] if i < len(cur) else None
        else:
            return None
    return cur


# -- predicates ---------------------------------------------------------------------------------
def _pred_repeated(view):
    return int(_state_view(view, "state.repeat_count") or 0) >= 1


def _pred_obs_empty(view):
    return not str(_state_view(view, "obs.text") or "").strip()


def _pred_obs_error(view):
    if _state_view(view, "obs.error"):       # the environment said the last action failed
        return True
    text = str(_state_view(view, "obs.text") or "").lower()
    return any(w in text for w in ("error", "exception", "invalid", "not found", "failed"))


def _pred_stalled(view):
    return bool(_state_view(view, "state.stalled"))


def _pred_parse_error(view):
    return bool(_state_view(view, "action.parse_errors"))


def _pred_no_tool_call(view):
    return not _state_view(view, "action.name")


def _pred_sql_mutation(view):
    sql = str(_state_view(view, "action.arguments.query") or _state_view(view, "action.text")
              or "")
    return bool(re.match(r"\s*(insert|update|delete|drop|alter|create)\b", sql, re.I))


def _pred_nothing_happens(view):
    return "nothing happens" in str(_state_view(view, "obs.text") or "").lower()


COMMON_PREDICATES: dict[str, Callable[[dict], bool]] = {
    "action_repeated": _pred_repeated,
    "observation_empty": _pred_obs_empty,
    "observation_has_error": _pred_obs_error,
    "parse_error": _pred_parse_error,
    "no_tool_call": _pred_no_tool_call,
    "stalled": _pred_stalled,
}
ENV_PREDICATES: dict[str, dict[str, Callable[[dict], bool]]] = {
    "dbbench": {"sql_mutation": _pred_sql_mutation},
    "alfworld": {"nothing_happens": _pred_nothing_happens},
    "webshop": {},
}


def predicates_for(env_name: Optional[str]) -> dict[str, Callable[[dict], bool]]:
    preds = dict(COMMON_PREDICATES)
    preds.update(ENV_PREDICATES.get(env_name or "", {}))
    return preds


def register_predicate(env_name: str, name: str, fn: Callable[[dict], bool]) -> None:
    """Adds a benchmark-specific predicate usable as ``{"pred": name}``."""
    ENV_PREDICATES.setdefault(env_name, {})[name] = fn


# -- conditions ---------------------------------------------------------------------------------
def check_condition(cond: Any, preds: dict, where: str, depth: int = 1) -> list[str]:
    """Schema errors of one condition tree (empty when valid)."""
    if depth > MAX_CONDITION_DEPTH:
        return [f"{where}: condition nesting deeper than {MAX_CONDITION_DEPTH}"]
    if not isinstance(cond, dict) or len(cond) != 1:
        return [f"{where}: a condition must be an object with exactly one operator, got "
                f"{json.dumps(cond)[:80]}"]
    (op, arg), = cond.items()
    if op in ("all", "any"):
        if not isinstance(arg, list) or not arg:
            return [f"{where}.{op}: expected a non-empty list of conditions"]
        errs = []
        for i, c in enumerate(arg):
            errs += check_condition(c, preds, f"{where}.{op}[{i}]", depth + 1)
        return errs
    if op == "not":
        return check_condition(arg, preds, f"{where}.not", depth + 1)
    if op in COMPARATORS:
        if not isinstance(arg, list) or len(arg) != 2 or not isinstance(arg[0], str):
            return [f"{where}.{op}: expected [PATH, VALUE]"]
        path = arg[0]
        if path.split(".")[0] not in PATH_ROOTS or not re.fullmatch(r"[a-z_][a-z0-9_.]*", path):
            return [f"{where}.{op}: path {path!r} must start with one of {PATH_ROOTS}"]
        if isinstance(arg[1], (dict, list)):
            return [f"{where}.{op}: the value must be a string, number, bool or null"]
        return []
    if op == "pred":
        name = arg[0] if isinstance(arg, list) and arg else arg
        if name not in preds:
            return [f"{where}.pred: unknown predicate {name!r}; available: {sorted(preds)}"]
        return []
    return [f"{where}: unknown operator {op!r}; use all/any/not/{'/'.join(COMPARATORS)}/pred"]


def eval_condition(cond: dict, view: dict, preds: dict) -> bool:
    """Evaluates a (validated) condition against a view {action, state, task, obs}."""
    (op, arg), = cond.items()
    if op == "all":
        return all(eval_condition(c, view, preds) for c in arg)
    if op == "any":
        return any(eval_condition(c, view, preds) for c in arg)
    if op == "not":
        return not eval_condition(arg, view, preds)
    if op == "pred":
        name = arg[0] if isinstance(arg, list) else arg
        try:
            return bool(preds[name](view))
        except Exception:  # noqa: BLE001 - a failing predicate is false
            return False
    left, right = _state_view(view, arg[0]), arg[1]
    try:
        if op == "eq":
            return left == right
        if op == "ne":
            return left != right
        if op in ("gt", "gte", "lt", "lte"):
            if left is None:
                return False
            lf, rf = float(left), float(right)
            return {"gt": lf > rf, "gte": lf >= rf, "lt": lf < rf, "lte": lf <= rf}[op]
        ls, rs = str(left if left is not None else ""), str(right)
        if op == "contains":
            return rs.lower() in ls.lower()
        if op == "startswith":
            return ls.lower().startswith(rs.lower())
        return ls.lower().endswith(rs.lower())
    except (TypeError, ValueError):
        return False


# -- the patch ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Patch:
    """A validated, normalised overlay patch."""

    actions: list[dict]
    benchmark: str = ""
    description: str = ""
    schema_version: str = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return {"schema_version": self.schema_version, "benchmark": self.benchmark,
                "description": self.description, "actions": self.actions}

    @property
    def patch_id(self) -> str:
        return "patch-" + content_hash(self.to_dict())

    def code_hooks(self) -> dict[str, str]:
        return {a["hook"]: a["code"] for a in self.actions if a["type"] == "add_code_hook"}

    def of_type(self, typ: str) -> list[dict]:
        return [a for a in self.actions if a["type"] == typ]

    def config(self) -> dict:
        out = {}
        for a in self.of_type("set_config"):
            out.update(a["values"])
        return out

    def text_fields(self) -> list[tuple[str, str]]:
        """Every free-text field (for leakage filters): (where, text)."""
        out = [("description", self.description)]
        for i, a in enumerate(self.actions):
            for k in ("text", "message", "code", "id"):
                if isinstance(a.get(k), str):
                    out.append((f"actions[{i}].{k}", a[k]))
            act = a.get("action")
            if isinstance(act, str):
                out.append((f"actions[{i}].action", act))
            elif isinstance(act, dict):
                out.append((f"actions[{i}].action", json.dumps(act, ensure_ascii=False)))
            for k in ("keywords", "task_types"):
                for j, s in enumerate(a.get(k) or []):
                    out.append((f"actions[{i}].{k}[{j}]", str(s)))
        return out


def _bounded_text(a: dict, key: str, where: str, errors: list, required: bool = True,
                  cap: int = MAX_TEXT) -> Optional[str]:
    v = a.get(key)
    if v is None:
        if required:
            errors.append(f"{where}.{key}: required (a string of at most {cap} chars)")
        return None
    if not isinstance(v, str) or (required and not v.strip()):
        errors.append(f"{where}.{key}: must be a non-empty string")
        return None
    if len(v) > cap:
        errors.append(f"{where}.{key}: {len(v)} chars; the limit is {cap}")
        return None
    return v


def normalise_action(a: Any, i: int, env_name: Optional[str], errors: list) -> Optional[dict]:
    """Schema check of one action; appends errors naming the field, returns the normal form."""
    where = f"actions[{i}]"
    if not isinstance(a, dict):
        errors.append(f"{where}: must be an object")
        return None
    typ = a.get("type", a.get("op"))
    if typ not in ACTION_TYPES:
        errors.append(f"{where}.type: {typ!r} is not one of {ACTION_TYPES}")
        return None
    n_err = len(errors)
    out: dict = {"type": typ}
    if typ == "set_config":
        values = a.get("values")
        if values is None and "field" in a:
            values = {a["field"]: a.get("value")}
        if not isinstance(values, dict) or not values:
            errors.append(f"{where}: set_config needs 'field' and 'value' (or 'values')")
            return None
        clean = {}
        for k, v in values.items():
            if _MODULE_TOGGLE.match(str(k)):
                errors.append(f"{where}.{k}: built-in module toggles are refused (an overlay "
                              "cannot switch runtime modules)")
                continue
            if k not in CONFIG_FIELDS:
                errors.append(f"{where}.{k}: unknown config field; allowed: {sorted(CONFIG_FIELDS)}")
                continue
            typ_, lo, hi = CONFIG_FIELDS[k]
            if typ_ is bool:
                if not isinstance(v, bool):
                    errors.append(f"{where}.{k}: must be true or false")
                    continue
            else:
                if isinstance(v, bool) or not isinstance(v, int):
                    errors.append(f"{where}.{k}: must be an integer in [{lo}, {hi}]")
                    continue
                if not lo <= v <= hi:
                    errors.append(f"{where}.{k}: {v} is out of bounds [{lo}, {hi}]")
                    continue
            clean[k] = v
        out["values"] = clean
    elif typ == "edit_tool_hint":
        out["tool"] = str(a.get("tool", "*")) or "*"
        mode = a.get("mode", "append")
        if mode not in ("append", "prepend", "replace"):
            errors.append(f"{where}.mode: must be append, prepend or replace")
        out["mode"] = mode
        out["text"] = _bounded_text(a, "text", where, errors)
    elif typ == "add_or_edit_skill":
        sid = a.get("id")
        if not isinstance(sid, str) or not SKILL_ID.match(sid):
            errors.append(f"{where}.id: must match {SKILL_ID.pattern}")
        out["id"] = sid
        out["text"] = _bounded_text(a, "text", where, errors)
        for key, cap in (("task_types", 16), ("keywords", 32)):
            vals = a.get(key, [])
            if not isinstance(vals, list) or not all(isinstance(s, str) for s in vals):
                errors.append(f"{where}.{key}: must be a list of strings")
                vals = []
            elif len(vals) > cap:
                errors.append(f"{where}.{key}: {len(vals)} entries; the limit is {cap}")
            out[key] = [s[:80] for s in vals[:cap]]
    elif typ in ("add_guard_rule", "add_recovery_rule"):
        effects = GUARD_EFFECTS if typ == "add_guard_rule" else RECOVERY_EFFECTS
        out["id"] = str(a.get("id", f"rule{i}"))[:48]
        cond = a.get("when", a.get("condition"))
        errors.extend(check_condition(cond, predicates_for(env_name), f"{where}.when"))
        out["when"] = cond
        effect = a.get("effect")
        if effect not in effects:
            errors.append(f"{where}.effect: {effect!r} must be one of {effects}")
        out["effect"] = effect
        out["message"] = _bounded_text(a, "message", where, errors,
                                       required=effect in ("block_and_prompt", "inject_hint"))
        if effect in ("force_action", "rewrite_action"):
            act = a.get("action")
            if not (isinstance(act, str) and act.strip()) and not (
                    isinstance(act, dict) and isinstance(act.get("name"), str)):
                errors.append(f"{where}.action: {effect} needs an action (a string or "
                              '{"name", "arguments"})')
            out["action"] = act
    else:  # add_code_hook
        hook = a.get("hook")
        if hook not in HOOK_NAMES:
            errors.append(f"{where}.hook: {hook!r} must be one of {HOOK_NAMES}")
        out["hook"] = hook
        code = a.get("code")
        if not isinstance(code, str) or not code.strip():
            errors.append(f"{where}.code: must be the hook's Python source")
        out["code"] = code
    return out if len(errors) == n_err else None
