"""``launch/sweep.py`` with the local backend, end to end: every run is a real ``launch/train.py``
process on the tiny CI config (tests/sweeps/sweep_config.py); nothing is faked.

* a run the launcher rejects is reported with its log tail, is not retried by a re-run unless
  ``--retry_failed``, and the sweep's exit code says so (fast);
* (slow) a sweep of two real training runs and one failing run: SIGTERM to the driver mid-run
  stops the running launcher cleanly (it checkpoints), the run is ``interrupted``; the same
  command then resumes it from its checkpoint, runs the rest two at a time, reports the failure
  without stopping the others; a third invocation launches nothing.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness_jax.sweeps import rundir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = "tests/sweeps/sweep_config.py"


def _sweep(root, name, *extra, popen=False):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)            # one real CPU device per run, as a user would run it
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "launch/sweep.py", f"--config={CONFIG}", f"--sweep={name}",
           f"--workdir={root}", "--progress_every_s=20", *extra]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if popen:
        return p
    out, _ = p.communicate(timeout=1200)
    return p.returncode, out


def test_failed_run_reported_with_log_tail_and_not_retried(tmp_path):
    root = str(tmp_path / "sw")
    rc, out = _sweep(root, "fails")
    assert rc == 1, out
    assert "FAILED group_size=1 (exit code 1" in out
    assert "config.rl.group_size = 1: must be an integer >= 2" in out      # the log tail, on the console
    d = rundir.RunDir(os.path.join(root, "group_size=1"))
    st = d.status()
    assert st["state"] == "failed" and st["exit_code"] == 1 and len(st["attempts"]) == 1
    assert "must be an integer >= 2" in st["log_tail"]
    a = st["attempts"][0]
    assert a["argv"][1:] == ["launch/train.py", f"--config={CONFIG}", f"--workdir={d.path}",
                             "--config.rl.group_size=1"]
    assert len(a["code"]["commit"]) == 40 and a["host"] == rundir.host()
    assert d.config()["rl"]["group_size"] == 1
    # a re-run reports the failure again without starting it ...
    rc, out = _sweep(root, "fails")
    assert rc == 1 and "1 failed (not retried)" in out and "must be an integer >= 2" in out, out
    assert len(d.status()["attempts"]) == 1
    # ... unless asked to
    rc, out = _sweep(root, "fails", "--retry_failed")
    assert rc == 1 and len(d.status()["attempts"]) == 2, out


def _wait_for(pred, timeout, proc, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        if proc.poll() is not None:
            raise AssertionError(f"driver ended before {what}:\n{proc.stdout.read()[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_interrupt_resume_skip_and_failure_isolation(tmp_path):
    root = str(tmp_path / "sw")
    run0 = rundir.RunDir(os.path.join(root, "seed=0"))
    # 1) the driver runs seed=0 alone; SIGTERM once its first checkpoint is on disk
    p = _sweep(root, "e2e", "--max_parallel=1", popen=True)
    _wait_for(lambda: os.path.isdir(os.path.join(run0.path, "checkpoints", "1")), 900, p, "a checkpoint")
    p.send_signal(signal.SIGTERM)
    out1, _ = p.communicate(timeout=900)
    assert p.returncode == 3, out1                                   # unfinished
    assert "stopping seed=0" in out1 and "interrupted seed=0" in out1, out1
    st0 = run0.status()
    assert st0["state"] == "interrupted" and st0["attempts"][0]["exit_code"] == 0
    first = json.load(open(os.path.join(run0.path, "summary.json")))
    assert first["preempted"] is True and first["step"] < 3
    statuses = {r["name"]: r["status"]["state"] for r in rundir.load_sweep(root)["runs"]}
    assert statuses == {"seed=0": "interrupted", "seed=1": "pending", "seed=2,group_size=1": "pending"}

    # 2) the same command resumes seed=0 from its checkpoint and runs the rest, two at a time
    rc, out2 = _sweep(root, "e2e", "--max_parallel=2")
    assert rc == 1, out2                                             # one run failed, the others finished
    assert "started seed=0 (resuming): attempt 2" in out2
    assert "FAILED seed=2,group_size=1" in out2 and "must be an integer >= 2" in out2
    final0 = json.load(open(os.path.join(run0.path, "summary.json")))
    assert final0["step"] == 3 and final0["resumed_from"] == first["step"] and final0["preempted"] is False
    loaded = rundir.load_sweep(root)
    by = {r["name"]: r for r in loaded["runs"]}
    assert by["seed=0"]["status"]["state"] == "done" and len(by["seed=0"]["status"]["attempts"]) == 2
    assert by["seed=1"]["status"]["state"] == "done" and by["seed=1"]["summary"]["step"] == 3
    assert by["seed=1"]["config"]["seed"] == 1
    assert by["seed=2,group_size=1"]["status"]["state"] == "failed"
    # every run is its own workdir with the launcher's outputs
    for name in ("seed=0", "seed=1"):
        steps = [m["step"] for m in rundir.RunDir(os.path.join(root, name)).metrics() if "learner/optimizer_steps" in m]
        assert sorted(set(steps)) == [1, 2, 3], (name, steps)
        # the launcher records the config it parsed, the one the sweep resolved (tables read it)
        assert rundir.read_json(os.path.join(root, name, "config.json")) == by[name]["config"]
    log0 = open(run0.log_path).read()
    assert log0.count("===== attempt") == 2

    # 3) nothing left to do: skips the finished runs, reports the failed one, launches nothing
    t = time.time()
    rc, out3 = _sweep(root, "e2e")
    assert rc == 1 and "2 done (skipped)" in out3 and "0 to start" in out3, out3
    assert len(run0.status()["attempts"]) == 2 and time.time() - t < 60
