"""The Trainer's phases in process (``train.loop.Trainer`` on a real run context whose learner,
engine, weight sync, runner and writer are the doubles of ``doubles.py``; the spec, the task
stream, the collector, the advantage path, the packer and Orbax checkpoints are real):

* a step trains on the group-relative advantages of its episodes, syncs weights on schedule,
  writes its metrics and checkpoints; an all-dropped batch still advances the policy version;
* the extensions: every hook gets the run context (never the trainer), in the loop's order; the
  first extension that answers a provider hook decides; each extension's state is saved in
  every checkpoint and restored on resume;
* a stop request ends the run with a checkpoint, and the same run resumes from it;
* the SFT warm start is a stage of the run directory: a resume with other SFT inputs is refused.
"""
import numpy as np
import pytest

from harness_jax.rl import losses
from harness_jax.train import loop
from harness_jax.train.extensions import Extension
from harness_jax.train.stages import StageMismatch

from tests.train import doubles


def _train(ctx, extensions=(), on_step=None):
    trainer = loop.Trainer(ctx, extensions, on_step=on_step)
    try:
        return trainer.run(), trainer
    finally:
        trainer.close()


def test_a_step_trains_on_the_group_advantages_syncs_and_checkpoints(tmp_path):
    ctx = doubles.run_context(doubles.tiny_config(**{"rollout.sync_every": 2, "num_steps": 3}), tmp_path)
    summary, trainer = _train(ctx)
    learner, writer = ctx.learner, ctx.writer
    assert summary["step"] == 3 and summary["policy_version"] == 3 and len(learner.batches) == 3
    # every sampled token of an episode carries its group's (R - mean) / max(std, eps)
    tb = learner.batches[0]
    by_group: dict = {}
    for m in tb.meta:
        by_group.setdefault(m["group_id"], []).append(m)
    assert len(by_group) == 2 and all(len(ms) == 2 for ms in by_group.values())
    for ms in by_group.values():
        want = losses.group_advantages(np.asarray([[m["reward"] for m in ms]], np.float32), eps=1e-6)[0]
        for m, a in zip(ms, want):
            row = tb.advantages[m["row"], m["start"]:m["end"]][tb.loss_mask[m["row"], m["start"]:m["end"]] > 0]
            assert len(row) == 2 and np.allclose(row, float(a), atol=1e-5)
    # weight sync every 2 steps and after the last; metrics every step; a checkpoint every step
    assert ctx.weight_sync.versions == [2, 3]
    assert [s for s, m in writer.rows if "rollout/reward_mean" in m] == [1, 2, 3]
    assert {"learner/loss", "time/step_s", "groups/zero_variance_fraction", "pack/row_length"} <= set(writer.rows[0][1])
    assert trainer.ckpt.all_steps() == [2, 3]                       # every step, the newest ckpt.keep=2 kept
    assert [e["tag"] for e in summary["eval"]] == ["final"]          # eval.at_start is off
    assert (tmp_path / "summary.json").exists()


def test_an_all_dropped_batch_still_advances_the_policy_version(tmp_path):
    ctx = doubles.run_context(doubles.tiny_config(**{"rl.dynamic_sampling": "skip", "num_steps": 1}), tmp_path,
                              reward=lambda task, j, gid: 1.0)      # every group succeeds: zero variance
    summary, _ = _train(ctx)
    assert summary["policy_version"] == 1 and ctx.learner.batches == []
    step_metrics = [m for _, m in ctx.writer.rows if "rollout/reward_mean" in m][0]
    assert step_metrics["learner/skipped_empty_batch"] == 1.0 and step_metrics["groups/dropped_zero_variance"] == 2.0


class Recording(Extension):
    """Records every hook with what it was given; answers the provider hooks it is told to."""

    def __init__(self, name, log, answers=()):
        self.name = name
        self.log = log
        self.answers = set(answers)
        self.restored = None
        self.steps = 0

    def attach(self, run):
        self.log.append((self.name, "attach", type(run).__name__))

    def post_processors(self, run):
        log, name = self.log, self.name

        async def pp(group, rollout, step):
            log.append((name, "post_process", step))
            return group
        return [pp]

    def evaluate(self, run, tasks, tag):
        if "evaluate" not in self.answers:
            return None
        self.log.append((self.name, "evaluate", tag))
        return {"success_rate": 0.5, "by": self.name}

    def after_update(self, run, step, timer):
        self.log.append((self.name, "after_update", step, run.learner.policy_version, run.engine.weight_version))
        self.steps = step
        return {f"{self.name}/after": float(step)}

    def step_metrics(self, run, batch, metrics):
        self.log.append((self.name, "step_metrics", batch.step, "time/step_s" in metrics))
        return {f"{self.name}/metric": 1.0}

    def state_dict(self):
        return {"steps": self.steps}

    def load_state_dict(self, state):
        self.restored = state

    def summary(self):
        return {"steps": self.steps}


