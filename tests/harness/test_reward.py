"""Harness-R1 patch reward: one baseline type from the unpatched run, paired (seeded) reruns, zero
for invalid / no-op / incomplete evaluations, content-addressed cache (scripted target engines
and environment as test doubles: the reward logic needs exact control of the target's replies)."""
import asyncio
import json
import zlib

import pytest

from harness_jax.envs.base import Task
from harness_jax.harness.executor import Executor, ExecutorConfig
from harness_jax.harness.packets import Baseline, baseline_rewards
from harness_jax.harness.reward import RewardCache, delta_reward, evaluate_patch
from harness_jax.harness.specs import ExecutionRules, HarnessSpec
from harness_jax.sampling.types import FINISH_STOP, GenerateResult, RolloutEngine

from .doubles import ScriptedEngine, ScriptedEnv

TASKS = [Task("toy", {"q": f"q{i}"}) for i in range(4)]
H = HarnessSpec(rules=ExecutionRules(max_turns=1))
# the frozen target always answers 41; a guard that rewrites 41 -> 42 fixes every task
FIX = {"schema_version": "harness-r1-patch-v1", "benchmark": "toy", "actions": [
    {"type": "add_code_hook", "hook": "on_before_action", "code":
        "def hook(ctx, nb):\n    if ctx.action.text == 'ANSWER: 41':\n"
        "        return {'kind': 'rewrite_action', 'action': 'ANSWER: 42'}\n"}]}
# valid, but its condition never holds: it never fires
NEVER = {"schema_version": "harness-r1-patch-v1", "benchmark": "toy", "actions": [
    {"type": "add_guard_rule", "id": "never", "when": {"startswith": ["action.text", "SELECT"]},
     "effect": "block_and_prompt", "message": "Think first."}]}
# fires on every action but hands the same action on: it changes nothing
SAME = {"schema_version": "harness-r1-patch-v1", "benchmark": "toy", "actions": [
    {"type": "add_code_hook", "hook": "on_before_action", "code":
        "def hook(ctx, nb):\n    return {'kind': 'rewrite_action', 'action': ctx.action.text}\n"}]}


class CoinEngine(RolloutEngine):
    """A sampling target (test double): the reply is decided by the request's sampling seed
    (even: the right answer, odd: a wrong one), as a sampled policy's would be by its noise."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    @property
    def weight_version(self):
        return 0

    async def generate(self, request):
        seed = request.params.seed
        assert seed is not None, "the reward reruns must be seeded"
        text = "ANSWER: 42" if zlib.crc32(str(seed).encode()) % 2 == 0 else "ANSWER: 41"
        ids = self.tok.encode(text, add_special_tokens=False) + [self.im_end]
        return GenerateResult(request.request_id, ids, [-0.1] * len(ids), FINISH_STOP, 0)


def run(coro):
    return asyncio.run(coro)


def baseline_run(tok, engine, n=1, seed=None):
    ex = Executor(engine, lambda: ScriptedEnv("text"), H, tokenizer=tok,
                  config=ExecutorConfig(seed=seed))
    return run(ex.run_episodes(TASKS, n_per_task=n))


def evaluate(tok, patch, baseline, engine=None, **kw):
    engine = engine or ScriptedEngine(tok, ["ANSWER: 41"] * 20)
    return run(evaluate_patch(patch, env_name="toy", engine=engine,
                              env_factory=lambda: ScriptedEnv("text"), tasks=TASKS, harness=H,
                              baseline=baseline, tokenizer=tok, **kw))


def fixed_baseline(solved_first=True):
    """R^0 as the deterministic target's run gives it (one episode per task)."""
    rewards = {t.task_id: {f"{t.task_id}#0": 0.0} for t in TASKS}
    if solved_first:
        rewards[TASKS[0].task_id][f"{TASKS[0].task_id}#0"] = 1.0
    return Baseline(rewards)


def test_baseline_rewards_is_what_evaluate_patch_takes(qwen_tok):
    trajs = baseline_run(qwen_tok, ScriptedEngine(qwen_tok, ["ANSWER: 41"] * 8), n=2)
    base = baseline_rewards(trajs)
    assert isinstance(base, Baseline) and base.seed is None
    assert base.rewards == {t.task_id: {f"{t.task_id}#0": 0.0, f"{t.task_id}#1": 0.0}
                            for t in TASKS}
    assert Baseline.from_dict(json.loads(json.dumps(base.to_dict()))) == base
    ev = evaluate(qwen_tok, FIX, base)
    assert ev.valid and ev.complete and ev.reward == pytest.approx(1.0)
    with pytest.raises(TypeError, match="packets.Baseline"):
        evaluate(qwen_tok, FIX, {t.task_id: 0.0 for t in TASKS})
    with pytest.raises(ValueError, match="baseline has no reward"):
        evaluate(qwen_tok, FIX, Baseline({TASKS[0].task_id: {"k": 0.0}}))
    with pytest.raises(ValueError, match="seed"):
        evaluate(qwen_tok, FIX, base, config=ExecutorConfig(seed=1))


