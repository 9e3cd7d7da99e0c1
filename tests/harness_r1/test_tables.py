"""Baselines, hook ablation and transfer as table rows, on generated DBBench (SQLite) with the
scripted sampling target of doubles.py (a test double)."""
import math

import pytest

from harness_jax import harness_r1
from harness_jax.harness.executor import ExecutorConfig
from harness_jax.harness.presets import base_harness
from harness_jax.harness_r1 import agents, tables
from harness_jax.harness_r1.engineers import (FixedPatchEngineer, RuleBasedEngineer,
                                              react_harness, review_hint_patch)
from tests.harness_r1.doubles import SeededDBBenchPolicy, dbbench_batch, item_index

ENV = harness_r1.EnvRef("dbbench", {"engine": "sqlite", "protocol": "text"})
CFG = ExecutorConfig(concurrency=8, infra_retries=0)
H = base_harness("dbbench", "text")


@pytest.fixture(scope="module")
def world(qwen_tok, tmp_path_factory):
    batches = [dbbench_batch(20 + i, 2) for i in range(2)]
    held = dbbench_batch(30, 2, split="selection")
    items = item_index([t for b in batches for t in b] + held)
    policy = SeededDBBenchPolicy(qwen_tok, items)
    target = harness_r1.frozen(policy, model="scripted", version="3")
    cache = harness_r1.BaselineCache(str(tmp_path_factory.mktemp("bl")))
    packets, tasks = [], {}
    for b in batches:
        base = harness_r1.run_baseline(target, ENV, b, H, n_per_task=2, seed=0, config=CFG,
                                       tokenizer=qwen_tok, cache=cache)
        packets.append(harness_r1.packet_from_baseline(base, 6000, split="held_out"))
        tasks.update({t.task_id: t for t in b})
    return policy, target, cache, packets, tasks, items, held


def test_arms_and_the_success_table(world, qwen_tok):
    policy, target, cache, packets, tasks, _, _ = world
    arms = [tables.Arm("default"), tables.Arm("react", harness=react_harness(H)),
            tables.Arm("review_hint", FixedPatchEngineer(review_hint_patch("dbbench"),
                                                         "review_hint")),
            tables.Arm("self_refine", agent=agents.self_refine(qwen_tok)),
            tables.Arm("rule", RuleBasedEngineer())]
    rows = [tables.evaluate_arm(a, packets, target, cache, tasks, tokenizer=qwen_tok)
            for a in arms]
    by = {r.arm: r for r in rows}
    assert by["default"].delta == 0.0 and by["default"].target_episodes == 0
    base = by["default"].success_after
    assert 0 < base < 1 and all(r.success_before == pytest.approx(base) for r in rows)
    # ReAct only adds a system prompt, which the scripted target ignores: a paired rerun
    # reproduces the baseline exactly
    assert by["react"].delta == 0.0 and by["react"].target_episodes > 0
    # the review hint arrives after the first action (the target's mistakes are mostly made by
    # then); the rule-based engineer's guards stop them
    assert by["rule"].delta > by["review_hint"].delta >= 0
    # Self-Refine: draft, critique, refine through the same executor, paired and complete; the
    # scripted target never answers a critique with a verdict, so every draft is refined
    assert by["self_refine"].batches == len(packets) and by["self_refine"].infra_batches == 0
    assert by["self_refine"].target_episodes == by["rule"].target_episodes
    assert by["rule"].valid_frac == 1.0 and by["rule"].infra_batches == 0
    assert by["default"].improved_frac == by["react"].improved_frac == 0.0
    assert by["rule"].improved_frac == sum(d["delta"] > 0 for d in by["rule"].details) / by["rule"].batches > 0
    table = tables.success_table(rows + [tables.Row("rule", "alfworld", "t", 1, 0.2, 0.4,
                                                    0.2)])
    assert table["benchmarks"] == ["alfworld", "dbbench"]
    assert table["arms"]["rule"]["mean"] == pytest.approx((0.4 + by["rule"].success_after) / 2)
    assert math.isnan(table["arms"]["default"]["mean"])     # no ALFWorld row: not re-weighted
    md = tables.table_markdown(table)
    assert md.splitlines()[0] == "| arm | alfworld | dbbench | mean |"
    assert f"| 40.0 | {100 * by['rule'].success_after:.1f} |" in md


