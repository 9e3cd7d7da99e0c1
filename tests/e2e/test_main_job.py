"""``launch/main.py``, the one-command main job, on the CI-sized job (``tiny_main_job``): the
pipeline runs its phases in order (warm start, evolution, the three arms, the report) through
the command itself (a subprocess: one CPU device, as a user gets); run again on the
same workdir it skips every cached phase and run and writes the report again; the report has one row per arm
(never pooled across arms) and a paired line for every arm against GRPO only. A finished warm
start of another config, or a run directory of another arm config, is refused, never overwritten. ~75 s alone on 2 shared cores, more under load (one tiny
SFT, one evolution generation, three one-step runs, two reports)."""
import json
import os
import re
import subprocess
import sys

import pytest

from harness_jax.jobs import harness_s_main as main_job

pytestmark = pytest.mark.slow
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "tests", "e2e", "tiny_main_job.py")


def _main(wd, *flags, ok=True):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("XLA_FLAGS", None)           # one CPU device, as a user's command gets
    p = subprocess.run([sys.executable, "launch/main.py", f"--workdir={wd}", "--seeds=1", f"--job={JOB}", *flags],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    else:
        assert p.returncode != 0, p.stdout[-3000:]
    return p.stdout + p.stderr


def test_main_job_runs_phases_in_order_caches_them_and_reports_one_row_per_arm(tmp_path):
    wd = str(tmp_path / "hs")
    out = _main(wd)
    lines = out.splitlines()
    starts = [m.group(1) for m in map(re.compile(r"\[main\] phase \d/4 (\w+)").match, lines) if m]
    assert starts == ["warm_start", "evolve", "arms", "arms", "arms", "report"], out[-3000:]
    assert not any(": cached" in ln for ln in lines)
    first = json.load(open(os.path.join(wd, "main_job.json")))
    assert os.path.exists(os.path.join(wd, "sft", "hf_final", "config.json")) and first["pool"].endswith(".json")
    assert sorted(first["runs"]) == ["grpo-s0", "harness_s-s0", "resample-s0"]
    for d in first["runs"].values():
        assert main_job.finished_run(d, 1)
    # the harness_s arm trained from the pool, the resampling control without one
    cfgs = {a: json.load(open(os.path.join(d, "config.json"))) for a, d in first["runs"].items()}
    assert cfgs["harness_s-s0"]["harness_s"]["pool"] == first["pool"]
    assert cfgs["resample-s0"]["harness_s"]["pool"] == "" and cfgs["resample-s0"]["harness_s"]["rescue"]["helpers"] == "h0"
    assert all(c["model"]["init_from"] == os.path.join(wd, "sft") and not c["sft"]["enabled"] for c in cfgs.values())
    # one row per arm, never pooled: three distinct labels for the three runs
    assert len(set(first["row_labels"].values())) == 3
    paired = {(r["arm"], r["against"]) for r in first["paired"]}
    assert {("resample", "grpo (final)"), ("harness_s", "grpo (final)")} <= paired
    assert os.path.exists(first["report"]["html"]) and os.path.exists(os.path.join(wd, "report", "paired.md"))

    # again (the same command: nothing left to train): every phase and run cached, the report rewritten
    out = _main(wd)
    for name in ("warm_start", "evolve", "arms:grpo-s0", "arms:resample-s0", "arms:harness_s-s0"):
        assert f"[main] phase {name}: cached" in out, out[-3000:]
    assert "[main] phase report: done" in out
    assert out.index("phase 1/4 warm_start") < out.index("phase 2/4 evolve") < out.index("phase 3/4 arms") \
        < out.index("phase 4/4 report")
    again = json.load(open(os.path.join(wd, "main_job.json")))
    assert again["runs"] == first["runs"] and again["pool"] == first["pool"]
    assert "| harness_s | grpo (final) |" in open(os.path.join(wd, "report", "paired.md")).read()

    # a finished warm start of another config is refused, not retrained over
    job = main_job.load_job(JOB)
    other = main_job.Job(warm_start=lambda: _more_sft(job), evolve=job.evolve, arms=job.arms, pool_arms=job.pool_arms)
    with pytest.raises(ValueError, match="another config"):
        main_job.run(other, main_job.Options(workdir=wd, seeds=(0,)), out=lambda s: None)
    # ... and so is a finished run when the arm's config changed (here: --steps)
    assert "grpo-s0 holds a run of another config" in _main(wd, "--steps=2", ok=False)


def _more_sft(job):
    c = job.warm_start()
    c.sft.steps = 3
    return c
