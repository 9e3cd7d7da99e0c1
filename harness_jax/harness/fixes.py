"""The overlay fix library: named code-hook fixes for recurring agent failures, shared by both
methods. Harness-R1's rule-based engineer (``harness_r1.engineers.RuleBasedEngineer``) composes
the fixes a failure packet calls for into one patch; Harness-S's deterministic editor
(``harness_s.editors``) turns one fix at a time into a child sibling. One library, one set of
texts and hook bodies.

A ``Fix`` is a hook point, the failure modes it addresses (``families``: Harness-R1 packet
feature names and Harness-S root-cause labels), the effect kinds it returns, the helper
functions it calls and its ``body`` (lines inside ``def hook(ctx, nb)`` that ``return`` an
effect when the failure is about to happen and fall through otherwise). ``hook_code(fixes)``
composes fixes of one hook point into one hook (helpers once, bodies in order, ``return None``
at the end), so a patch holds at most one code hook per point as the schema requires;
``code_actions(fixes)`` gives the patch's ``add_code_hook`` actions. ``library(env_name,
protocol)`` gives the fixes with the benchmark's words (``ENV_TEXTS``) and final-answer actions
(``ENV_PROFILES``). ``applicable(fix, env_name, surface)`` says whether the runtime honours what
it returns (``hooks.honoured_kinds``): e.g. ``answer_from_result`` rewrites the agent's answer to
the last result's values, which the public runtime ignores on DBBench, where ``answer_check``
(refuse an answer that does not match the last result, and show its values) is the same fix
class within the public surface.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from harness_jax.harness.hooks import honoured_kinds

# Which actions commit the episode's answer: ``final_tools``: tool name -> regex its JSON
# arguments must match (None: any call); ``final_text``: regex over a text action.
ENV_PROFILES: dict[str, dict] = {
    "dbbench": {"final_tools": {"commit_final_answer": None}, "final_text": r"Action:\s*Answer"},
    "alfworld": {"final_tools": {}, "final_text": None},
    "webshop": {"final_tools": {"click_action": r"buy now"},
                "final_text": r"click\[\s*buy now\s*\]"},
}
ERROR_RE = r"error|exception|invalid|not found|failed|unknown column|no such"

ENV_TEXTS: dict[str, dict] = {
    "dbbench": {
        "inspect": ("Do not answer yet: first run a SELECT that looks at the rows the question "
                    "is about, then answer with the values exactly as the database returns them."),
        "answer": ("Copy answer values exactly as the database returns them; for counts and "
                   "totals compute them with SQL instead of guessing."),
        "format": {"text": ("Every reply must end with either 'Action: Operation' and one ```sql "
                            "block with a single statement, or 'Action: Answer' and 'Final "
                            "Answer: [...]'."),
                   "function": ("Call execute_sql with one statement at a time, then "
                                "commit_final_answer with the answer values.")},
    },
    "webshop": {
        "inspect": ("Do not buy yet: open the item page and check every attribute the "
                    "instruction asks for (options, size, colour, price) first."),
        "answer": ("Choose the options the instruction asks for on the item page before "
                   "clicking Buy Now; respect the price limit."),
        "format": {"text": "End your reply with 'Action:' and one action, e.g. search[...] or "
                           "click[...], using only the available actions.",
                   "function": "Call search_action or click_action with exactly one value."},
    },
    "alfworld": {
        "inspect": "Look around and open receptacles before deciding where the object is.",
        "answer": ("Work through the goal step by step: find the object, take it, process it "
                   "if asked (heat, cool, clean), then put it in the target receptacle."),
        "format": {"text": "Reply with exactly one admissible command, e.g. 'go to <place>'.",
                   "function": "Call the action tool with exactly one admissible command."},
    },
}
DEFAULT_TEXTS = {
    "inspect": "Gather the information the task needs before committing an answer.",
    "answer": "Base the final answer only on what the environment showed you.",
    "format": {"text": "Follow the required reply format exactly.",
               "function": "Use the provided tools with valid arguments."},
}


def env_profile(env_name: str) -> dict:
    return ENV_PROFILES.get(env_name, {"final_tools": {}, "final_text": None})


def env_texts(env_name: str, protocol: Optional[str] = None) -> dict:
    """The fixes' words for ``env_name`` (the format rule of its ``protocol``)."""
    t = dict(DEFAULT_TEXTS, **ENV_TEXTS.get(env_name, {}))
    fmt = t["format"]
    t["format"] = fmt.get(protocol or "text", fmt["text"]) if isinstance(fmt, dict) else fmt
    return t


