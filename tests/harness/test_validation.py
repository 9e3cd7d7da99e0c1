"""Patch validation: accept and reject cases, leakage filters, hook lint, runtime no-op dry run."""
import json

import pytest

from harness_jax.harness import run_hook, validate_patch
from harness_jax.harness.hooks import normalise_hook_result
from harness_jax.harness.lint import lint_hook_source
from harness_jax.harness.patches import eval_condition, predicates_for

GOOD_HOOK = '''
def seen(nb, key):
    return nb.get(key, 0)

def hook(ctx, nb):
    text = ctx.action.text or ""
    nb["n"] = seen(nb, "n") + 1
    if re.search("drop\\\\s+table", text, re.I):
        return {"kind": "block_and_prompt", "message": "Dropping tables is not allowed."}
    try:
        ratio = SequenceMatcher(None, text, nb.get("last", "")).ratio()
    except Exception:
        ratio = 0.0
    nb["last"] = text
    if ratio > 0.95 and math.floor(ratio) == 0:
        return {"kind": "block_and_prompt", "message": "You repeated the last query."}
    return None
'''


def patch_of(*actions, benchmark="dbbench"):
    return {"schema_version": "harness-r1-patch-v1", "benchmark": benchmark,
            "description": "guard destructive SQL", "actions": list(actions)}


def code_hook(hook, code):
    return {"type": "add_code_hook", "hook": hook, "code": code}


def test_accepts_code_hook_patch_from_model_text():
    patch = patch_of(code_hook("on_before_action", GOOD_HOOK))
    text = ("<think>\nThe agent drops tables.\n</think>\n<patch>" + json.dumps(patch)
            + "</patch>")
    res = validate_patch(text, env_name="dbbench")
    assert res.ok, res.errors
    assert res.patch.code_hooks() == {"on_before_action": GOOD_HOOK}
    # the last <patch> block wins, fences are tolerated
    text2 = "<patch>{bad json</patch> then <patch>```json\n" + json.dumps(patch) + "\n```</patch>"
    assert validate_patch(text2, env_name="dbbench").ok


def test_accepts_typed_actions():
    res = validate_patch(patch_of(
        {"type": "set_config", "field": "max_observation_chars", "value": 3000},
        {"type": "edit_tool_hint", "tool": "execute_sql", "mode": "append",
         "text": "Inspect the schema with DESCRIBE before writing queries."},
        {"type": "add_or_edit_skill", "id": "schema-first", "text": "Look up columns first.",
         "task_types": ["SELECT"], "keywords": ["column"]},
        {"type": "add_guard_rule", "id": "no_drop",
         "when": {"all": [{"eq": ["action.name", "execute_sql"]}, {"pred": "sql_mutation"},
                          {"not": {"contains": ["task.instruction", "insert"]}}]},
         "effect": "block_and_prompt", "message": "Do not modify tables unless asked."},
        {"type": "add_recovery_rule", "id": "err", "when": {"pred": "observation_has_error"},
         "effect": "inject_hint", "message": "Read the error and fix the query."}))
    assert res.ok, res.errors
    assert res.patch.config() == {"max_observation_chars": 3000}


REJECT_CASES = [
    ("no patch here", "no <patch>"),
    ("<patch>{not json}</patch>", "not valid JSON"),
    (patch_of(), "1 to 12 actions"),
    ({**patch_of(code_hook("on_init", "def hook(ctx, nb):\n    return {}\n")),
      "schema_version": "v0"}, "schema_version"),
    (patch_of(code_hook("on_init", "def hook(ctx, nb):\n    return {}\n"), benchmark="webshop"),
     "is for 'webshop'"),
    (patch_of(*[code_hook("on_init", "def hook(ctx, nb):\n    return {}\n")] * 13), "1 to 12"),
    (patch_of({"type": "teleport"}), "is not one of"),
    (patch_of({"type": "set_config", "field": "max_observation_chars", "value": 10 ** 9}),
     "out of bounds"),
    (patch_of({"type": "set_config", "field": "enable_memory_module", "value": True}),
     "module toggles are refused"),
    (patch_of({"type": "set_config", "field": "temperature", "value": 2}), "unknown config field"),
    (patch_of({"type": "add_or_edit_skill", "id": "Bad Id!", "text": "x"}), "must match"),
    (patch_of({"type": "add_or_edit_skill", "id": "ok", "text": "x",
               "keywords": ["k"] * 33}), "the limit is 32"),
    (patch_of({"type": "add_guard_rule", "when": {"eq": ["secret.path", 1]},
               "effect": "block_and_prompt", "message": "m"}), "must start with one of"),
    (patch_of({"type": "add_guard_rule", "when": {"pred": "read_minds"},
               "effect": "block_and_prompt", "message": "m"}), "unknown predicate"),
    (patch_of({"type": "add_guard_rule", "when": {"xor": []},
               "effect": "block_and_prompt", "message": "m"}), "unknown operator"),
    (patch_of({"type": "add_guard_rule", "when": {"not": {"not": {"not": {"not": {"not": {"not": {
        "not": {"not": {"pred": "parse_error"}}}}}}}}}, "effect": "block_and_prompt",
        "message": "m"}), "nesting deeper than 8"),
    (patch_of({"type": "add_recovery_rule", "when": {"pred": "parse_error"},
               "effect": "block_and_prompt", "message": "m"}), "must be one of"),
    (patch_of({"type": "add_guard_rule", "when": {"pred": "parse_error"},
               "effect": "force_action"}), "needs an action"),
    (patch_of(code_hook("on_exit", "def hook(ctx, nb):\n    return {}\n")), "must be one of"),
    (patch_of(code_hook("on_init", "def hook(ctx, nb):\n    return {}\n"),
              code_hook("on_init", "def hook(ctx, nb):\n    return {}\n")), "two code hooks"),
    (patch_of(code_hook("on_init", "import os\ndef hook(ctx, nb):\n    return {}\n")),
     "only top-level function"),
    (patch_of({"type": "add_or_edit_skill", "id": "leak", "text": "For task #12 answer 5."}),
     "leaks a task/instance identifier"),
    (patch_of({"type": "add_or_edit_skill", "id": "leak", "text": "In dbbench-17 use LIMIT."}),
     "leaks"),
]


