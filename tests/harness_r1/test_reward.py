"""The engineer's reward on a real executor rerun (generated DBBench in SQLite, the scripted
sampling target of doubles.py as a test double): Delta_B by hand, zero for invalid / unparsable
/ incomplete / no-op patches, K-sample evaluation with duplicates evaluated once, the reward
cache, and the advantages against the learner's reference (rl.losses.group_advantages)."""
import json

import numpy as np
import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1.reward import RewardCache
from tests.harness_r1.doubles import SeededDBBenchPolicy, dbbench_batch, item_index

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
CFG = ExecutorConfig(concurrency=8, infra_retries=0)


def patch(hook, body, **extra):
    return {"schema_version": "harness-r1-patch-v1", "benchmark": "dbbench", **extra,
            "actions": [{"type": "add_code_hook", "hook": hook,
                         "code": "def hook(ctx, nb):\n" + body}]}


# blocks an answer given before anything was observed (fixes the hasty first turns)
GUARD = patch("on_before_action",
              "    if 'Final Answer' in str(ctx.action.text) and not ctx.history:\n"
              "        return {'kind': 'block_and_prompt', 'message': 'Look at the data first.'}\n"
              "    return None\n")
# the same guard, written differently (a different patch)
GUARD2 = patch("on_before_action",
               "    if not ctx.history and 'Final Answer' in str(ctx.action.text):\n"
               "        return {'kind': 'block_and_prompt', 'message': 'Query first.'}\n"
               "    return None\n")
# refuses every answer (hurts: nothing is ever answered)
SABOTAGE = patch("on_before_action",
                 "    if 'Final Answer' in str(ctx.action.text):\n"
                 "        return {'kind': 'block_and_prompt', 'message': 'Not yet.'}\n    return None\n")
NEVER = patch("on_post_step", "    return None\n")


@pytest.fixture(scope="module")
def world(qwen_tok):
    tasks = dbbench_batch(7, 3)
    policy = SeededDBBenchPolicy(qwen_tok, item_index(tasks))
    target = harness_r1.frozen(policy, model="scripted", version="3")
    base = harness_r1.run_baseline(target, ENV, tasks, base_harness("dbbench", "text"),
                                   n_per_task=2, seed=3, config=CFG, tokenizer=qwen_tok)
    assert base.complete and 0 < base.success_rate < 1
    return tasks, policy, target, base


def ev(world, p, **kw):
    tasks, _, target, base = world
    kw.setdefault("tokenizer", None)
    return harness_r1.evaluate_patch(p, "dbbench", target, tasks, base, **kw)


def test_delta_b_is_the_paired_mean_improvement(world, qwen_tok):
    tasks, _, target, base = world
    e = ev(world, "<think>hasty answers</think>\n<patch>" + json.dumps(GUARD) + "</patch>",
           tokenizer=qwen_tok)
    assert e.valid and e.complete and not e.noop and not e.cached
    by_hand = np.mean([e.patched[t.task_id] - base.mean(t.task_id) for t in tasks])
    assert e.reward == pytest.approx(by_hand) and e.reward > 0
    assert e.episodes == 2 * len(tasks) and e.hook_effects["on_before_action"]["effects"] > 0
    hurt = ev(world, SABOTAGE, tokenizer=qwen_tok)
    assert hurt.valid and hurt.complete and hurt.reward < 0      # a harmful patch keeps its loss
    assert hurt.reward == pytest.approx(-base.success_rate)


def test_invalid_unparsable_incomplete_and_noop_patches_earn_zero(world, qwen_tok):
    tasks, _, _, base = world
    cases = {
        "unparsable": "The agent should query first.",
        "bad json": "<patch>{not json}</patch>",
        "bad schema": {"schema_version": "harness-r1-patch-v0", "actions": []},
        "lint": patch("on_init", "    import os\n    return None\n"),
        "leak": patch("on_init", "    return {'skills': ['task 17 answer is 3']}\n"),
    }
    for name, p in cases.items():
        e = ev(world, p, tokenizer=qwen_tok)
        assert (e.reward, e.valid, e.complete) == (0.0, False, False), name
        assert e.errors, name
    noop = ev(world, NEVER, tokenizer=qwen_tok)
    assert noop.valid and noop.complete and noop.noop and noop.reward == 0.0
    assert noop.delta == 0.0                                  # paired: exactly zero, not ~0
    # an evaluation that cannot complete (the target went down) earns 0 and is not scored
    down = harness_r1.frozen(_Down(), model="scripted", version="3")
    inc = harness_r1.evaluate_patch(GUARD, "dbbench", down, tasks, base, tokenizer=qwen_tok,
                                    eval_attempts=2)
    assert inc.valid and not inc.complete and inc.infra_error and inc.reward == 0.0
    assert not inc.scored and "incomplete evaluation" in inc.errors[-1]


class _Down(SeededDBBenchPolicy):
    def __init__(self):
        self.version = 3

    async def generate(self, request):
        raise ConnectionError("target unreachable (scripted)")


def test_pairing_is_checked(world, qwen_tok):
    tasks, policy, target, base = world
    other = harness_r1.frozen(policy, model="scripted", version="4")
    with pytest.raises(ValueError, match="baseline.target: the baseline was run on"):
        harness_r1.evaluate_patch(GUARD, "dbbench", other, tasks, base)
    with pytest.raises(ValueError, match="env_name"):
        harness_r1.evaluate_patch(GUARD, "alfworld", target, tasks, base)
    with pytest.raises(ValueError, match="no complete baseline"):
        harness_r1.evaluate_patch(GUARD, "dbbench", target, dbbench_batch(8, 1), base)
    with pytest.raises(TypeError, match="harness_r1.Baseline"):
        harness_r1.evaluate_patch(GUARD, "dbbench", target, tasks, base.rewards)
    with pytest.raises(TypeError, match=r"tasks\[0\]"):
        harness_r1.evaluate_patch(GUARD, "dbbench", target, [t.task_id for t in tasks], base)


