"""Rescue credit (``harness_s.rescue.credit``), the pool without action-rewriting siblings
(``harness_s.pool_siblings``), training success split by harness and both zero-variance readings
after rescue: pure functions on hand-built trajectories and groups (the real Qwen tokenizer)."""
import math

import pytest

from harness_jax.harness.trajectory import Segment, Trajectory, TurnEvent
from harness_jax.harness_s import credit, rescue
from harness_jax.harness_s.training import success_by_harness
from harness_jax.sampling.chat import render_tool_call
from harness_jax.train import groups
from harness_jax.train.rollout import to_episode


def _traj(tok, kind="rewrite_action", ignored=False, action=None):
    """Two turns in one segment: an SQL query, then an answer whose action an overlay
    ``kind``-ed (``action``: what the environment executed)."""
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    seg = Segment()
    seg.append_context(enc("<|im_start|>user\nHow many rows?<|im_end|>\n<|im_start|>assistant\n"))
    s1 = len(seg)
    query = enc("Action: Operation\n```sql\nSELECT COUNT(*) FROM t;\n```") + [tok.convert_tokens_to_ids("<|im_end|>")]
    seg.append_sampled(query, [-0.5] * len(query))
    seg.policy_versions.append(3)
    seg.append_context(enc("\n<|im_start|>user\n[(7,)]<|im_end|>\n<|im_start|>assistant\n"))
    s2 = len(seg)
    wrong = enc('Action: Answer\nFinal Answer: ["5"]')
    seg.append_sampled(wrong, [-1.0] * len(wrong))
    seg.policy_versions.append(3)
    inter = {"hook": "on_before_action", "source": "code", "result": {"kind": kind, "message": ""}}
    if ignored:
        inter["ignored"] = "not honoured"
    executed = action if action is not None else 'Action: Answer\nFinal Answer: ["7"]'
    turns = [TurnEvent(0, 0, s1, len(query), action=["SELECT COUNT(*) FROM t;"]),
             TurnEvent(1, 0, s2, len(wrong), action=None if kind == "block_and_prompt" else [executed],
                       interventions=[inter])]
    return Trajectory("e0", "t0", "dbbench", "h0", group_id="g", segments=[seg], turns=turns, reward=1.0,
                      success=True, policy_version=3), s2


def test_executed_action_credit_adds_the_rewritten_answer_as_a_trained_sequence(qwen_tok):
    traj, s2 = _traj(qwen_tok)
    ep = to_episode(traj, task=None)
    masked = list(ep.segments[0].loss_mask)
    assert sum(masked[s2:]) == 0 and ep.masked_turns == 1          # policy_tokens: the answer turn is masked
    same = credit.credit_episode(to_episode(traj, task=None), qwen_tok, "policy_tokens")
    assert len(same.segments) == 1 and same.credited_turns == 0
    ep = credit.credit_episode(ep, qwen_tok, "executed_action")
    assert len(ep.segments) == 2 and ep.credited_turns == 1
    extra = ep.segments[1]
    want = qwen_tok.encode('Action: Answer\nFinal Answer: ["7"]', add_special_tokens=False) + \
        [qwen_tok.convert_tokens_to_ids("<|im_end|>")]
    assert extra.token_ids == traj.segments[0].token_ids[:s2] + want        # the context the policy saw, then the executed action
    assert extra.loss_mask == [0] * s2 + [1] * len(want)
    assert all(math.isnan(x) for x in extra.rollout_logprobs[s2:]) and extra.rollout_logprobs[:s2] == [0.0] * s2
    assert extra.turn_starts == [s2] and extra.policy_version == 3 and extra.episode_id == "e0"
    # the episode's advantage reaches the credited sequence through the one advantage path
    g = groups.Group("g", None, [ep], baseline_rewards=[0.0, 0.0])
    groups.compute_advantages([g], eps=1e-6)
    assert ep.segments[1].advantage == ep.segments[0].advantage > 0


