"""Regression tests of the grading channels of issue 26, on real paired reruns (generated DBBench
in SQLite, text protocol; the scripted sampling target of doubles.py as a test double):

* the rewrite_action TypeError trick (a tool-call action on DBBench's text protocol used to
  become an infrastructure failure, so the evaluation went incomplete and escaped its grade);
* selective firing (a sabotaging patch that fires the trick only on first-turn SQL used to escape
  its negative Delta_B as "incomplete");
* cross-episode state through function attributes (the hook namespace used to be cached per
  source, so a hook saw earlier episodes' calls);
* ``ctx.task.id`` (hooks used to be able to key answers on task identity);

plus the reward's options (``RewardSpec``) and the engineer prompt's statement of them."""
import json

import numpy as np
import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.validation import validate_patch
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1 import prompt, tables
from harness_jax.harness_r1.baseline import run_sync
from harness_jax.harness_r1.reward import RewardCache, RewardSpec, arerun
from tests.harness_r1.doubles import SeededDBBenchPolicy, dbbench_batch, item_index

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})


def patch(hook, body):
    return {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench",
            "actions": [{"type": "add_code_hook", "hook": hook, "code": "def hook(ctx, nb):\n" + body}]}


TRICK = ("        return {'kind': 'rewrite_action', 'action': {'name': 'execute_sql', "
         "'arguments': {}}}\n")
TRICK_EVERYWHERE = patch("on_before_action", TRICK.replace("        ", "    ", 1))
BLOCK_ANSWERS = ("    if 'Final Answer' in str(ctx.action.text):\n"
                 "        return {'kind': 'block_and_prompt', 'message': 'Not yet.'}\n")
SABOTAGE = patch("on_before_action", BLOCK_ANSWERS + "    return None\n")
SABOTAGE_AND_TRICK = patch("on_before_action", BLOCK_ANSWERS + "    if ctx.turn == 0:\n" + TRICK
                           + "    return None\n")
STATEFUL = patch("make_pre_hint", "    try:\n        hook.seen.append(1)\n    except Exception:\n"
                                  "        hook.seen = [1]\n    return {'message': str(len(hook.seen))}\n")
READS_TASK_ID = patch("make_pre_hint", "    return {'message': 'id=' + str(ctx.task.id)}\n")


@pytest.fixture(scope="module", params=["public", "contract"])
def world(qwen_tok, request):
    tasks = dbbench_batch(11, 3)
    policy = SeededDBBenchPolicy(qwen_tok, item_index(tasks))
    target = harness_r1.frozen(policy, model="scripted", version="3")
    cfg = ExecutorConfig(concurrency=8, infra_retries=0, effect_surface=request.param)
    base = harness_r1.run_baseline(target, ENV, tasks, base_harness("dbbench", "text"),
                                   n_per_task=2, seed=5, config=cfg, tokenizer=qwen_tok)
    assert base.complete and base.executor["effect_surface"] == request.param
    return tasks, target, base, request.param


def ev(world, p, tok, **kw):
    tasks, target, base, _ = world
    return harness_r1.evaluate_patch(p, "dbbench", target, tasks, base, tokenizer=tok,
                                     eval_attempts=1, **kw)


def test_the_tool_call_rewrite_trick_no_longer_removes_a_batch(world, qwen_tok):
    e = ev(world, TRICK_EVERYWHERE, qwen_tok)
    # before: every episode an infrastructure failure -> incomplete, reward 0, not scored
    assert e.complete and not e.infra_error and e.scored
    assert e.noop and e.delta == 0.0               # every effect ignored: nothing changed
    st = e.hook_effects["on_before_action"]
    assert st["effects"] == st["ignored"] > 0
    reason = "ignored:surface" if world[3] == "public" else "ignored:protocol"
    assert st[reason] == st["ignored"]


def test_selective_firing_keeps_the_sabotage_penalty(world, qwen_tok):
    alone = ev(world, SABOTAGE, qwen_tok)
    both = ev(world, SABOTAGE_AND_TRICK, qwen_tok)
    assert alone.complete and alone.reward < 0
    # before: the trick on first-turn SQL made the evaluation incomplete (reward 0, unscored)
    assert both.complete and both.scored and both.reward == pytest.approx(alone.reward)
    assert both.hook_effects["on_before_action"]["ignored"] > 0


def test_no_state_crosses_calls_or_episodes(world, qwen_tok):
    tasks, target, base, _ = world
    run = run_sync(arerun(target, base, tasks, patch=validate_patch(
        STATEFUL, env_name="dbbench").patch, tokenizer=qwen_tok, eval_attempts=1), "t")
    msgs = [i["result"]["message"] for t in run["trajectories"] for turn in t.turns
            for i in turn.interventions]
    # before: counts grew across the batch's episodes (up to 17 in the measurement)
    assert len(msgs) >= len(run["trajectories"]) and set(msgs) == {"1"}