def test_k_samples_duplicates_evaluated_once_and_cached(world, qwen_tok, tmp_path):
    tasks, policy, target, base = world
    cache = RewardCache(str(tmp_path))
    g_text = "<think>r</think><patch>" + json.dumps(GUARD) + "</patch>"
    responses = [g_text, GUARD, "no patch here", GUARD2, json.dumps(GUARD), NEVER, SABOTAGE,
                 GUARD2]
    before = policy.calls
    g = harness_r1.evaluate_group(responses, "dbbench", target, tasks, base, cache=cache,
                                  tokenizer=qwen_tok)
    evs = g.evaluations
    assert g.unique_patches == 4 and g.evaluated == 4        # GUARD, GUARD2, NEVER, SABOTAGE
    assert [e.duplicate_of for e in evs] == [None, 0, None, None, 0, None, None, 3]
    assert evs[1].reward == evs[4].reward == evs[0].reward and evs[1].episodes == 0
    assert sum(e.episodes for e in evs) == 4 * 2 * len(tasks)
    assert not evs[2].valid and evs[5].noop and evs[6].reward < 0
    m = g.metrics()
    assert m["valid_frac"] == 7 / 8 and m["duplicates"] == 3 and m["target_episodes"] == 4 * 2 * len(tasks)
    # the advantages are the learner's group_advantages over the 8 rewards
    from harness_jax.rl.losses import group_advantages

    ref = np.asarray(group_advantages(g.rewards_K[None]))[0]
    np.testing.assert_allclose(g.advantages_K, ref, rtol=1e-6)
    assert g.advantages_K[0] > 0 > g.advantages_K[6] and not g.zero_variance
    # a second step on the same packet reruns nothing
    calls = policy.calls
    g2 = harness_r1.evaluate_group(responses, "dbbench", target, tasks, base, cache=cache,
                                   tokenizer=qwen_tok)
    assert policy.calls == calls and g2.evaluated == 0
    assert all(e.cached for e in g2.evaluations if e.valid)
    assert m["cache_hits"] == 0 and m["valid"] == 7
    m2 = g2.metrics()                                        # the 4 distinct patches hit, duplicates not counted
    assert m2["cache_hits"] == 4 and m2["duplicates"] == 3
    from harness_jax.harness_r1.training import step_metrics
    sm = step_metrics([m, m2])
    assert sm["r1/cache_hits"] == 4 and sm["r1/cache_hit_frac"] == 0.5
    assert sm["r1/reuse_frac"] == pytest.approx((3 + 7) / 14)   # valid samples that cost no rerun
    np.testing.assert_array_equal(g2.rewards_K, g.rewards_K)
    assert policy.calls > before


def test_delta_b_by_episode():
    base = {"a": {"a#0": 0.0, "a#1": 1.0}, "b": {"b#0": 1.0}}
    assert harness_r1.delta_b(base, {"a": {"a#0": 1.0, "a#1": 1.0}, "b": {"b#0": 0.0}}) == \
        ((0.5 - 1.0) / 2, True)
    assert harness_r1.delta_b(base, {"a": {"a#0": 1.0, "a#1": None}, "b": {"b#0": 1.0}}) == \
        (0.0, False)
    with pytest.raises(ValueError, match="empty baseline"):
        harness_r1.delta_b({}, {})


def test_dry_run_rejects_a_noop_before_any_rerun(world, qwen_tok):
    tasks, policy, target, base = world
    ctxs = [{"hook": "on_post_step", "ctx": {"turn": 1, "observation": "x"}, "episode": "e"}]
    calls = policy.calls
    e = ev(world, NEVER, tokenizer=qwen_tok, dry_run_contexts=ctxs)
    assert e.noop and e.reward == 0.0 and e.episodes == 0 and policy.calls == calls
    assert "runtime no-op" in e.errors[0]


def test_advantages():
    # all equal: a zero-variance packet, exactly zero advantages
    a, zv = harness_r1.group_advantages_K([0.2, 0.2, 0.2, 0.2])
    assert zv and not a.any()
    # infrastructure-incomplete samples are left out of the statistics and get 0
    r = [0.5, 0.0, 0.25, 0.0]
    a, zv = harness_r1.group_advantages_K(r, [True, True, False, True])
    sub = np.array([0.5, 0.0, 0.0])
    want = (sub - sub.mean()) / sub.std()
    np.testing.assert_allclose(a[[0, 1, 3]], want, rtol=1e-5)
    assert a[2] == 0.0 and not zv
    a, zv = harness_r1.group_advantages_K([1.0, 0.0], [True, False])
    assert zv and not a.any()                          # fewer than two scored samples
    A, stats = harness_r1.advantages_NK([[0, 0, 0, 0], [0, 1, 0, 1], [1, 1, 1, 1]])
    assert stats["zero_variance_packets"] == 2 and stats["zero_variance_frac"] == 2 / 3
    np.testing.assert_allclose(A[1], [-1, 1, -1, 1], rtol=1e-5)
    with pytest.raises(ValueError, match="num_packets, K"):
        harness_r1.advantages_NK([0.0, 1.0])
    with pytest.raises(ValueError, match="scored_K shape"):
        harness_r1.group_advantages_K([0.0, 1.0], [True])
