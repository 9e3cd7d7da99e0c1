"""End-to-end agent GRPO through the real launcher, model, engine, executor, environment and
learner (no test doubles): SFT warm start on gold demonstrations, then colocated synchronous
GRPO on generated DBBench tasks, killed with SIGTERM after a step and resumed by running the
same command again.

Checks: the killed run exits cleanly with a checkpoint; the resumed run continues from it and
finishes; the tasks trained on across both runs are exactly the task stream's order for the
seed (same data order as an uninterrupted run); metrics carry every phase timing and MFU equals
the model's FLOPs over the measured step time and peak; evaluation ran before SFT, after SFT and
at the end; traces are in the trajectory store; the final policy is exported as a Hugging Face
directory with its tokenizer. (Preemption *during* the SFT warm start is tests/e2e/test_phases.py.)
The three launcher processes (train, the resumed train, evaluate) share the session's JAX
compilation cache (tests/conftest.py), so only the first compiles the tiny model's programs.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness_jax.rl.metrics import read_jsonl

pytestmark = pytest.mark.slow   # a few minutes on 2 cores; CI runs it
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join("tests", "e2e", "tiny_e2e_config.py")


def _launch(workdir, *extra):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)          # one real CPU device, as a user would run it
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "launch/train.py", f"--config={CONFIG}", f"--workdir={workdir}", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _metric_steps(workdir):
    return [d for d in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if "learner/optimizer_steps" in d]


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("e2e_run"))
    p = _launch(workdir)
    # SIGTERM as soon as the run writes the metrics of its first GRPO step. The stop request is
    # honoured at the end of the step in progress (the second), so the first process ends after
    # step 1 or 2 of 3, whatever the speed of this machine.
    deadline = time.time() + 900
    while time.time() < deadline and p.poll() is None and not _metric_steps(workdir):
        time.sleep(0.1)
    assert p.poll() is None, f"run ended before its first GRPO step:\n{p.stdout.read()[-4000:]}"
    p.send_signal(signal.SIGTERM)
    out1, _ = p.communicate(timeout=600)
    first = json.load(open(os.path.join(workdir, "summary.json")))
    p2 = _launch(workdir)
    out2, _ = p2.communicate(timeout=900)
    assert p2.returncode == 0, out2[-4000:]
    final = json.load(open(os.path.join(workdir, "summary.json")))
    return dict(workdir=workdir, rc1=p.returncode, out1=out1, first=first, final=final, out2=out2)


def test_sigterm_saves_and_exits_cleanly(killed_and_resumed):
    """SIGTERM during GRPO: the launcher finishes the step, checkpoints, exits 0 and says why."""
    r = killed_and_resumed
    assert r["rc1"] == 0, r["out1"][-4000:]
    assert r["first"]["preempted"] is True
    assert 1 <= r["first"]["step"] < 3
    assert "SIGTERM" in r["out1"]


def test_resume_continues_with_same_data_order(killed_and_resumed):
    """The same command resumes from the checkpoint and finishes; the tasks trained on over both
    processes are the task stream's order for the seed (as an uninterrupted run's)."""
    from harness_jax.train import builders, spec
    from harness_jax.train.data import TaskStream
    from tests.e2e import tiny_e2e_config

    r = killed_and_resumed
    final = r["final"]
    assert final["preempted"] is False
    assert final["resumed_from"] == r["first"]["step"]
    assert final["step"] == 3 and final["policy_version"] == 3
    # the task ids trained on, over both processes, in order
    import orbax.checkpoint as ocp
    mgr = ocp.CheckpointManager(os.path.join(r["workdir"], "checkpoints"), item_names=("state", "meta"))
    meta = mgr.restore(mgr.latest_step(), args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    seen = [tid for step in meta["data_state"]["history"]["task_ids"] for tid in step]
    cfg = tiny_e2e_config.get_config()
    expected = [t.task_id for t in TaskStream(builders.load_tasks(spec.resolve(cfg, num_devices=1).env, "train"),
                                              seed=cfg.seed)
                .take(cfg.rl.tasks_per_step * cfg.num_steps)]
    assert seen == expected


def test_metrics_phases_eval_traces_export(killed_and_resumed):
    """Every step's phase timings and MFU (recomputed from the model's FLOPs), evaluations before
    and after SFT and at the end, TensorBoard, traces in the store, the HF export with tokenizer."""
    from harness_jax.rl import policy
    from harness_jax.train import spec
    from tests.e2e import tiny_e2e_config

    r = killed_and_resumed
    wd = r["workdir"]
    steps = _metric_steps(wd)
    assert [int(d["step"]) for d in steps] == [1, 2, 3]
    model_cfg = policy.model_config(spec.resolve(tiny_e2e_config.get_config(), num_devices=1).model)
    for d in steps:
        for k in ("time/rollout_s", "time/train_s", "time/logprob_recompute_s", "time/weight_sync_s",
                  "rollout/reward_mean", "groups/zero_variance_fraction"):
            assert k in d, k
        assert d["staleness/max"] == 0.0 and d["staleness/hist_0"] == 4.0   # synchronous: on-policy
    # a batch without signal makes no optimizer step (and has no learner figures); the others do
    trained = [d for d in steps if d["learner/optimizer_steps"] > 0]
    assert trained and all(d["learner/skipped_no_signal"] == (d["learner/optimizer_steps"] == 0) for d in steps)
    for d in trained:
        assert "learner/grad_norm" in d
        # one optimizer step per batch: MFU = the model's FLOPs / step time / (peak 1e11 x 1 device)
        flops = model_cfg.flops_per_token(int(d["pack/row_length"])) * d["learner/tokens"]
        assert d["learner/model_flops"] == pytest.approx(flops, rel=1e-6)
        assert d["perf/mfu"] == pytest.approx(flops / d["learner/step_time_s"] / 1e11, rel=1e-6)
        assert d["perf/train_tokens_per_s"] == pytest.approx(d["learner/tokens"] / d["learner/step_time_s"], rel=1e-6)
    tags = [e["tag"] for e in r["final"]["eval"]]
    assert tags[:2] == ["before_sft", "after_sft"] and tags[-1] == "final"
    assert r["final"]["sft"]["demos_succeeded"] >= 1 and r["final"]["sft"]["finished"] is True
    assert os.path.exists(os.path.join(wd, "hf_final", "config.json"))
    assert os.path.exists(os.path.join(wd, "hf_final", "tokenizer.json"))
    assert os.listdir(os.path.join(wd, "tb"))
    from harness_jax.harness.store import TrajectoryStore
    store = TrajectoryStore(os.path.join(wd, "traces"))
    recs = store.index()
    assert len(recs) >= 3 * 2 * 2          # every GRPO episode (plus evaluation episodes)
    traj = store.get(recs[0]["episode_id"])
    assert traj.segments and any(traj.segments[0].loss_mask)


def test_evaluate_launcher_on_exported_policy_and_sealed_test_split(killed_and_resumed):
    """launch/evaluate.py loads the exported HF policy (with its tokenizer) and evaluates it on the
    sealed test split, which only this entry point may open; writes the results JSON."""
    wd = killed_and_resumed["workdir"]
    out = os.path.join(wd, "eval_test.json")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, "launch/evaluate.py", f"--config={CONFIG}", f"--workdir={wd}/eval",
                        f"--checkpoint={wd}/hf_final", "--split=test", "--k=2", "--num_tasks=2",
                        f"--out={out}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-4000:]
    res = json.load(open(out))
    assert res["split"] == "test" and res["k"] == 2 and res["num_tasks"] == 2
    assert res["num_episodes"] == 4 and "pass@2" in res and "avg@2" in res
    assert res["policy"].startswith("hf:")
