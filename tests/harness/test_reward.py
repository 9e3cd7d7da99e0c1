"""Harness-R1 patch reward: paired delta, zero for invalid/incomplete, content-addressed cache
(scripted target engine and environment as test doubles)."""
import asyncio
import json

import pytest

from harness_jax.envs.base import Task
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.reward import RewardCache, delta_reward, evaluate_patch
from harness_jax.harness.specs import ExecutionRules, HarnessSpec

from .doubles import ScriptedEngine, ScriptedEnv

TASKS = [Task("toy", {"q": f"q{i}"}) for i in range(4)]
H = HarnessSpec(rules=ExecutionRules(max_turns=1))
# the frozen target always answers 41; a guard that rewrites 41 -> 42 fixes every task
FIX = {"schema_version": "harness-r1-patch-v1", "benchmark": "toy", "actions": [
    {"type": "add_code_hook", "hook": "on_before_action", "code":
        "def hook(ctx, nb):\n    if ctx.action.text == 'ANSWER: 41':\n"
        "        return {'kind': 'rewrite_action', 'action': 'ANSWER: 42'}\n"}]}


def evaluate(tok, patch, engine=None, **kw):
    engine = engine or ScriptedEngine(tok, ["ANSWER: 41"] * 20)
    baseline = {t.task_id: 0.0 for t in TASKS}
    baseline[TASKS[0].task_id] = 1.0  # pretend one task was solved in the baseline run
    return asyncio.run(evaluate_patch(patch, env_name="toy", engine=engine,
                                      env_factory=lambda: ScriptedEnv("text"), tasks=TASKS,
                                      harness=H, baseline=baseline, tokenizer=tok, **kw))


def test_delta_reward():
    assert delta_reward({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 1.0}) == (0.5, True)
    assert delta_reward({"a": 0.0}, {"a": None}) == (0.0, False)
    with pytest.raises(ValueError, match="empty baseline"):
        delta_reward({}, {})


def test_valid_patch_gets_paired_delta_and_is_cached(qwen_tok, tmp_path):
    cache = RewardCache(str(tmp_path / "cache"))
    text = "<think>rewrite off-by-one answers</think><patch>" + json.dumps(FIX) + "</patch>"
    ev = evaluate(qwen_tok, text, cache=cache, reward_context={"target": "scripted-v1"})
    assert ev.valid and ev.complete and not ev.cached
    assert ev.reward == pytest.approx((4 * 1.0 - 1.0) / 4)
    assert set(ev.patched.values()) == {1.0}
    # an identical candidate is not re-evaluated; another reward context is a different key
    eng = ScriptedEngine(qwen_tok, [])
    again = evaluate(qwen_tok, FIX, engine=eng, cache=cache,
                     reward_context={"target": "scripted-v1"})
    assert again.cached and again.reward == ev.reward and eng.requests == []
    other = evaluate(qwen_tok, FIX, cache=cache, reward_context={"target": "scripted-v2"})
    assert not other.cached


def test_invalid_and_incomplete_evaluations_earn_zero(qwen_tok):
    ev = evaluate(qwen_tok, "I think the agent should try harder.")
    assert ev.reward == 0.0 and not ev.valid and "no <patch>" in ev.errors[0]
    broken = ScriptedEngine(qwen_tok, [], fail_times=100)
    ev = evaluate(qwen_tok, FIX, engine=broken, eval_attempts=2,
                  config=ExecutorConfig(infra_retries=0))
    assert ev.valid and not ev.complete and ev.reward == 0.0
    assert "incomplete evaluation" in ev.errors[-1]
    # a patch whose reward would be negative keeps its (negative) delta
    hurt = {**FIX, "actions": [{"type": "add_code_hook", "hook": "on_before_action", "code":
        "def hook(ctx, nb):\n    return {'kind': 'rewrite_action', 'action': 'ANSWER: 0'}\n"}]}
    assert evaluate(qwen_tok, hurt).reward == pytest.approx(-0.25)
    with pytest.raises(ValueError, match="baseline has no reward"):
        asyncio.run(evaluate_patch(FIX, env_name="toy", engine=broken,
                                   env_factory=lambda: ScriptedEnv("text"), tasks=TASKS,
                                   harness=H, baseline={}, tokenizer=qwen_tok))