def test_reruns_are_paired_with_the_baseline_under_a_sampling_target(qwen_tok):
    coin = CoinEngine(qwen_tok)
    base = baseline_rewards(baseline_run(qwen_tok, coin, n=2, seed=7))
    assert base.seed == 7 and 0 < sum(sum(r.values()) for r in base.rewards.values()) < 8
    cfg = ExecutorConfig(seed=7)
    # a patch that fires but changes nothing replays every baseline episode exactly
    same = evaluate(qwen_tok, SAME, base, engine=coin, config=cfg)
    assert same.valid and same.complete and not same.noop
    assert same.delta == 0.0 and same.reward == 0.0 and same.patched == same.baseline
    # the fix turns exactly the baseline's failures into successes
    fix = evaluate(qwen_tok, FIX, base, engine=coin, config=cfg)
    failures = sum(1 - r for per in base.rewards.values() for r in per.values())
    assert fix.reward == pytest.approx(failures / 8) and set(fix.patched.values()) == {1.0}


def test_no_op_patches_earn_zero_without_recorded_contexts(qwen_tok):
    coin = CoinEngine(qwen_tok)
    base = baseline_rewards(baseline_run(qwen_tok, coin, n=2, seed=3))
    ev = evaluate(qwen_tok, NEVER, base, engine=coin, config=ExecutorConfig(seed=3))
    assert ev.valid and ev.complete and ev.noop and ev.reward == 0.0
    assert "runtime no-op" in ev.errors[-1]


def test_valid_patch_gets_paired_delta_and_is_cached(qwen_tok, tmp_path):
    cache = RewardCache(str(tmp_path / "cache"))
    text = "<think>rewrite off-by-one answers</think><patch>" + json.dumps(FIX) + "</patch>"
    base = fixed_baseline()
    ev = evaluate(qwen_tok, text, base, cache=cache, reward_context={"target": "scripted-v1"})
    assert ev.valid and ev.complete and not ev.cached
    assert ev.reward == pytest.approx((4 * 1.0 - 1.0) / 4)
    assert set(ev.patched.values()) == {1.0}
    # an identical candidate is not re-evaluated; another reward context or another baseline
    # is a different key
    eng = ScriptedEngine(qwen_tok, [])
    again = evaluate(qwen_tok, FIX, base, engine=eng, cache=cache,
                     reward_context={"target": "scripted-v1"})
    assert again.cached and again.reward == ev.reward and eng.requests == []
    assert not evaluate(qwen_tok, FIX, base, cache=cache,
                        reward_context={"target": "scripted-v2"}).cached
    other = evaluate(qwen_tok, FIX, fixed_baseline(False), cache=cache,
                     reward_context={"target": "scripted-v1"})
    assert not other.cached and other.reward == pytest.approx(1.0)


def test_invalid_and_incomplete_evaluations_earn_zero(qwen_tok):
    base = fixed_baseline()
    ev = evaluate(qwen_tok, "I think the agent should try harder.", base)
    assert ev.reward == 0.0 and not ev.valid and "no <patch>" in ev.errors[0]
    broken = ScriptedEngine(qwen_tok, [], fail_times=100)
    ev = evaluate(qwen_tok, FIX, base, engine=broken, eval_attempts=2,
                  config=ExecutorConfig(infra_retries=0))
    assert ev.valid and not ev.complete and ev.reward == 0.0
    assert "incomplete evaluation" in ev.errors[-1] and not ev.noop
    # a patch whose reward would be negative keeps its (negative) delta
    hurt = {**FIX, "actions": [{"type": "add_code_hook", "hook": "on_before_action", "code":
        "def hook(ctx, nb):\n    return {'kind': 'rewrite_action', 'action': 'ANSWER: 0'}\n"}]}
    assert evaluate(qwen_tok, hurt, base).reward == pytest.approx(-0.25)


def test_delta_reward():
    base = Baseline({"a": {"k0": 0.0, "k1": 1.0}, "b": {"k0": 1.0}})
    assert delta_reward(base, {"a": {"k0": 1.0, "k1": 1.0}, "b": {"k0": 1.0}}) == (0.25, True)
    assert delta_reward(base, {"a": {"k0": 1.0}, "b": {"k0": 1.0}}) == (0.0, False)
    with pytest.raises(ValueError, match="empty baseline"):
        delta_reward(Baseline({}), {})
    with pytest.raises(ValueError, match="non-empty"):
        Baseline({"a": {}})