def test_executed_action_credit_renders_tool_calls_and_skips_blocked_or_ignored_turns(qwen_tok):
    call = {"name": "commit_final_answer", "arguments": {"answers": ["7"]}}
    traj, s2 = _traj(qwen_tok, action=call)
    (seg,) = credit.executed_action_segments(traj, qwen_tok)
    assert qwen_tok.decode(seg.token_ids[s2:-1]) == render_tool_call("commit_final_answer", {"answers": ["7"]})
    for kw in ({"kind": "block_and_prompt"}, {"ignored": True}):
        traj, _ = _traj(qwen_tok, **kw)
        assert credit.executed_action_segments(traj, qwen_tok) == []
    forced, _ = _traj(qwen_tok, kind="force_action")
    assert len(credit.executed_action_segments(forced, qwen_tok)) == 1
    with pytest.raises(ValueError, match="credit"):
        credit.credit_episode(to_episode(traj, task=None), qwen_tok, "everything")


def test_pool_without_action_rewriting_siblings(tmp_path):
    from harness_jax.harness_s import pool as pool_lib

    from . import loopkit
    base = loopkit.h0()
    kids = [(loopkit.child(base, op), op) for op in ("answer_from_result", "inspect_before_answer", "worked_example")]
    results = {s.sibling_id: {} for s in [base] + [k for k, _ in kids]}
    pool = pool_lib.load_pool(loopkit.frozen_pool(tmp_path, [], results, base, kids).path)
    assert [pool_lib.rewrites_actions(s) for s in pool] == [False, True, False, False]
    kept = pool_lib.select_siblings(pool, "no_action_rewrites")
    assert [e.direction for e in kept.entries] == [None, "inspect_before_answer", "worked_example"]
    assert kept.content_hash == pool.content_hash and kept.meta["siblings_dropped"] == 1
    assert pool_lib.select_siblings(pool, "all") is pool


def _ep(sid, ok):
    return groups.Episode(f"e{sid}{ok}", None, sid, float(ok), bool(ok), [], 0, sibling_id=sid)


def test_training_success_is_split_by_harness_and_counts_the_replaced_h0_failures():
    plain = groups.Group("a", None, [_ep("h0", 1), _ep("h0", 0)])
    rescued = groups.Group("b", None, [_ep("sib", 1), _ep("sib", 1)], baseline_rewards=[0.0, 0.0],
                           info={"rescue": {}, "replaced_successes": [False, False]})
    resampled = groups.Group("c", None, [_ep("h0", 1), _ep("h0", 0)], baseline_rewards=[0.0, 0.0],
                             info={"rescue": {}, "replaced_successes": [False, False]})
    m = success_by_harness([plain, rescued, resampled], {"h0"})
    assert m["rollout/episodes_h0"] == 8 and m["rollout/success_rate_h0"] == pytest.approx(2 / 8)
    assert m["rollout/episodes_helpers"] == 2 and m["rollout/success_rate_helpers"] == 1.0
    # the loop's training success: first rollouts only (never a helper's episodes)
    first = [s for g in (plain, rescued, resampled) for s in g.first_successes]
    assert first == [True, False, False, False, False, False]
    # zero variance: an all-success rescue carries signal only through the injected zeros
    assert rescued.trained_zero_variance and not rescued.zero_variance
    adv = groups.compute_advantages([plain, rescued, resampled], eps=1e-6)
    assert adv["trained_zero_variance_groups"] == 1 and adv["zero_variance_groups"] == 0


def test_post_rescue_zero_variance_does_not_count_injected_zeros():
    recs = [rescue.RescueRecord([0.0] * 2, True, helper_results={"a": [True, True]},
                                final_rewards=[0.0, 0.0, 1.0, 1.0], trained_rewards=[1.0, 1.0]),
            rescue.RescueRecord([0.0] * 2, True, helper_results={"a": [True, False]},
                                final_rewards=[0.0, 0.0, 1.0, 0.0], trained_rewards=[1.0, 0.0]),
            rescue.RescueRecord([1.0, 0.0], False)]
    m = rescue.rescue_step_metrics(recs)
    assert m["zero_variance_after"] == pytest.approx(1 / 3)                 # the all-success rescue: no contrast
    assert m["zero_variance_after_with_original"] == 0.0                   # with the injected zeros: signal