def test_extensions_get_the_run_context_in_order_and_their_state_is_checkpointed(tmp_path):
    log = []
    cfg = doubles.tiny_config()
    ctx = doubles.run_context(cfg, tmp_path)
    a, b = Recording("a", log, answers=("evaluate",)), Recording("b", log, answers=("evaluate",))
    summary, _ = _train(ctx, [a, b])
    assert log[:2] == [("a", "attach", "RunContext"), ("b", "attach", "RunContext")]
    # per step: both post-processors per group, then after_update (after the update and the sync), then metrics
    step1 = [e for e in log[2:] if (e[1] == "after_update" and e[2] == 1) or (e[1] == "step_metrics" and e[2] == 0)]
    assert [e[:2] for e in step1] == [("a", "after_update"), ("b", "after_update"),
                                     ("a", "step_metrics"), ("b", "step_metrics")]
    assert ("a", "after_update", 1, 1, 1) in log                  # the learner and the engine moved on
    assert sum(e[1] == "post_process" for e in log) == 2 * 2 * cfg.rl.tasks_per_step
    # the first extension that answers a provider hook decides
    assert [e for e in log if e[1] == "evaluate"] == [("a", "evaluate", "final")]
    assert summary["eval"][-1]["by"] == "a" and summary["a"] == {"steps": 2} and summary["b"] == {"steps": 2}
    rows = [m for _, m in ctx.writer.rows if "rollout/reward_mean" in m]
    assert rows[-1]["a/after"] == 2.0 and rows[-1]["b/metric"] == 1.0
    # resume: each extension gets back the state of the last checkpoint
    ctx2 = doubles.run_context(doubles.tiny_config(**{"num_steps": 3}), tmp_path)
    a2, b2 = Recording("a", [], answers=("evaluate",)), Recording("b", [])
    summary2, trainer2 = _train(ctx2, [a2, b2])
    assert trainer2.resumed_from == 2 and a2.restored == {"steps": 2} and b2.restored == {"steps": 2}
    assert summary2["step"] == 3 and len(ctx2.learner.batches) == 1


def test_a_stop_request_checkpoints_and_the_run_resumes(tmp_path):
    cfg = doubles.tiny_config(**{"num_steps": 4, "ckpt.every_steps": 0})
    ctx = doubles.run_context(cfg, tmp_path)
    # a stop requested during step 2 (here: after step 1's metrics) finishes step 2, saves, and ends
    trainer = loop.Trainer(ctx, on_step=lambda step, m: trainer.request_stop() if step == 1 else None)
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["preempted"] and summary["step"] == 2 and trainer.ckpt.all_steps() == [2]
    ctx2 = doubles.run_context(cfg, tmp_path)
    summary2, trainer2 = _train(ctx2)
    assert trainer2.resumed_from == 2 and summary2["step"] == 4 and not summary2["preempted"]
    assert ctx2.learner.policy_version == 4 and len(ctx2.learner.batches) == 2
    # the task stream continued where the first run stopped
    first = trainer.history["task_ids"]
    assert trainer2.history["task_ids"][:2] == first and len(trainer2.history["task_ids"]) == 4


class WarmStart(Extension):
    """A method's own SFT phase (what Harness-R1's cold start is): records that it ran."""

    def __init__(self):
        self.calls = 0

    def warm_start(self, run, should_stop):
        self.calls += 1
        return {"finished": True, "steps": 3}


def test_the_warm_start_is_a_stage_and_other_sft_inputs_are_refused_on_resume(tmp_path, monkeypatch):
    from harness_jax.train import sft_warmstart

    monkeypatch.setattr(sft_warmstart, "sft_cache_key", lambda run, tok: (f"k{run.sft.steps}", {}))
    cfg = doubles.tiny_config(**{"sft.enabled": True, "num_steps": 1, "eval.at_start": True})
    ext = WarmStart()
    summary, _ = _train(doubles.run_context(cfg, tmp_path), [ext])
    assert ext.calls == 1 and summary["sft"] == {"finished": True, "steps": 3}
    assert [e["tag"] for e in summary["eval"]] == ["before_sft", "after_sft", "final"]
    assert (tmp_path / "stages" / "sft.json").exists()
    again = WarmStart()
    _train(doubles.run_context(doubles.tiny_config(**{"sft.enabled": True, "num_steps": 2}), tmp_path), [again])
    assert again.calls == 0                                     # resumed after the warm start
    other = doubles.run_context(doubles.tiny_config(**{"sft.enabled": True, "sft.steps": 7}), tmp_path)
    with pytest.raises(StageMismatch, match="stage 'sft' already ran with a different configuration"):
        loop.Trainer(other, [WarmStart()])
