"""The learning test (issue 25, item 3): GRPO through the real loop turns a weak policy into a good
one, and this is the test that fails when a change silently breaks learning.

Set-up: the toy family ``word_label`` (tests/e2e/word_label.py: one word in, its label out, one
turn). A tiny Qwen3.5 (tests/e2e/learning_config.py) gets a weak warm start: the project's SFT
(``sft_warmstart.train_segments``) on demonstrations recorded through the episode runner from a
teacher that answers a random label, so it answers with *a* label, right about a quarter of the
time. Then GRPO runs through the same path a run uses: ``loop.Trainer`` from ``model.init_from``,
the collector, the embedded engine with colocated weight sync, the learner, checkpoints. It is
stopped half-way (a stop request: checkpoint and exit, as on SIGTERM), resumed by a new Trainer on
the same workdir, and finished.

Asserted: training success of the first step is below 0.3 and the mean of the last three steps
at least 0.9; the held-out greedy success of the final policy is far above the warm start's,
with a paired bootstrap interval excluding 0; the resumed learner's parameters and optimizer
state equal the stopped learner's bit for bit; two evaluations of the same policy under
different tags (and task orders) draw the same random numbers, so their per-task outcomes and
sampled tokens are identical (and differ under another sampling seed); ``launch/evaluate.py``
compares two checkpoints with a paired interval.

Breakages this test catches (each was made on purpose, the test failed, the change reverted):
- advantages misaligned with segments (``groups.compute_advantages`` handing each episode the
  advantage of its group neighbour): training success stays near the warm start's;
- the policy-token mask off by one (``rl.batch.pack_segments`` taking ``loss_mask[a:b-1]``
  instead of the targets' ``loss_mask[a+1:b]``): only the end-of-turn token is trained, success
  stays flat;
- weight sync to the engine skipped (``RunContext.sync_weights`` a no-op): rollouts keep coming
  from the warm start, training success stays flat;
- optimizer state lost on resume (``Checkpointer.restore`` keeping the fresh AdamW state): the
  resumed learner's optimizer state differs from the stopped one's.
Runtime: see the report in docs/rl.md ("The learning test"); it is one module-scoped run.
"""
import asyncio
import dataclasses
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from harness_jax.rl.metrics import read_jsonl

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join("tests", "e2e", "learning_config.py")
DEMOS = 512


def _warm_start(config, workdir) -> str:
    """SFT on the weak teacher's replies; returns the checkpoints dir GRPO starts from."""
    from harness_jax.sampling.tokenizer import special_token_ids
    from harness_jax.train import context, sft_warmstart, spec
    from tests.e2e import word_label

    ctx = context.build(spec.resolve(config), workdir)
    try:
        end = special_token_ids(ctx.tokenizer)["<|im_end|>"]
        tasks = word_label.load_split("train", n=DEMOS, seed=config.env.task_seed + 1)

        async def record():
            async def one(i, t):
                eng = sft_warmstart.DemoEngine(ctx.tokenizer, [t.data["teacher"]], end)
                return (await ctx.runner.run(t, ctx.harness, 1, f"demo-{i}", engine=eng, temperature=0.0,
                                             store=False))[0]
            return await asyncio.gather(*[one(i, t) for i, t in enumerate(tasks)])

        segments = [s for e in asyncio.run(record()) for s in e.segments]
        out = sft_warmstart.train_segments(ctx, segments)
        assert out["finished"]
    finally:
        ctx.close()
    return str(ctx.paths.sft_checkpoints)


def _state(learner):
    return jax.tree.map(np.asarray, {k: learner.state[k] for k in ("params", "opt_state", "step")})


def _trainer(config, workdir):
    """The loop's Trainer on the resolved config (plain GRPO: no method extensions)."""
    from harness_jax.train import context, loop, spec

    return loop.Trainer(context.build(spec.resolve(config), workdir))


def _close(trainer) -> None:
    try:
        trainer.close()
    finally:
        trainer.ctx.close()


