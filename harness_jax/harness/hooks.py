"""Lifecycle hook contracts and ``run_hook`` (lint + isolated execution + contract check).

The four hook points of a Harness-R1 overlay and what each may return (anything else is
dropped; texts are collapsed to one line and capped at 900 characters):

* ``on_init``          -> ``{"skills": [str, ... <= 5], "tool_hint": str}``
* ``make_pre_hint``    -> ``{"message": str}``
* ``on_before_action`` -> ``{"kind": "block_and_prompt" | "force_action" | "rewrite_action",
  "message": str, "action": str | {"name", "arguments"}}``
* ``on_post_step``     -> ``{"kind": "inject_hint" | "force_action", "message", "action"}``

A result that violates its contract (wrong kind, a forced action without an action, a
block without a message, ...) is treated as no effect, like a crash or a timeout.

What a hook reads (``ctx``, attribute or item access; missing attributes read as None).

Every hook point gets:

* ``hook`` (its own name), ``env``, ``task`` (``env``, ``category``, ``instruction`` = the task
  text; no task or episode identifier: a hook cannot key its behaviour on which task or episode
  it is in), ``turn``, ``max_turns``, ``turns_left``;
* ``history``: the last turns, each ``{turn, action, observation, error}``;
* ``state``: ``turn``, ``repeat_count`` (identical consecutive actions so far), ``no_progress_turns``,
  ``stalled`` (``no_progress_turns >= stall_turns``), ``errors`` (turns whose feedback reported an
  error), ``notes`` (entries in ``nb``);
* the latest feedback: ``observation`` (the text the policy sees next or is answering),
  ``last_action`` (the actions the environment received in the previous turn, None before the
  first) and ``last_error`` (the error that feedback reports: a parse error, an environment's
  ``info["error"]``, a blocked action; None when there is none);
* ``admissible_actions`` when the environment lists them.

Per hook point:

* ``on_init``: ``observation`` is the task's first observation; ``last_action``/``last_error``
  are None;
* ``make_pre_hint``: ``observation`` is the pending feedback the hint will join;
* ``on_before_action``: the same ``observation``/``last_*`` (the feedback the policy answered),
  plus ``action`` (``name``, ``arguments``, ``text``, ``parse_errors``) and
  ``state.repeat_count`` counting this action;
* ``on_post_step``: this turn's outcome: ``action.sent`` (what the environment received),
  ``observation`` (the new feedback), ``last_action`` (= ``action.sent``), ``last_error``,
  ``reward``, ``done``.

Typed rules read the same contexts through ``obs.text`` (= ``observation``), ``obs.error``
(= ``last_error``), ``action.*``, ``state.*`` and ``task.*``. ``nb`` is the episode's notebook (a
JSON dict that persists across the calls of one episode and is the ONLY state that does: the
hook's module is executed afresh for every call, so function attributes, mutable defaults and the
like start empty each time; ``sandbox_worker``). Helpers: ``re`` (search, match, findall, sub, split, ...),
``math``, ``SequenceMatcher``, and the builtins of ``lint.ALLOWED_BUILTINS``.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Optional, Union

from harness_jax.harness.lint import HOOK_NAMES, lint_hook_source
from harness_jax.harness.sandbox import HookSandbox, HookSandboxPool, default_sandbox

TEXT_CAP = 900
MAX_SKILLS = 5
BEFORE_ACTION_KINDS = ("block_and_prompt", "force_action", "rewrite_action")
POST_STEP_KINDS = ("inject_hint", "force_action")

# Effect surfaces: which effect kinds the runtime HONOURS at each hook point (a kind outside the
# surface has no effect and is counted as ignored; ``HookCalls``).
#   "contract": every kind of the return contracts above, on every benchmark;
#   "public":   the public Harness-R1 runtime's surface per benchmark: WebShop and ALFWorld honour
#               rewritten and forced actions (actions there are the environment's own closed
#               vocabulary: clicks, searches, admissible commands); DBBench ignores them (only
#               block_and_prompt and inject_hint: an overlay may not write SQL or answers for the
#               agent), and so does every benchmark the public runtime does not cover (code and
#               shell actions: AppWorld, SWE, ...).
CONTRACT_SURFACE = {"on_before_action": BEFORE_ACTION_KINDS, "on_post_step": POST_STEP_KINDS}
NARROW_SURFACE = {"on_before_action": ("block_and_prompt",), "on_post_step": ("inject_hint",)}
PUBLIC_SURFACES = {"webshop": CONTRACT_SURFACE, "alfworld": CONTRACT_SURFACE}
EFFECT_SURFACES = ("contract", "public")


def honoured_kinds(env_name: Optional[str], hook: str, surface: str) -> tuple[str, ...]:
    """The effect kinds hook point ``hook`` may take on ``env_name`` under ``surface``."""
    if surface not in EFFECT_SURFACES:
        raise ValueError(f"effect surface {surface!r}: use one of {EFFECT_SURFACES}")
    table = CONTRACT_SURFACE if surface == "contract" else PUBLIC_SURFACES.get(env_name or "",
                                                                              NARROW_SURFACE)
    return table.get(hook, ())


def one_line(text: Any, cap: int = TEXT_CAP) -> str:
    """Collapses whitespace to single spaces and caps the length (hook texts are one line)."""
    if text is None:
        return ""
    s = re.sub(r"\s+", " ", str(text)).strip()
    return s[:cap]


def normalise_action(action: Any) -> Optional[Any]:
    """A hook-supplied action: a non-empty string, or ``{"name": str, "arguments": dict}``."""
    if isinstance(action, str):
        a = action.strip()
        return a[:TEXT_CAP] if a else None
    if isinstance(action, dict):
        name = action.get("name")
        args = action.get("arguments", {})
        if isinstance(name, str) and name.strip() and isinstance(args, dict):
            return {"name": name.strip(), "arguments": args}
    return None


def normalise_hook_result(hook: str, result: Any) -> Optional[dict]:
    """Applies a hook point's return contract; returns None when the result has no effect."""
    if hook not in HOOK_NAMES:
        raise ValueError(f"unknown hook {hook!r}; expected one of {HOOK_NAMES}")
    if not isinstance(result, dict):
        return None
    if hook == "on_init":
        out: dict = {}
        skills = result.get("skills")
        if isinstance(skills, list):
            cleaned = [one_line(s) for s in skills if isinstance(s, str) and s.strip()]
            if cleaned:
                out["skills"] = cleaned[:MAX_SKILLS]
        hint = one_line(result.get("tool_hint")) if isinstance(result.get("tool_hint"), str) else ""
        if hint:
            out["tool_hint"] = hint
        return out or None
    if hook == "make_pre_hint":
        msg = result.get("message")
        msg = one_line(msg) if isinstance(msg, str) else ""
        return {"message": msg} if msg else None
    kinds = BEFORE_ACTION_KINDS if hook == "on_before_action" else POST_STEP_KINDS
    kind = result.get("kind")
    if kind not in kinds:
        return None
    msg = one_line(result.get("message")) if isinstance(result.get("message"), str) else ""
    out = {"kind": kind, "message": msg}
    if kind in ("force_action", "rewrite_action"):
        action = normalise_action(result.get("action"))
        if action is None:
            return None
        out["action"] = action
    elif not msg:
        return None  # block_and_prompt / inject_hint without a message do nothing
    return out