@dataclasses.dataclass(frozen=True)
class Fix:
    """One named fix (module docstring)."""

    name: str
    hook: str
    families: tuple[str, ...]
    body: str
    helpers: tuple[str, ...] = ()       # names in ``helper_sources(env)``
    kinds: tuple[str, ...] = ()         # effect kinds the body may return (on_before_action / on_post_step)
    needs_final: bool = False           # needs an answer-committing action in the benchmark
    description: str = ""


def _final_helper(env: str) -> str:
    """``final(ctx)``: whether the proposed action commits the answer."""
    prof = env_profile(env)
    lines = ["def final(ctx):", "    a = ctx.action", "    if a is None:", "        return False",
             f"    tools = {dict(prof['final_tools'])!r}",
             "    name = str(a.name or '')",
             "    if name in tools:",
             "        pat = tools[name]",
             "        return pat is None or re.search(pat, str(a.arguments), re.I) is not None"]
    if prof["final_text"]:
        lines.append(f"    return re.search({prof['final_text']!r}, str(a.text or ''), re.I) "
                     "is not None")
    else:
        lines.append("    return False")
    return "\n".join(lines)


_LAST_OBS = """def last_obs(ctx):
    h = ctx.history or []
    if not h:
        return None
    return str(h[-1].observation or '')"""

# the values of a result row list such as [('Maria',), (250,)]
_VALUES = '''def values(obs):
    out = []
    for m in re.finditer(r"\\((?:'([^']*)'|\\"([^\\"]*)\\"|(-?[0-9][0-9.]*)),?\\)", obs):
        out.append(m.group(1) or m.group(2) or m.group(3) or "")
    return out'''

_CLEAN = '''def clean(x):
    s = str(x).strip()
    s = re.sub(r"[.\\s]+$", "", s)
    return s.strip("'").strip('"').strip()'''

_NORMALISE_ANSWER = '''def normalise_answer(ctx):
    act = ctx.action or {}
    name = act.get("name")
    if name:
        if not re.match(r"(commit_final_answer|submit)$", str(name)):
            return None
        args = dict(act.get("arguments") or {})
        changed = False
        for key in list(args.keys()):
            v = args[key]
            if isinstance(v, list):
                nv = [clean(x) for x in v]
            elif isinstance(v, str):
                nv = clean(v)
            else:
                continue
            if nv != v:
                args[key] = nv
                changed = True
        if changed:
            return {"kind": "rewrite_action", "message": "",
                    "action": {"name": name, "arguments": args}}
        return None
    text = str(act.get("text") or "")
    m = re.search(r"Final Answer:(.*)", text)
    if not m:
        return None
    body = m.group(1).strip()
    if body.startswith("["):
        return None
    value = clean(body).replace('"', "'")
    new = text[:m.start()] + 'Final Answer: ["' + value + '"]'
    return {"kind": "rewrite_action", "message": "", "action": new}'''

_ANSWER_FROM_RESULT = '''def answer_from_result(ctx):
    act = ctx.action or {}
    hist = ctx.history or []
    if not hist:
        return None
    vals = values(str(hist[-1].get("observation") or ""))
    if not vals:
        return None
    name = act.get("name")
    if name:
        if not re.match(r"(commit_final_answer|submit)$", str(name)):
            return None
        args = dict(act.get("arguments") or {})
        keys = [k for k, v in args.items() if isinstance(v, list)]
        if not keys or args[keys[0]] == vals:
            return None
        args[keys[0]] = vals
        return {"kind": "rewrite_action", "message": "",
                "action": {"name": name, "arguments": args}}
    text = str(act.get("text") or "")
    m = re.search(r"Final Answer:", text)
    if not m:
        return None
    new = text[:m.start()] + "Final Answer: [" + ", ".join('"' + v + '"' for v in vals) + "]"
    if new == text:
        return None
    return {"kind": "rewrite_action", "message": "", "action": new}'''

_ANSWER_CHECK = '''def answer_check(ctx, nb):
    act = ctx.action or {}
    text = str(act.get("text") or "") + " " + str(act.get("arguments") or "")
    if not re.search(r"final answer|commit_final_answer", text, re.I):
        return None
    hist = ctx.history or []
    if not hist or nb.get("answer_checked", 0) >= 1:
        return None
    vals = values(str(hist[-1].get("observation") or ""))
    if not vals or all(v in text for v in vals):
        return None
    nb["answer_checked"] = 1
    return {"kind": "block_and_prompt",
            "message": "Your answer does not match the last result. Answer with exactly these values: Final Answer: [" + ", ".join('"' + v + '"' for v in vals) + "]"}'''