def _same_random_numbers(trainer) -> dict:
    """The trained policy evaluated three times at T=4 (its T=1 samples are near-deterministic
    once it has learned, so another seed could not show): tags 'x' and 'y' (tasks reversed) must
    agree token for token; another sampling seed must not."""
    from harness_jax.train import evaluation

    tasks = trainer.eval_tasks[:24]
    kw = dict(k=2, temperature=4.0)
    runner, h = trainer.ctx.runner, trainer.ctx.harness

    def tokens(per):
        return {eps[0].task.task_id: [e.segments[0].token_ids for e in eps] for eps in per}

    a = evaluation.run_attempts(runner, tasks, h, tag="x", **kw)
    b = evaluation.run_attempts(runner, tasks[::-1], h, tag="y", **kw)
    seed = evaluation.EVAL_SAMPLING_SEED
    try:
        evaluation.EVAL_SAMPLING_SEED = seed + 1
        c = evaluation.run_attempts(runner, tasks, h, tag="z", **kw)
    finally:
        evaluation.EVAL_SAMPLING_SEED = seed
    return dict(x=evaluation.summarize_attempts(tasks, a, 2), y=evaluation.summarize_attempts(tasks[::-1], b, 2),
                tok_x=tokens(a), tok_y=tokens(b), tok_z=tokens(c))


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    from tests.e2e import learning_config

    root = tmp_path_factory.mktemp("learning")
    config = learning_config.get_config()
    warm = _warm_start(config, str(root / "sft"))
    config.model.init_from = warm
    workdir = str(root / "grpo")
    half = config.num_steps // 2

    first = _trainer(config, workdir)
    first.on_step = lambda step, m: first.request_stop() if step == half else None
    try:
        s1 = first.run()
        stopped = _state(first.ctx.learner)
    finally:
        _close(first)
    second = _trainer(config, workdir)
    try:
        restored = _state(second.ctx.learner)
        resumed_from = second.resumed_from
        s2 = second.run()
        rng = _same_random_numbers(second)
    finally:
        _close(second)
    steps = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if "rollout/success_rate" in r]
    return dict(root=str(root), warm=warm, workdir=workdir, first=s1, final=s2, stopped=stopped,
                restored=restored, resumed_from=resumed_from, steps=steps, rng=rng, half=half)


def test_grpo_turns_a_weak_warm_start_into_a_good_policy(learned):
    succ = [r["rollout/success_rate"] for r in learned["steps"]]
    assert [int(r["step"]) for r in learned["steps"]] == list(range(1, len(succ) + 1))
    assert succ[0] < 0.3, succ
    assert np.mean(succ[-3:]) >= 0.9, succ
    evals = {e["tag"]: e for e in learned["final"]["eval"]}
    assert evals["start"]["greedy_success"] < 0.5 and evals["final"]["greedy_success"] >= 0.85
    from harness_jax.train.evaluation import compare_results
    p = compare_results(evals["final"], evals["start"])["greedy_success"]
    assert p["significant"] and p["ci_low"] > 0.2, p
    # the step line's learner figures are there on every step that trained
    for r in learned["steps"]:
        if not r["learner/skipped_no_signal"]:
            for k in ("learner/kl_to_ref", "learner/entropy", "learner/update_ratio", "learner/pg_clipfrac_low"):
                assert np.isfinite(r[k]), k
    trained = [r for r in learned["steps"] if not r["learner/skipped_no_signal"]]
    assert trained[-1]["learner/kl_to_ref"] > 0          # the policy moved away from the warm start


def test_resume_in_the_middle_restores_the_learner_exactly(learned):
    assert learned["first"]["preempted"] and learned["first"]["step"] == learned["half"] + 1
    assert learned["resumed_from"] == learned["half"] + 1 and learned["final"]["step"] == len(learned["steps"])
    for x, y in zip(jax.tree.leaves(learned["stopped"]), jax.tree.leaves(learned["restored"])):
        np.testing.assert_array_equal(x, y)


def test_every_evaluation_draws_the_same_random_numbers(learned):
    r = learned["rng"]
    assert r["tok_x"] == r["tok_y"]                       # other tag, other task order: same tokens
    by_task = {t["task_id"]: t["attempts"] for t in r["y"]["per_task"]}
    assert [t["attempts"] for t in r["x"]["per_task"]] == [by_task[t["task_id"]] for t in r["x"]["per_task"]]
    assert r["tok_x"] != r["tok_z"]                       # another seed: other samples (the check can fail)


def test_evaluate_cli_compares_two_checkpoints(learned):
    """launch/evaluate.py: the GRPO run's checkpoint against the warm start's, both evaluated on the
    same tasks (greedy here); the warm start's outcomes reproduce the run's own 'start' evaluation."""
    out = os.path.join(learned["root"], "cmp.json")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, "launch/evaluate.py", f"--config={CONFIG}",
                        f"--workdir={learned['root']}/cmp", f"--checkpoint={learned['workdir']}",
                        f"--baseline={learned['warm']}", f"--config.model.init_from={learned['warm']}",
                        f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.load(open(out))
    paired = res["paired"]["greedy_success"]
    assert paired["n_tasks"] == res["num_tasks"] == 64 and paired["significant"] and paired["diff"] > 0.2
    assert res["policy"].startswith("orbax:") and res["baseline"]["policy"].startswith("orbax:")
    start = {e["tag"]: e for e in learned["final"]["eval"]}["start"]
    final = {e["tag"]: e for e in learned["final"]["eval"]}["final"]
    assert res["baseline"]["greedy_success"] == start["greedy_success"]
    assert res["greedy_success"] == final["greedy_success"]