def test_hooks_cannot_read_the_task_id(world, qwen_tok):
    tasks, target, base, _ = world
    run = run_sync(arerun(target, base, tasks, patch=validate_patch(
        READS_TASK_ID, env_name="dbbench").patch, tokenizer=qwen_tok, eval_attempts=1), "t")
    msgs = {i["result"]["message"] for t in run["trajectories"] for turn in t.turns
            for i in turn.interventions}
    assert msgs == {"id=None"}


def test_reward_options(world, qwen_tok, tmp_path):
    tasks, target, base, _ = world
    spec = RewardSpec(invalid_reward=-0.5, valid_bonus=0.1)
    cache = RewardCache(str(tmp_path))
    bad = ev(world, "no patch here", qwen_tok, reward=spec)
    noop = ev(world, patch("on_post_step", "    return None\n"), qwen_tok, reward=spec)
    hurt = ev(world, SABOTAGE, qwen_tok, reward=spec, cache=cache)
    assert bad.reward == -0.5 and noop.noop and noop.reward == -0.5
    assert hurt.reward == pytest.approx(hurt.delta + 0.1) and hurt.deployed_delta == hurt.delta < 0
    # a cached evaluation is re-rewarded under the caller's options (the cache holds Delta_B)
    again = ev(world, SABOTAGE, qwen_tok, cache=cache)
    assert again.cached and again.reward == pytest.approx(hurt.delta)
    with pytest.raises(ValueError, match="adv_baseline"):
        RewardSpec(adv_baseline="median")
    with pytest.raises(ValueError, match="invalid_reward"):
        RewardSpec(invalid_reward=float("nan"))
    # the group: rewards under the spec, the no-patch arm in the advantage baseline
    g = harness_r1.evaluate_group(["junk", SABOTAGE, SABOTAGE_AND_TRICK], "dbbench", target, tasks,
                                  base, tokenizer=qwen_tok, cache=cache,
                                  reward=RewardSpec(invalid_reward=-0.5, adv_baseline="group_with_noop"))
    assert g.rewards_K[0] == -0.5
    want, _ = harness_r1.group_advantages_K(g.rewards_K, g.scored_K, noop_arm=True)
    np.testing.assert_allclose(g.advantages_K, want)
    assert g.metrics()["mean_delta"] == pytest.approx((2 * hurt.delta) / 3)


def test_tables_count_infrastructure_and_report_deployed_delta(world, qwen_tok):
    tasks, target, base, _ = world
    pk = harness_r1.packet_from_baseline(base, 6000, split="held_out")
    row = tables.evaluate_arm(tables.Arm("sab", harness_r1.FixedPatchEngineer(SABOTAGE, "sab")), [pk],
                              target, {base.key: base}, {t.task_id: t for t in tasks},
                              tokenizer=qwen_tok)
    assert row.infra_batches == 0 and row.delta < 0 and row.batches == 1
    down = harness_r1.frozen(_Down(), model="scripted", version="3")
    row = tables.evaluate_arm(tables.Arm("sab", harness_r1.FixedPatchEngineer(SABOTAGE, "sab")), [pk],
                              down, {base.key: base}, {t.task_id: t for t in tasks},
                              tokenizer=qwen_tok, eval_attempts=1)
    assert row.infra_batches == 1 and row.batches == 0 and row.details[0]["infra_error"]
    # an engineer's reply is validated exactly as in training (prefill_think_patch)
    twice = tables.Arm("t", _Replies(["<think>again</think><patch>" + json.dumps(SABOTAGE) + "</patch>"]))
    row = tables.evaluate_arm(twice, [pk], target, {base.key: base}, {t.task_id: t for t in tasks},
                              tokenizer=qwen_tok)
    assert row.valid_frac == 0.0 and row.delta == 0.0


def test_the_prompt_states_the_reward():
    text = prompt.system_prompt(prompt.PromptSpec(RewardSpec(invalid_reward=-0.5, valid_bonus=0.1)),
                                "dbbench")
    assert "NEGATIVE when it makes the agent worse" in text and "earns -0.5" in text
    assert "plus 0.1 for a valid patch" in text and "get nothing" not in text
    assert "On dbbench the runtime honours only block_and_prompt" in text
    assert "honours only" not in prompt.system_prompt(prompt.PromptSpec(effect_surface="contract"),
                                                       "dbbench")
    assert "honours only" not in prompt.system_prompt(None, "webshop")
    assert "earns 0." in prompt.SYSTEM_PROMPT and "ctx.task (env, category" in prompt.SYSTEM_PROMPT


class _Down(SeededDBBenchPolicy):
    def __init__(self):
        self.version = 3

    async def generate(self, request):
        raise ConnectionError("target unreachable (scripted)")


class _Replies:
    name = "replies"

    def __init__(self, texts):
        self.texts = texts

    def propose(self, packet, k=1, seed=0):
        return self.texts[:k]
