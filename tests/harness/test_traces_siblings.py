"""Episode traces as text (sanitised, with runtime signals; the Harness-R1 packets built on them
are tested in tests/harness_r1) and Harness-S sibling pools."""
import asyncio

import pytest

from harness_jax.envs.base import Task
from harness_jax.sampling import chat
from harness_jax.harness.executor import ExecutorConfig, run_episodes
from harness_jax.harness.traces import render_trace, render_transcript, sanitize
from harness_jax.harness.siblings import Sibling, load_pool, save_pool
from harness_jax.harness.specs import ExecutionRules, HarnessSpec
from harness_jax.harness.validation import validate_patch

from .doubles import ScriptedEngine, ScriptedEnv


@pytest.fixture(scope="module")
def trajs(qwen_tok):
    tasks = [Task("toy", {"q": f"q{i}"}) for i in range(3)]
    replies = []
    for i in range(3):
        replies += [chat.render_tool_call("lookup", {"key": "/home/u/data B07XJ8C8F5"}),
                    chat.render_tool_call("lookup", {"key": "/home/u/data B07XJ8C8F5"}),
                    chat.render_tool_call("submit", {"answer": "42" if i == 0 else "7"})]
    eng = ScriptedEngine(qwen_tok, replies)
    return asyncio.run(run_episodes(eng, lambda: ScriptedEnv("function"), tasks,
                                    HarnessSpec(rules=ExecutionRules(max_turns=3)),
                                    tokenizer=qwen_tok, config=ExecutorConfig(concurrency=1)))


def test_traces_are_sanitised_with_signals(trajs):
    assert [t.success for t in trajs] == [True, False, False]
    text = render_trace(trajs[1], 1, first_user="Question in /root/runs/x")
    assert "B07XJ8C8F5" not in text and "/home/u" not in text and "/root" not in text
    assert "[PRODUCT_ID]" in text and "[PATH]" in text
    assert "ASSISTANT_TOOL: submit" in text and "OBSERVATION: fact[" in text
    assert "repeated_actions=1" in text and "tool:lookup=2" in text
    assert text.startswith("### Trace 1\n- final_reward: 0.000")
    assert render_trace(trajs[1], 1) == render_trace(trajs[1], 1)
    assert "\n".join(render_transcript(trajs[1])) in text
    assert sanitize("/tmp/a/b and /tmpfile") == "[PATH] and /tmpfile"


def test_sibling_pool_roundtrip(tmp_path):
    h0 = HarnessSpec(name="H0")
    patch = validate_patch({"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench",
                            "description": "recover from SQL errors",
                            "actions": [{"type": "add_recovery_rule", "id": "err",
                                         "when": {"pred": "observation_has_error"},
                                         "effect": "inject_hint",
                                         "message": "Read the error and fix the query."}]},
                           env_name="dbbench").patch
    base = Sibling(h0, name="base")
    s1 = Sibling(h0.child(name="schema_first", system_prompt="Inspect the schema first."),
                 name="schema_first")
    s2 = Sibling(h0, patch, name="recover")
    assert len({base.sibling_id, s1.sibling_id, s2.sibling_id}) == 3
    path = str(tmp_path / "pool.json")
    save_pool([base, s1, s2], path)
    pool = load_pool(path, env_name="dbbench")
    assert [s.sibling_id for s in pool] == [base.sibling_id, s1.sibling_id, s2.sibling_id]
    assert any("overlay" in x and "add_recovery_rule" in x for x in pool[2].describe_changes(base))
    assert pool[1].describe_changes(base)[0].startswith("system_prompt")
    save_pool([base, base], path)
    with pytest.raises(ValueError, match="duplicate"):
        load_pool(path)