def test_hook_ablation(world, qwen_tok):
    policy, target, cache, packets, tasks, _, _ = world
    pk = packets[0]
    base = cache.get(pk.baseline_key)
    batch = [tasks[t] for t in pk.task_ids]
    response = RuleBasedEngineer().propose(pk)[0]
    rows = tables.ablate_hooks(response, "dbbench", target, batch, base, tokenizer=qwen_tok)
    by = {r["removed"]: r for r in rows}
    assert set(by) == {None, "on_init", "make_pre_hint", "on_before_action"}
    full = by[None]["delta"]
    assert full > 0
    # the guards carry the fix: only they stop the hasty first answers (the error hint and the
    # after-error guard fix the same failures, so removing either alone costs nothing); skills
    # change nothing for this target (it ignores its system prompt)
    assert by["on_before_action"]["drop"] > 0
    assert by["on_before_action"]["drop"] == max(r["drop"] for r in rows)
    assert by["on_init"]["drop"] == 0.0
    assert all(r["complete"] for r in rows)
    p = harness_r1.engineers.patch_of(response, "dbbench")
    assert tables.hook_points(p) == ["on_init", "make_pre_hint", "on_before_action"]
    assert tables.hook_points(tables.without_hook(p, "on_init")) == ["make_pre_hint",
                                                                    "on_before_action"]
    with pytest.raises(ValueError, match="hook 'pre_action'"):
        tables.without_hook(p, "pre_action")


def test_transfer_over_targets(world, qwen_tok, tmp_path):
    """One engineer, two targets (different mistake rates): a new patch per target from its own
    packet, measured on held-out tasks over two seeds."""
    policy, target, _, _, _, items, held = world
    careful = harness_r1.frozen(SeededDBBenchPolicy(qwen_tok, items, p_hasty=0.1, p_sloppy=0.1),
                                model="scripted-careful", version="1")
    packet_tasks = dbbench_batch(20, 2)
    rows = tables.transfer(RuleBasedEngineer(), [target, careful], ENV, H, packet_tasks, held,
                           seeds=(0, 1), n_per_task=2, budget_tokens=6000, tokenizer=qwen_tok,
                           config=CFG, baseline_cache=harness_r1.BaselineCache(str(tmp_path)))
    assert [r["target_key"] for r in rows] == [target.key, careful.key]
    for r in rows:
        assert r["valid"] and r["seeds"] == 2 and r["delta"] > 0
        assert r["heldout_after"] == pytest.approx(r["heldout_before"] + r["delta"])
    assert rows[0]["heldout_before"] < rows[1]["heldout_before"]   # the careful target is better


def test_self_refine_drafts_critiques_and_refines(qwen_tok):
    """The agent wrapper on a scripted engine (test double): a kept draft costs two calls, a
    revised one three; side conversations branch off the running context and are seeded from
    the decision's seed."""
    import asyncio

    from harness_jax.sampling import chat
    from harness_jax.sampling.types import GenerateRequest, SamplingParams
    from tests.harness.doubles import ScriptedEngine

    ctx = chat.render_messages([{"role": "user", "content": "How many rows?"}])
    req = GenerateRequest(qwen_tok.encode(ctx, add_special_tokens=False),
                          SamplingParams(max_new_tokens=64, seed=7), "r1", episode_id="ep/s0")
    eng = ScriptedEngine(qwen_tok, ["Action: Answer", '{"verdict": "keep", "issue": ""}'])
    sr = agents.SelfRefine(eng, qwen_tok)
    out = asyncio.run(sr.generate(req))
    assert out is eng.results[0] and len(eng.requests) == 2 and sr.stats["kept"] == 1
    crit = eng.requests[1]
    im_end = qwen_tok.convert_tokens_to_ids("<|im_end|>")
    cut = max(i for i, t in enumerate(req.input_ids) if t == im_end) + 1   # the user turn's end
    assert crit.input_ids[:cut] == list(req.input_ids)[:cut] and len(crit.input_ids) > len(req.input_ids)
    assert "Candidate reply:\nAction: Answer" in qwen_tok.decode(crit.input_ids)
    assert crit.params.seed == 8 and crit.episode_id is None and eng.requests[0].episode_id is None
    eng = ScriptedEngine(qwen_tok, ["Action: Answer", '{"verdict": "revise", "issue": "count first"}',
                                    "Action: Operation"])
    sr = agents.SelfRefine(eng, qwen_tok)
    out = asyncio.run(sr.generate(req))
    assert out.token_ids == eng.results[2].token_ids and out.request_id == "r1"
    assert "Feedback:\n" in qwen_tok.decode(eng.requests[2].input_ids) and eng.requests[2].params.seed == 9
    assert sr.stats["refined"] == 1 and agents.verdict("verdict: KEEP") == "keep"