@functools.lru_cache(maxsize=1024)
def lint_cached(source: str) -> tuple[str, ...]:
    """``lint_hook_source`` memoised by source (hooks are called many times per episode)."""
    return tuple(lint_hook_source(source))


def run_hook(source: str, ctx: dict, nb: Optional[dict] = None, timeout_s: float = 1.0,
             hook: Optional[str] = None,
             sandbox: Union[None, HookSandbox, HookSandboxPool] = None,
             lint: bool = True) -> Optional[dict]:
    """Lints ``source`` and runs its ``hook(ctx, nb)`` in the isolated worker.

    Returns the hook's dict (normalised by ``hook``'s contract when ``hook`` names a hook point),
    or None when the code is rejected by the lint, fails, times out, or returns something that is
    not a dict / violates the contract. ``nb`` (the per-episode notebook) is updated in place
    with the hook's changes when the call succeeds. ``lint=False`` skips the lint (tests of the
    isolation boundary only).
    """
    if not isinstance(source, str):
        return None
    if lint and lint_cached(source):
        return None
    box = sandbox or default_sandbox()
    out = box.call(source, ctx, nb if nb is not None else {}, timeout_s=timeout_s)
    if not out.ok:
        return None
    if nb is not None and isinstance(out.nb, dict):
        nb.clear()
        nb.update(out.nb)
    if hook is not None:
        return normalise_hook_result(hook, out.result)
    return out.result if isinstance(out.result, dict) else None