@pytest.mark.parametrize("patch,fragment", REJECT_CASES,
                         ids=[f"{i}-{c[1]}" for i, c in enumerate(REJECT_CASES)])
def test_rejections_name_the_problem(patch, fragment):
    res = validate_patch(patch, env_name="dbbench")
    assert not res.ok and res.patch is None
    assert any(fragment in e for e in res.errors), res.errors


def test_protocol_and_env_specific_rules():
    patch = patch_of(code_hook("on_init", "def hook(ctx, nb):\n    return {}\n"))
    reply = "reasoning</think>\n<think>again</think><patch>" + json.dumps(patch) + "</patch>"
    res = validate_patch(reply, env_name="dbbench", response_protocol="prefill_think_patch")
    assert not res.ok and "second <think>" in res.errors[0]
    typed = patch_of({"type": "add_recovery_rule", "when": {"pred": "parse_error"},
                      "effect": "inject_hint", "message": "Use the XML tool format."})
    res = validate_patch(typed, env_name="dbbench", require_code_hook_only=True)
    assert not res.ok and "only add_code_hook" in res.errors[0]
    alf = patch_of({"type": "add_recovery_rule", "when": {"pred": "nothing_happens"},
                    "effect": "force_action", "action": "go to cabinet 3"}, benchmark="alfworld")
    res = validate_patch(alf, env_name="alfworld")
    assert not res.ok and "leaks" in res.errors[0]
    asin = patch_of({"type": "add_or_edit_skill", "id": "buy", "text": "Buy B07XJ8C8F5 first."},
                    benchmark="webshop")
    assert not validate_patch(asin, env_name="webshop").ok


def test_runtime_noop_patches_are_rejected():
    never = patch_of(code_hook("make_pre_hint",
                               "def hook(ctx, nb):\n    if ctx.turn > 99:\n"
                               "        return {'message': 'late'}\n    return None\n"))
    contexts = [{"hook": "make_pre_hint", "ctx": {"turn": t}, "episode": "e"} for t in range(3)]
    res = validate_patch(never, env_name="dbbench", dry_run_contexts=contexts)
    assert not res.ok and "runtime no-op" in res.errors[0]
    fires = patch_of(code_hook("make_pre_hint",
                               "def hook(ctx, nb):\n    if ctx.turn == 2:\n"
                               "        return {'message': 'last turn'}\n"))
    assert validate_patch(fires, env_name="dbbench", dry_run_contexts=contexts).ok