def test_h0_resampling_control_rerolls_all_fail_groups_under_h0_without_a_pool(loop_world, tmp_path):
    """``rescue.helpers="h0"``: the equal-budget control. No pool, no router; an all-fail H0 group
    gets G fresh attempts under H0 itself (the scripted policy fails them again: it is
    deterministic under one harness), with the same bookkeeping and metrics as a rescue."""
    from harness_jax.envs import dbbench
    from harness_jax.harness_s import training
    from harness_jax.train.data import TaskStream
    from harness_jax.train.workdir import RunPaths

    from . import loopkit
    run = loopkit.resolve(loopkit.config(**{"harness_s.rescue.enabled": True, "harness_s.rescue.helpers": "h0"}))
    hs = run.method("harness_s")
    assert hs.trains and not hs.uses_pool
    runner = loopkit.runner(run, loop_world.policy, lambda: dbbench.DBBenchEnv(engine="sqlite", protocol="text"),
                            loop_world.tok)
    try:
        ctx = loopkit.context(run, runner, RunPaths.of(str(tmp_path)))
        ext = training.HarnessSExtension(hs)
        ext.attach(ctx)
        batch = loopkit.collector(run, ctx, TaskStream(loop_world.train, seed=0), ext).collect(0)
        by_cat = {g.task.category: g for g in batch.groups}
        h0 = run.base_harness.harness_id
        assert by_cat["DELETE"].harness_id != "resample"
        for cat in ("counting", "aggregation-SUM"):
            g = by_cat[cat]
            assert g.harness_id == "resample" and g.info["rescue"]["helpers"] == [h0]
            assert len(g.episodes) == 2 and {e.sibling_id for e in g.episodes} == {h0}
            assert g.baseline_rewards == [0.0, 0.0] and g.info["replaced_successes"] == [False, False]
            assert {e.episode_id for e in g.episodes}.isdisjoint(g.info["rescue"]["original_episodes"])
        m = ext.step_metrics(None, batch, {"time/step_s": batch.rollout_s})
        assert m["rescue/trigger_rate"] == pytest.approx(2 / 3) and m["rescue/success_rate"] == 0.0
        assert m["rollout/episodes_h0"] == 10 and m["rollout/episodes_helpers"] == 0
        assert m["rollout/success_rate_h0"] == pytest.approx(2 / 10)
        assert ext.state_dict() == {} and ext.summary()["rescue_helpers"] == "h0"
    finally:
        runner.close()


def test_new_options_are_validated():
    from harness_jax.config_problems import ConfigValidationError

    from . import loopkit
    with pytest.raises(ConfigValidationError) as e:
        loopkit.resolve(loopkit.config(**{"harness_s.rescue.enabled": True, "harness_s.rescue.helpers": "router"}))
    assert "harness_s.pool" in str(e.value)                   # Harness-S rescue needs its pool, the control does not
    bad = {"harness_s.rescue.helpers": "both", "harness_s.rescue.credit": "everything",
           "harness_s.pool_siblings": "some"}
    with pytest.raises(ConfigValidationError) as e:
        loopkit.resolve(loopkit.config(**bad))
    for path in bad:
        assert path in str(e.value)
    with pytest.raises(ConfigValidationError, match="recompute_old_logp"):
        loopkit.resolve(loopkit.config(**{"harness_s.rescue.credit": "executed_action", "rl.recompute_old_logp": False}))
    spec = loopkit.resolve(loopkit.config(**{"harness_s.rescue.credit": "executed_action",
                                             "harness_s.pool_siblings": "no_action_rewrites"})).method("harness_s")
    assert (spec.rescue.credit, spec.pool_siblings, spec.rescue.helpers) == ("executed_action", "no_action_rewrites", "router")