_BLOCK_AFTER_ERROR = '''def answer_after_error(ctx):
    act = ctx.action or {}
    text = str(act.get("text") or "") + " " + str(act.get("name") or "")
    if not re.search(r"final answer|commit_final_answer|submit", text, re.I):
        return None
    hist = ctx.history or []
    if not hist:
        return None
    last = str(hist[-1].get("observation") or "")
    if re.search(r"error|exception|no such|unknown column|doesn't exist|failed", last, re.I):
        return {"kind": "block_and_prompt",
                "message": "Do not answer yet: the previous action did not succeed. Correct "
                           "it and run it again, then answer from its result."}
    return None'''

_SCHEMA_PREVIEW = '''def schema_preview(ctx):
    if ctx.turn != 0:
        return None
    text = str((ctx.task or {}).get("instruction") or "")
    m = re.search(r"name of this table is (.+?), and the headers", text)
    if m:
        q = "SELECT * FROM `" + m.group(1).strip() + "` LIMIT 5"
        return {"message": "Start by previewing the table: run " + q
                + " and read the columns and values before writing the real query."}
    return {"message": "Start by inspecting the data source (its schema and a few rows) "
                       "before writing the real query."}'''


def helper_sources(env_name: str) -> dict[str, str]:
    """Helper functions fixes call, by name (``final`` knows the benchmark's answer actions)."""
    return {"final": _final_helper(env_name), "last_obs": _LAST_OBS, "values": _VALUES,
            "clean": _CLEAN, "normalise_answer": _NORMALISE_ANSWER,
            "answer_from_result": _ANSWER_FROM_RESULT, "answer_check": _ANSWER_CHECK,
            "answer_after_error": _BLOCK_AFTER_ERROR, "schema_preview": _SCHEMA_PREVIEW}


def _once(key: str, limit: int) -> str:
    return (f"nb.get({key!r}, 0) < {limit}:\n"
            f"        nb[{key!r}] = nb.get({key!r}, 0) + 1")


def _call(fn: str, *args: str) -> str:
    return f"    out = {fn}({', '.join(args or ('ctx',))})\n    if out:\n        return out"