LINT_CASES = [
    ("def hook(ctx):\n    return {}\n", "signature"),
    ("def hook(ctx, nb):\n    return {}\ndef hook(ctx, nb):\n    return {}\n", "exactly one"),
    ("def f(x):\n    return x\n" * 6 + "def hook(ctx, nb):\n    return {}\n", "at most 5"),
    ("def hook(ctx, nb):\n    def inner():\n        return 1\n    return {}\n", "nested"),
    ("def hook(ctx, nb):\n    while True:\n        pass\n", "'while'"),
    ("def hook(ctx, nb):\n    return (lambda: 1)()\n", "'lambda'"),
    ("def hook(ctx, nb):\n    try:\n        x = 1\n    except ValueError:\n        x = 2\n",
     "except Exception"),
    ("def hook(ctx, nb):\n    try:\n        x = 1\n    finally:\n        x = 2\n", "finally"),
    ("def hook(ctx, nb):\n    return ctx.__class__\n", "attributes may not start"),
    ("def hook(ctx, nb):\n    return getattr(ctx, 'x')\n", "'getattr'"),
    ("def hook(ctx, nb):\n    return '{0.x}'.format(ctx)\n", "'.format'"),
    ("def hook(ctx, nb):\n    return re.enum\n", "'.enum'"),
    ("def hook(ctx, nb):\n    return '__class__'\n", "may not contain '__'"),
    ("def hook(ctx, nb):\n    return 'x' * 1\n" + "#" * 8001, "limit is 8000"),
    ("def hook(ctx, nb):\n    return '" + "a" * 701 + "'\n", "limit is 700"),
    ("@dec\ndef hook(ctx, nb):\n    return {}\n", "decorators"),
    ("def hook(ctx, nb) -> dict:\n    return {}\n", "annotations"),
    ("def hook(ctx, nb):\n    return {'message': ascii(divmod(7, 2))}\n", "'divmod' is not in"),
    ("def f(x, memo={}):\n    return memo\ndef hook(ctx, nb):\n    return f(1)\n",
     "default arguments must be constants"),
    ("def hook(ctx, nb):\n    return [" + "1," * 1300 + "]\n", "AST nodes"),
]


@pytest.mark.parametrize("src,fragment", LINT_CASES, ids=[c[1] for c in LINT_CASES])
def test_lint_rules(src, fragment):
    errs = lint_hook_source(src)
    assert any(fragment in e for e in errs), errs


def test_lint_accepts_good_hook_and_run_hook_runs_it():
    assert lint_hook_source(GOOD_HOOK) == []
    nb = {}
    ctx = {"action": {"text": "DROP TABLE users"}}
    out = run_hook(GOOD_HOOK, ctx, nb, timeout_s=1.0)
    assert out == {"kind": "block_and_prompt", "message": "Dropping tables is not allowed."}
    assert nb == {"n": 1}
    assert run_hook(GOOD_HOOK, {"action": {"text": "SELECT 1"}}, nb) is None  # returned None
    assert nb["n"] == 2 and nb["last"] == "SELECT 1"
    assert run_hook("import os\ndef hook(ctx, nb):\n    return {}\n", {}, {}) is None  # lint
    assert run_hook("def hook(ctx, nb):\n    return [1]\n", {}, {}) is None  # not a dict


def test_return_contracts():
    long = "word " * 400
    assert normalise_hook_result("on_init", {"skills": ["a", "", 3, "b\n\nc"] + ["s"] * 9,
                                             "tool_hint": "t", "extra": 1}) == {
        "skills": ["a", "b c", "s", "s", "s"], "tool_hint": "t"}
    assert len(normalise_hook_result("make_pre_hint", {"message": long})["message"]) == 900
    assert normalise_hook_result("make_pre_hint", {"msg": "x"}) is None
    assert normalise_hook_result("on_before_action", {"kind": "force_action"}) is None
    assert normalise_hook_result("on_before_action", {"kind": "block_and_prompt"}) is None
    assert normalise_hook_result("on_before_action", {
        "kind": "rewrite_action", "action": {"name": "execute_sql", "arguments": {"query": "q"}},
        "junk": 1}) == {"kind": "rewrite_action", "message": "",
                        "action": {"name": "execute_sql", "arguments": {"query": "q"}}}
    assert normalise_hook_result("on_post_step", {"kind": "rewrite_action", "action": "x"}) is None
    assert normalise_hook_result("on_post_step", {"kind": "inject_hint", "message": "m"}) == {
        "kind": "inject_hint", "message": "m"}
    with pytest.raises(ValueError, match="unknown hook"):
        normalise_hook_result("on_exit", {})


def test_condition_interpreter():
    preds = predicates_for("dbbench")
    view = {"action": {"name": "execute_sql", "arguments": {"query": "DELETE FROM t"}},
            "state": {"turn": 3, "repeat_count": 2}, "task": {"category": "SELECT"},
            "obs": {"text": "ERROR 1064: syntax"}}
    assert eval_condition({"all": [{"gte": ["state.turn", 3]}, {"pred": "sql_mutation"},
                                   {"pred": "action_repeated"}]}, view, preds)
    assert eval_condition({"any": [{"lt": ["state.turn", 1]},
                                   {"contains": ["obs.text", "error"]}]}, view, preds)
    assert not eval_condition({"not": {"startswith": ["task.category", "sel"]}}, view, preds)
    assert not eval_condition({"gt": ["state.missing", 0]}, view, preds)
