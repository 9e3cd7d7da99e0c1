"""Editors: every deterministic operator yields a valid, different child; the LLM editor's answers
are applied, validated, repaired once or rejected (scripted OpenAI-compatible server over real
HTTP, a test double)."""
import json

import pytest

from harness_jax import harness_s
from harness_jax.harness.presets import base_harness
from harness_jax.harness.siblings import Sibling
from harness_jax.harness.validation import validate_patch
from harness_jax.harness_s.editors import (OPERATORS, EditContext, NotApplicable,
                                           apply_spec_changes)
from harness_jax.harness_s.llm import make_client
from harness_jax.harness_s.rootcause import Direction

from .doubles import first_user


def _h0(protocol="text"):
    return Sibling(base_harness("dbbench", protocol), name="H0")


def _dir(name, n=3):
    return Direction(name, n, [f"e{i}" for i in range(n)], ["t1"], [])


@pytest.mark.parametrize("protocol", ["text", "function"])
@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_every_operator_makes_a_valid_distinct_child(op, protocol):
    h0 = _h0(protocol)
    child = OPERATORS[op].apply(h0, EditContext("dbbench", protocol))
    assert child.sibling_id != h0.sibling_id and child.name == f"H0+{op}"
    assert child.spec.parent_id == h0.spec.harness_id
    if child.patch is not None:                     # overlays re-validate from their dict form
        assert validate_patch(child.patch.to_dict(), env_name="dbbench").ok
    assert Sibling.from_dict(child.to_dict(), "dbbench").sibling_id == child.sibling_id
    assert child.describe_changes(h0)


def test_operators_compose_and_refuse_to_reapply():
    ctx = EditContext("dbbench", "text")
    a = OPERATORS["error_recovery_hint"].apply(_h0(), ctx)
    b = OPERATORS["block_answer_after_error"].apply(a, ctx)
    assert [x["type"] for x in b.patch.actions] == ["add_recovery_rule", "add_code_hook"]
    assert b.patch.description == "recover from errors; no answer right after an error"
    for op, parent in (("error_recovery_hint", a), ("block_answer_after_error", b),
                       ("answer_format_normaliser", b)):
        with pytest.raises(NotApplicable):
            OPERATORS[op].apply(parent, ctx)
    with pytest.raises(NotApplicable, match="no worked example"):
        OPERATORS["worked_example"].apply(Sibling(base_harness("toy"), name="H0"),
                                          EditContext("toy", "text"))


def test_deterministic_editor_maps_directions_to_operators():
    ed = harness_s.make_editor("deterministic")
    ctx = EditContext("dbbench", "text")
    outs = ed.propose(_h0(), _dir("tool_error:unknown_column"), n=5, context=ctx)
    assert [o.editor for o in outs] == ["deterministic:schema_preview",
                                        "deterministic:error_recovery_hint"]
    assert all(o.ok and o.direction == "tool_error:unknown_column" for o in outs)
    assert len(ed.propose(_h0(), _dir("answered_after_error"), n=1, context=ctx)) == 1
    assert ed.propose(_h0(), _dir("some_novel_cause"), n=2, context=ctx) == []
    only = harness_s.make_editor("deterministic", operators=["inspect_before_answer"])
    outs = only.propose(_h0(), _dir("answered_without_inspecting"), n=3, context=ctx)
    assert [o.editor for o in outs] == ["deterministic:inspect_before_answer"]
    with pytest.raises(ValueError, match="unknown edit operator"):
        harness_s.make_editor("deterministic", operators=["nope"])
    with pytest.raises(ValueError, match="unknown editor"):
        harness_s.make_editor("genetic")
    with pytest.raises(ValueError, match="needs an OpenAI-compatible client"):
        harness_s.make_editor("llm")


def test_spec_changes_name_the_bad_path():
    spec = _h0().spec
    c = apply_spec_changes(spec, {"rules.max_turns": 30, "system_prompt": "Be careful."}, "c")
    assert c.rules.max_turns == 30 and c.system_prompt == "Be careful." and c.name == "c"
    with pytest.raises(ValueError, match="spec_changes.tools: not editable"):
        apply_spec_changes(spec, {"tools": []}, "c")
    with pytest.raises(ValueError, match="rules.max_turns"):
        apply_spec_changes(spec, {"rules.max_turns": 0}, "c")


GOOD_OVERLAY = {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench",
                "description": "inspect first",
                "actions": [{"type": "add_or_edit_skill", "id": "inspect",
                             "text": "Look at the table before answering."}]}


def _editor(chat_server, tmp_path, **kw):
    return harness_s.make_editor("llm", client=make_client(
        chat_server.url, "editor-model", cache_dir=str(tmp_path / "c")), **kw)


def test_llm_editor_proposes_validated_children(chat_server, tmp_path):
    chat_server.handler = lambda body: json.dumps({
        "rationale": "the agent answers too early",
        "spec_changes": {"system_prompt": f"Inspect first (variant {body['seed']})."},
        "overlay": GOOD_OVERLAY})
    ed = _editor(chat_server, tmp_path, seed=10)
    ctx = EditContext("dbbench", "text", excerpts=("### Trace 1\nASSISTANT: ...",), seed=2)
    outs = ed.propose(_h0(), _dir("answered_without_inspecting"), n=2, context=ctx)
    assert [o.ok for o in outs] == [True, True] and outs[0].editor == "llm:editor-model"
    assert outs[0].child.sibling_id != outs[1].child.sibling_id     # seeds 12 and 13
    assert outs[0].child.spec.system_prompt == "Inspect first (variant 12)."
    assert outs[0].child.patch.actions[0]["id"] == "inspect"
    prompt = first_user(chat_server.requests[0])
    assert "Direction: answered_without_inspecting" in prompt and "### Trace 1" in prompt
    assert '"preamble"' in prompt and "tools" not in json.loads(
        prompt.split("Parent spec:\n", 1)[1].split("\n\nParent overlay", 1)[0])