def library(env_name: str, protocol: Optional[str] = None) -> dict[str, Fix]:
    """Every fix with ``env_name``'s words, by name, in the order the rule-based engineer tries
    them (module docstring)."""
    t = env_texts(env_name, protocol)
    block, hint, rewrite = ("block_and_prompt",), ("inject_hint",), ("rewrite_action",)
    fixes = [
        Fix("inspect_before_answer", "on_before_action", (
            "answered_without_inspecting",),
            f"    if final(ctx) and last_obs(ctx) is None and {_once('early', 2)}\n"
            f"        return {{'kind': 'block_and_prompt', 'message': {t['inspect']!r}}}",
            ("final", "last_obs"), block, True, "refuse an answer before anything was observed"),
        Fix("no_answer_after_error", "on_before_action", ("answered_after_error",),
            f"    obs = last_obs(ctx)\n"
            f"    if final(ctx) and obs is not None and re.search({ERROR_RE!r}, obs, re.I) and "
            f"{_once('after_error', 2)}\n"
            "        return {'kind': 'block_and_prompt', 'message': 'The previous action failed "
            "(see the error above). Fix the action and run it again before answering.'}",
            ("final", "last_obs"), block, True, "refuse an answer right after an error"),
        Fix("answer_check", "on_before_action", ("wrong_answer",), _call("answer_check", "ctx", "nb"),
            ("values", "answer_check"), block, True,
            "refuse an answer that does not match the last result, showing its values"),
        Fix("answer_from_result", "on_before_action", ("wrong_answer",), _call("answer_from_result"),
            ("values", "answer_from_result"), rewrite, True,
            "an answer right after a query result is rewritten to that result's values"),
        Fix("break_repeats", "on_before_action", ("repeated_actions", "no_effect_actions",
                                                  "repeated_action"),
            "    if (ctx.state.repeat_count or 0) >= 2:\n"
            "        return {'kind': 'block_and_prompt', 'message': 'You already sent this exact "
            "action several times without progress. Choose a different action.'}",
            (), block, False, "refuse a third identical consecutive action"),
        Fix("block_answer_after_error", "on_before_action", ("answered_after_error",),
            _call("answer_after_error"), ("answer_after_error",), block, True,
            "block an answer that directly follows an error observation"),
        Fix("answer_format_normaliser", "on_before_action", ("wrong_answer",),
            _call("normalise_answer"), ("clean", "normalise_answer"), rewrite, True,
            "normalise the final answer (list syntax, stray quotes, trailing periods)"),
        Fix("error_hint", "make_pre_hint", ("answered_after_error", "saw_errors"),
            f"    obs = str(ctx.observation or '')\n"
            f"    if ctx.turn and re.search({ERROR_RE!r}, obs, re.I):\n"
            "        line = [s for s in obs.splitlines() if s.strip()][:1]\n"
            "        return {'message': 'The last action failed: ' + (line[0][:200] if line else "
            "'see above') + '. Correct it (names, quoting, syntax) before going on.'}",
            description="point at the error the agent is about to read"),
        Fix("format_hint", "make_pre_hint", ("format_errors", "unparsable_action"),
            "    obs = str(ctx.observation or '').lower()\n"
            "    if ctx.turn and (ctx.state.errors or 0) > 0 and ('parse' in obs or 'format' in "
            "obs or 'could not' in obs):\n"
            f"        return {{'message': {t['format']!r}}}",
            description="restate the reply format after a format error"),
        Fix("turn_budget", "make_pre_hint", ("ran_out_of_turns", "turn_limit"),
            "    left = ctx.turns_left\n"
            "    if left is not None and 0 < left <= 2:\n"
            "        return {'message': 'Only ' + str(left) + ' turn(s) left: finish the task now "
            "with your best answer.'}",
            description="warn when two turns are left"),
        Fix("schema_preview", "make_pre_hint", ("answered_without_inspecting", "tool_error",
                                                "empty_result", "wrong_answer"),
            _call("schema_preview"), ("schema_preview",),
            description="tell the policy, before its first decision, how to preview the table"),
        Fix("recover_when_stuck", "on_post_step", ("repeated_actions", "no_effect_actions",
                                                   "ran_out_of_turns"),
            "    obs = str(ctx.observation or '').lower()\n"
            "    st = ctx.state\n"
            "    if (st.stalled or (st.repeat_count or 0) >= 1 or 'nothing happens' in obs) and "
            f"{_once('recover', 3)}\n"
            "        return {'kind': 'inject_hint', 'message': 'That action made no progress. Do "
            "not repeat it; look at the current state and try a different action.'}",
            (), hint, False, "recovery advice when the episode stalls"),
        Fix("skills", "on_init", ("wrong_answer", "answered_without_inspecting", "format_errors"),
            f"    return {{'skills': [{t['answer']!r}, {t['format']!r}]}}",
            description="answer and format guidance in the system prompt"),
    ]
    return {f.name: f for f in fixes}


def applicable(fix: Fix, env_name: str, surface: str = "contract") -> bool:
    """Whether ``fix`` can act on ``env_name``: its effect kinds are honoured there under
    ``surface`` and, when it guards answers, the benchmark has an answer action."""
    prof = env_profile(env_name)
    if fix.needs_final and not (prof["final_tools"] or prof["final_text"]):
        return False
    return all(k in honoured_kinds(env_name, fix.hook, surface) for k in fix.kinds)


def hook_code(fixes: Sequence[Fix], env_name: str) -> str:
    """One ``hook(ctx, nb)`` running ``fixes`` (all of one hook point) in order; the first that
    returns an effect wins."""
    hooks = {f.hook for f in fixes}
    if len(hooks) != 1:
        raise ValueError(f"hook_code: fixes of several hook points {sorted(hooks)}; one at a time")
    src = helper_sources(env_name)
    names: list[str] = []
    for f in fixes:
        names += [h for h in f.helpers if h not in names]
    body = "\n".join(f.body for f in fixes)
    tail = "" if fixes[0].hook == "on_init" else "\n    return None"
    return "\n\n".join([src[h] for h in names] + ["def hook(ctx, nb):\n" + body + tail]) + "\n"


def code_actions(fixes: Sequence[Fix], env_name: str) -> list[dict]:
    """The ``add_code_hook`` actions of ``fixes`` (one per hook point, in lifecycle order)."""
    from harness_jax.harness.lint import HOOK_NAMES

    out = []
    for hook in HOOK_NAMES:
        mine = [f for f in fixes if f.hook == hook]
        if hook == "on_init" and len(mine) > 1:
            raise ValueError("code_actions: one on_init fix per patch")
        if mine:
            out.append({"type": "add_code_hook", "hook": hook, "code": hook_code(mine, env_name)})
    return out
