"""Harness-S end to end through the real launchers (no test doubles), one chain of five launcher
processes shared by the module's tests (one pool, one SFT warm start):

1. ``launch/evolve.py`` evolves a pool with the tiny random policy;
2. ``launch/train.py`` trains with rescue, the router and re-anchoring (SFT warm start written to
   ``sft.cache_dir``), is killed with SIGTERM after a GRPO step ...
3. ... and resumed by the same command;
4. a GRPO-only control takes the first run's SFT warm start from the cache;
5. ``launch/evaluate.py --routing=rank1`` evaluates the result.

The random tiny policy fails every task, so rescue fires on every group; helpers fail too. What
is checked is the machinery across process boundaries: rescue metrics, the routing log with
outcomes (no decision logged twice across the resume), router state restored, re-anchoring each
step, the console's step lines without Orbax's INFO lines, progress.png, the SFT cache, the
Rank-1 results file. A rerun of evolution replaying every finished rollout is
tests/harness_s/test_evolve_run.py (``evolve_main``, which ``launch/evolve.py`` only calls).
The launchers share the session's JAX compilation cache (tests/conftest.py), so only the first
compiles the tiny model's programs.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness_jax.rl.metrics import read_jsonl

pytestmark = pytest.mark.slow   # ~2-4 minutes on 2 shared cores
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join("tests", "e2e", "tiny_hs_config.py")


def _env():
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _popen(script, config_arg, workdir, *extra):
    cmd = [sys.executable, script, f"--config={config_arg}", f"--workdir={workdir}", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _run(script, config_arg, workdir, *extra, timeout=900):
    p = _popen(script, config_arg, workdir, *extra)
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-4000:]
    return out


def _steps(workdir):
    return [d for d in read_jsonl(os.path.join(workdir, "metrics.jsonl"))
            if "learner/optimizer_steps" in d or "learner/skipped_empty_batch" in d]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    root = tmp_path_factory.mktemp("hs_e2e")
    ev = str(root / "evolve")
    out_ev = _run("launch/evolve.py", CONFIG, ev)
    pool = out_ev.strip().splitlines()[-1]
    arg = f"{CONFIG}:{pool}"
    run, cache = str(root / "run"), str(root / "sft_cache")
    p = _popen("launch/train.py", arg, run, f"--config.sft.cache_dir={cache}")
    deadline = time.time() + 900
    while time.time() < deadline and p.poll() is None and not _steps(run):
        time.sleep(0.1)
    assert p.poll() is None, f"run ended before its first GRPO step:\n{p.stdout.read()[-4000:]}"
    p.send_signal(signal.SIGTERM)
    out1, _ = p.communicate(timeout=600)
    first = json.load(open(os.path.join(run, "summary.json")))
    out2 = _run("launch/train.py", arg, run, f"--config.sft.cache_dir={cache}")
    control = str(root / "control")
    out_c = _run("launch/train.py", arg, control, f"--config.sft.cache_dir={cache}", "--config.num_steps=0",
                 "--config.harness_s.rescue.enabled=False", "--config.harness_s.reanchor.every_steps=0",
                 "--config.eval.at_start=False", "--config.ckpt.export_hf=False")
    ev_out = os.path.join(root, "rank1.json")
    _run("launch/evaluate.py", arg, str(root / "eval"), f"--checkpoint={run}", "--routing=rank1",
         "--num_tasks=2", f"--out={ev_out}")
    return dict(pool=pool, evolve=ev, run=run, rc1=p.returncode, out1=out1, first=first,
                out2=out2, control=control, out_c=out_c, rank1=ev_out)


def test_evolve_launcher_writes_a_pool(chain):
    """launch/evolve.py writes a loadable pool (H0 + a generation of children), its Markdown
    card, the summary and one generations line."""
    from harness_jax import harness_s
    pool = harness_s.load_pool(chain["pool"])
    assert len(pool) >= 3 and pool.entries[1].generation == 1
    s = json.load(open(os.path.join(chain["evolve"], "evolve", "summary.json")))
    assert s["pool"] == chain["pool"] and s["rollouts_run"] >= 3 and s["rollouts_replayed"] == 0
    assert os.path.exists(chain["pool"][:-5] + ".md")
    assert len(open(os.path.join(chain["evolve"], "evolve", "generations.jsonl")).readlines()) == 1


def test_rescue_fires_metrics_log_and_state_survive_resume(chain):
    """launch/train.py with a pool: SIGTERM after a step exits cleanly with a checkpoint; the same
    command resumes with the router's state; rescue metrics every step, re-anchoring on steps 1-2,
    every routing decision and outcome logged exactly once across both processes; readable step
    lines; progress.png."""
    assert chain["rc1"] == 0 and chain["first"]["preempted"] is True, chain["out1"][-3000:]
    k = chain["first"]["step"]
    assert 1 <= k < 3
    assert "router state restored" in chain["out2"]
    final = json.load(open(os.path.join(chain["run"], "summary.json")))
    assert final["step"] == 3 and final["resumed_from"] == k
    steps = _steps(chain["run"])
    assert [int(d["step"]) for d in steps] == [1, 2, 3]
    for d in steps:
        assert d["rescue/trigger_rate"] == 1.0 and d["rescue/triggered"] == 2.0     # every group fails
        assert d["rescue/zero_variance_before"] == 1.0 and "rescue/wall_fraction" in d
        assert sum(v for kk, v in d.items() if kk.startswith("rescue/helper/") and kk.endswith("/calls")) == 4
    assert all("reanchor/h0_failed_tasks" in d for d in steps if d["step"] < 3)
    hs = final["harness_s"]
    assert hs["decisions"] == 6 and len(hs["reanchors"]) == 2      # 2 groups x 3 steps; steps 1 and 2
    recs = [json.loads(x) for x in open(os.path.join(chain["run"], "harness_s", "routing.jsonl"))]
    ids = [r["decision"]["id"] for r in recs if "decision" in r]
    assert sorted(ids) == list(range(6))                          # none logged twice across the resume
    assert sorted(r["outcome"]["decision_id"] for r in recs if "outcome" in r) == list(range(6))
    assert sum("reanchor" in r for r in recs) == 2
    # the console: one readable line per step, Orbax's INFO lines held back
    assert "step 3/3 | reward" in chain["out2"] and "| rescue 1.00" in chain["out2"]
    assert "checkpoint_manager.py" not in chain["out2"]
    assert os.path.getsize(os.path.join(chain["run"], "progress.png")) > 10_000


def test_control_shares_the_sft_warm_start_through_the_cache(chain):
    """A GRPO-only control given the same ``sft.cache_dir`` takes the run's warm start from the
    cache (says so) instead of training one: the SFT checkpoints are identical byte for byte."""
    import hashlib

    run = json.load(open(os.path.join(chain["run"], "summary.json")))
    ctl = json.load(open(os.path.join(chain["control"], "summary.json")))
    assert "cached" not in run["sft"] and run["sft"]["demos_succeeded"] >= 1    # the run trained it
    assert "sft_cache" in ctl["sft"]["cached"] and "SFT warm start from the cache" in chain["out_c"]

    def tree(d):
        out = {}
        for base, _, files in os.walk(d):
            for f in files:
                p = os.path.join(base, f)
                out[os.path.relpath(p, d)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
        return out
    a, b = tree(os.path.join(chain["run"], "sft_checkpoints")), tree(os.path.join(chain["control"], "sft_checkpoints"))
    assert a and a == b                                           # the same warm start, byte for byte
    assert "harness_s" not in ctl                                 # GRPO only: no extension


def test_rank1_evaluation_of_the_trained_run(chain):
    """launch/evaluate.py --routing=rank1 on the trained run: the results file with H0 and Rank-1
    metrics, the run's re-anchored router statistics (policy version 2) and the pool's path."""
    from harness_jax.harness_s import rank1
    res = rank1.load_results(chain["rank1"])
    assert res["num_tasks"] == 2 and set(res["h0"]) >= {"pass@1", "avg@1"} and "avg@1" in res["gap"]
    assert res["router_policy_version"] == "2"                    # the run's re-anchored statistics
    assert 0.0 <= res["h0_rank1_share"] <= 1.0 and len(res["per_task"]) == 2
    assert res["pool"]["path"] == chain["pool"]