def test_llm_editor_repairs_once_or_rejects(chat_server, tmp_path):
    bad_overlay = dict(GOOD_OVERLAY, actions=[{"type": "add_code_hook", "hook": "on_init",
                                               "code": "import os\ndef hook(ctx, nb):\n    return None"}])
    script = iter([json.dumps({"rationale": "x", "overlay": bad_overlay}),
                   json.dumps({"rationale": "x", "overlay": GOOD_OVERLAY}),       # repaired
                   json.dumps({"rationale": "x", "spec_changes": {}}),             # no-op
                   json.dumps({"rationale": "x", "spec_changes": {"tools": None}})])  # still bad
    chat_server.handler = lambda body: next(script)
    ed = _editor(chat_server, tmp_path)
    ctx = EditContext("dbbench", "text")
    first = ed.propose(_h0(), _dir("answered_without_inspecting"), n=1, context=ctx)[0]
    assert first.ok and first.notes == "repaired"
    repair = chat_server.requests[1]["messages"][-1]["content"]
    assert "overlay: " in repair and "import" in repair
    ctx2 = EditContext("dbbench", "text", seed=5)
    second = ed.propose(_h0(), _dir("answered_without_inspecting"), n=1, context=ctx2)[0]
    assert not second.ok and second.child is None
    assert "not editable" in second.errors[0]
    assert "changes nothing" in chat_server.requests[3]["messages"][-1]["content"]


def test_auto_editor_uses_the_llm_only_for_what_operators_miss(chat_server, tmp_path):
    chat_server.handler = lambda body: json.dumps({"rationale": "x", "overlay": GOOD_OVERLAY})
    client = make_client(chat_server.url, "m")
    ed = harness_s.make_editor("auto", client=client)
    ctx = EditContext("dbbench", "text")
    outs = ed.propose(_h0(), _dir("answered_without_inspecting"), n=2, context=ctx)
    assert all(o.editor.startswith("deterministic:") for o in outs) and not chat_server.requests
    outs = ed.propose(_h0(), _dir("misread_question"), n=1, context=ctx)
    assert [o.editor for o in outs] == ["llm:m"] and outs[0].ok


def test_code_hook_operators_run_in_the_sandbox():
    from harness_jax.harness import run_hook
    from harness_jax.harness_s.editors import (ANSWER_FROM_RESULT_HOOK, BLOCK_AFTER_ERROR_HOOK,
                                               NORMALISE_ANSWER_HOOK, SCHEMA_PREVIEW_HOOK)

    def act(text="", name=None, args=None):
        return {"action": {"text": text, "name": name, "arguments": args or {}}}

    out = run_hook(NORMALISE_ANSWER_HOOK, act("Action: Answer\nFinal Answer: 42."), {},
                   hook="on_before_action")
    assert out == {"kind": "rewrite_action", "message": "",
                   "action": 'Action: Answer\nFinal Answer: ["42"]'}
    out = run_hook(NORMALISE_ANSWER_HOOK, act(name="commit_final_answer",
                                              args={"answers": [" 42. ", "'x'"]}), {},
                   hook="on_before_action")
    assert out["action"] == {"name": "commit_final_answer", "arguments": {"answers": ["42", "x"]}}
    assert run_hook(NORMALISE_ANSWER_HOOK, act('Final Answer: ["42"]'), {},
                    hook="on_before_action") is None
    ctx = dict(act("Action: Answer\nFinal Answer: [\"0\"]"),
               history=[{"observation": "no such column: x"}])
    assert run_hook(BLOCK_AFTER_ERROR_HOOK, ctx, {}, hook="on_before_action")["kind"] == \
        "block_and_prompt"
    ctx["history"] = [{"observation": "[(3,)]"}]
    assert run_hook(BLOCK_AFTER_ERROR_HOOK, ctx, {}, hook="on_before_action") is None
    # answer_from_result: an answer after a result row is rewritten to the row's values
    ctx["history"] = [{"observation": "[('Ann Lee',), ('250',)]"}]
    assert run_hook(ANSWER_FROM_RESULT_HOOK, ctx, {}, hook="on_before_action")["action"] == \
        'Action: Answer\nFinal Answer: ["Ann Lee", "250"]'
    fc = dict(act(name="commit_final_answer", args={"answers": ["0"]}), history=ctx["history"])
    assert run_hook(ANSWER_FROM_RESULT_HOOK, fc, {}, hook="on_before_action")["action"] == {
        "name": "commit_final_answer", "arguments": {"answers": ["Ann Lee", "250"]}}
    for hist in ([{"observation": "[]"}], [{"observation": "no such column: x"}], []):
        assert run_hook(ANSWER_FROM_RESULT_HOOK, dict(ctx, history=hist), {},
                        hook="on_before_action") is None
    assert run_hook(ANSWER_FROM_RESULT_HOOK, dict(act("Action: Operation\nSELECT 1"),
                                                  history=ctx["history"]), {},
                    hook="on_before_action") is None
    task = {"instruction": "How many?\nThe name of this table is Stratus inventory, and the "
                           "headers of this table are A,B."}
    out = run_hook(SCHEMA_PREVIEW_HOOK, {"turn": 0, "task": task}, {}, hook="make_pre_hint")
    assert "SELECT * FROM `Stratus inventory` LIMIT 5" in out["message"]
    assert run_hook(SCHEMA_PREVIEW_HOOK, {"turn": 1, "task": task}, {},
                    hook="make_pre_hint") is None
