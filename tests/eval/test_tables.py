"""launch/tables.py and harness_jax.eval.{runs,tables,report}: tables, plots and the HTML report
from small synthetic run directories written by the project's own writers (the sweep driver's
manifest / spec / config / status, ``MetricsWriter``'s metrics.jsonl, the training summary and
``launch/evaluate.py``-style results JSONs). The values put in are known, so the test checks the
numbers in the output, the missing cells, the failed-run listing and the embedded plots."""
import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from harness_jax.eval import report, runs as runs_lib, tables
from harness_jax.eval.runs import TablesError
from harness_jax.rl.metrics import MetricsWriter
from harness_jax.sweeps import rundir, runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "sweeps", "sweep_config.py")

# held-out pass@3 / avg@3 per (lr, seed): lr=0.001 all three seeds; lr=0.003: seed 1 fails,
# seed 2 finishes without the test evaluation
PASS3 = {(0.001, 0): 0.50, (0.001, 1): 0.75, (0.001, 2): 0.25, (0.003, 0): 0.9}
AVG3 = {(0.001, 0): 0.25, (0.001, 1): 0.50, (0.001, 2): 0.00, (0.003, 0): 0.6}


def _finish(d: rundir.RunDir, seed: int, lr: float, pass3=None, avg3=None, steps=4):
    w = MetricsWriter(d.path, tensorboard=False, active=True)
    for s in range(1, steps + 1):
        w.write(s, {"rollout/success_rate": 0.1 * s + 0.01 * seed, "groups/zero_variance_fraction": 1.0 - 0.2 * s,
                    "rescue/success_rate": 0.1 * s})
    w.close()
    rundir.write_json(os.path.join(d.path, "summary.json"), {
        "step": steps, "preempted": False,
        "eval": [{"tag": "final", "success_rate": 0.2 + seed / 10, "pass@1": 0.2 + seed / 10, "step": steps}]})
    if pass3 is not None:
        rundir.write_json(os.path.join(d.path, "eval_test.json"), {
            "num_tasks": 4, "success_rate": avg3, "pass@1": avg3, "pass@3": pass3, "avg@1": avg3, "avg@3": avg3,
            "split": "test", "k": 3, "env": "dbbench"})
    if lr == 0.001:                  # Rank-1 routing results (schema harness-s-rank1-v1)
        h0, r1 = 0.25 + 0.25 * seed, 0.5 + 0.25 * seed
        rundir.write_json(os.path.join(d.path, "eval_selection_rank1.json"), {
            "format": "harness-s-rank1-v1", "num_tasks": 4, "k": 3, "h0": {"avg@3": h0, "pass@3": h0},
            "rank1": {"avg@3": r1, "pass@3": r1}, "gap": {"avg@3": r1 - h0, "pass@3": r1 - h0},
            "h0_rank1_share": 0.25 * (seed + 1), "router": "features", "per_task": _per_task(3 * (1 + seed), 3 * (2 + seed)),
            "choices": {"h0": {"name": "H0", "tasks": seed + 1}, "s1": {"name": "sql-guard", "tasks": 3 - seed}}})
    d.write_status({"state": "done", "exit_code": 0, "attempts": [{"attempt": 1, "code": {"commit": "abc", "diff_sha256": None}}]})


def _per_task(h0_ok: int, r1_ok: int, tasks: int = 4, k: int = 3) -> list:
    """Rank-1 per-task outcomes with the given numbers of successful attempts (filled task by
    task), and one infrastructure error (None, not scored) added to the first task."""
    flat = lambda ok: [i < ok for i in range(tasks * k)]
    h, r = flat(h0_ok), flat(r1_ok)
    out = [{"task_id": f"t{i}", "h0": h[i * k:(i + 1) * k], "rank1": r[i * k:(i + 1) * k]} for i in range(tasks)]
    out[0]["h0"] = out[0]["h0"] + [None]
    return out


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory):
    """The 'grid' sweep of tests/sweeps/sweep_config.py (3 seeds x 2 learning rates) as the sweep
    driver lays it out, and the launchers' outputs of each run."""
    root = str(tmp_path_factory.mktemp("tables") / "grid")
    sw = runner.prepare(CONFIG, "grid", root, repo_root=ROOT)
    runner.write_manifest(sw, {"backend": "local"})
    for run in sw.runs:
        runner.write_run(sw, run)
        d = sw.run_dir(run)
        seed, lr = run.overrides["seed"], run.overrides["opt.lr"]
        if (lr, seed) == (0.003, 1):
            with open(d.log_path, "w") as f:
                f.write("===== attempt 1\nTraceback (most recent call last):\nRuntimeError: boom in the learner\n")
            d.write_status({"state": "failed", "exit_code": 1, "log_tail": d.log_tail(),
                            "attempts": [{"attempt": 1, "detail": "exit 1"}]})
            continue
        _finish(d, seed, lr, PASS3.get((lr, seed)), AVG3.get((lr, seed)))
    return root


def test_sweep_table_values_missing_cells_and_failed_runs(sweep_root, tmp_path):
    res = report.generate([sweep_root], str(tmp_path / "out"), percent=True)
    main = res["tables"][0]
    assert main.spec.metrics == ["eval_test/pass@3", "eval_test/avg@3"]
    assert main.rows == ["opt.lr=0.001", "opt.lr=0.003"]
    a = main.cells[("opt.lr=0.001", "dbbench", "eval_test/pass@3")]
    assert a.n == a.expected == 3
    assert a.mean == pytest.approx(0.5) and a.std == pytest.approx(np.std([0.5, 0.75, 0.25], ddof=1))
    lo, hi = a.ci95
    assert 0.25 <= lo < 0.5 < hi <= 0.75
    b = main.cells[("opt.lr=0.003", "dbbench", "eval_test/avg@3")]
    assert (b.n, b.expected, b.values) == (1, 3, [0.6])
    assert any("failed" in m for m in b.missing) and any("reports no eval_test/avg@3" in m for m in b.missing)

    md = res["markdown"]
    assert "| opt.lr=0.001 | 50.0 ± 25.0 (n=3) | 25.0 ± 25.0 (n=3) |" in md
    assert "90.0 (n=1/3)" in md and "60.0 (n=1/3)" in md
    assert "Runs: 5 of 6 finished" in md and "seed=1,lr=0.003" in md and "boom in the learner" in md
    router = res["tables"][1]        # Rank-1 statistics; rescue success by training stage (metrics.jsonl)
    assert router.spec.metrics == ["eval_selection_rank1/h0_rank1_share", "eval_selection_rank1/h0/avg@3",
                                   "eval_selection_rank1/rank1/avg@3", "eval_selection_rank1/gap/avg@3",
                                   "early/rescue/success_rate", "mid/rescue/success_rate", "late/rescue/success_rate"]
    assert router.cells[("opt.lr=0.001", "dbbench", "eval_selection_rank1/h0_rank1_share")].mean == pytest.approx(0.5)
    assert router.cells[("opt.lr=0.001", "dbbench", "eval_selection_rank1/gap/avg@3")].mean == pytest.approx(0.25)
    assert router.cells[("opt.lr=0.003", "dbbench", "eval_selection_rank1/gap/avg@3")].mean is None
    gap = router.cells[("opt.lr=0.001", "dbbench", "eval_selection_rank1/gap/avg@3")]
    assert gap.ci_over == "seeds+tasks" and [np.mean(t) for t in gap.task_values] == pytest.approx(gap.values)
    lo, hi = gap.ci95                               # per-task gaps are 0 or 1: the task level widens the interval
    assert lo < 0.25 < hi and hi - lo > 0.2
    share = router.cells[("opt.lr=0.001", "dbbench", "eval_selection_rank1/h0_rank1_share")]
    assert share.ci_over == "seeds"                 # no per-task values: over seeds only
    assert router.cells[("opt.lr=0.001", "dbbench", "late/rescue/success_rate")].mean == pytest.approx(0.35)

    files = res["files"]
    rows = list(csv.DictReader(io.StringIO(open(files["csv"]).read())))
    got = {(r["row"], r["column"]): r for r in rows}
    assert float(got[("opt.lr=0.001", "eval_test/pass@3")]["mean"]) == pytest.approx(0.5)
    assert got[("opt.lr=0.003", "eval_test/pass@3")]["n"] == "1"
    data = json.load(open(files["json"]))
    assert [r["state"] for r in data["runs"]].count("failed") == 1
    assert r"\pm" in open(files["tex"]).read()
    html = open(files["html"]).read()
    assert html.count("<img") == len(files["plots"]) >= 3 and "data:image/png;base64," in html
    assert "boom in the learner" in html and "rollout/success_rate" in html and "Rank-1 router decisions" in html
    assert all(os.path.getsize(p) > 1000 for p in files["plots"])
    curve = report.group_curves(tables.group_runs(res["runs"]), "rollout/success_rate")[0]
    assert curve["n"] == 3 and curve["mean"][0] == pytest.approx(0.11)    # 0.1 + mean(0, 0.01, 0.02)


def _plain_run(path, env, seed, evals, ref=None, config_extra=None):
    os.makedirs(path)
    cfg = {"name": "r1_cpu", "seed": seed, "env": {"name": env}, **(config_extra or {})}
    rundir.write_json(os.path.join(path, "config.json"), cfg)
    rundir.write_json(os.path.join(path, "summary.json"), {"preempted": False, "eval": [
        dict(v, tag=t) for t, v in evals.items()]})
    if ref is not None:
        rundir.write_json(os.path.join(path, "engineer_summary.json"), {"reference_rule": ref})


def test_harness_r1_table_equal_weight_mean_and_mixing(tmp_path):
    ev = lambda b, d: {"baseline_success": b, "delta_b": d, "success_rate": b + d, "valid_frac": 1.0}
    _plain_run(tmp_path / "db0", "dbbench", 0, {"after_sft": ev(0.4, 0.1), "final": ev(0.4, 0.2)},
               {"delta_b": 0.3, "success_after": 0.7, "valid_frac": 1.0, "per_packet": [0.2, 0.4]})
    _plain_run(tmp_path / "db1", "dbbench", 1, {"after_sft": ev(0.5, 0.0), "final": ev(0.5, 0.1)},
               {"delta_b": 0.1, "success_after": 0.6, "valid_frac": 1.0})
    _plain_run(tmp_path / "alf0", "alfworld", 0, {"final": ev(0.2, 0.4)},
               {"delta_b": 0.0, "success_after": 0.2, "valid_frac": 0.5}, config_extra={"r1": {"k": 8}})
    _plain_run(tmp_path / "alf1", "alfworld", 1, {"final": ev(0.2, 0.2)},
               {"delta_b": 0.0, "success_after": 0.2, "valid_frac": 0.5})
    os.makedirs(tmp_path / "alf2")            # started, never finished: listed, not dropped
    rundir.write_json(str(tmp_path / "alf2" / "config.json"), {"name": "r1_cpu", "seed": 2, "env": {"name": "alfworld"}})
    open(tmp_path / "alf2" / "metrics.jsonl", "w").write('{"step": 1, "r1/delta_b_mean": 0.1}\n{"step": 2, "r1/del')

    split = report.generate([str(tmp_path)], str(tmp_path / "split"), plots=False)["tables"][0]
    assert [r for r in split.rows if r.endswith("SFT+GRPO engineer")] == ["r1.k=8: SFT+GRPO engineer",
                                                                           "r1.k=unset: SFT+GRPO engineer"]
    assert split.cells[("r1.k=8: SFT+GRPO engineer", "alfworld", "success")].values == [pytest.approx(0.6)]
    assert split.cells[("r1.k=unset: SFT+GRPO engineer", "alfworld", "success")].values == [pytest.approx(0.4)]
    assert not any(n for c in split.cells.values() for n in c.notes if "differ" in n)

    res = report.generate([str(tmp_path)], str(tmp_path / "out"), plots=False, pool_configs=True)
    success = res["tables"][0]
    assert success.spec.title == "Harness-R1 training evaluations: target success" and success.benchmarks == ["alfworld", "dbbench"]
    grpo = {b: success.cells[("SFT+GRPO engineer", b, "success")] for b in ("alfworld", "dbbench", "mean")}
    assert grpo["dbbench"].mean == pytest.approx(0.6) and grpo["alfworld"].mean == pytest.approx(0.5)
    assert grpo["mean"].mean == pytest.approx(0.55)                     # equal weight over benchmarks
    sft = success.cells[("SFT engineer", "mean", "success")]
    assert sft.mean is None and "alfworld" in sft.missing[0]             # never re-weighted
    assert success.cells[("SFT engineer", "alfworld", "success")].missing[0].endswith("reports no after_sft/success_rate")
    alf = success.cells[("rule-based engineer", "alfworld", "success")]
    assert "pools runs whose configs differ at r1 (--pool_configs)" in alf.notes   # alf0 has r1.k set, alf1 not
    assert "alf2" in res["markdown"] and "incomplete" in res["markdown"]
    assert "| SFT engineer | — (n=0/3)" in res["markdown"]
    with pytest.raises(TablesError, match="--strict.*configs differ at r1"):
        report.generate([str(tmp_path)], str(tmp_path / "out2"), plots=False, strict=True, pool_configs=True)


def _r1_table(workdir, bench, seed):
    """A ``harness-r1-table-v1`` table as ``launch/evaluate_engineer.py`` writes it (its own
    ``Row``, ``success_table`` and ``write``)."""
    from harness_jax.harness_r1 import evaluate
    from harness_jax.harness_r1.tables import Row, success_table

    rows = [Row("default", bench, "t", 4, 0.5, 0.5, 0.0), Row("rule", bench, "t", 4, 0.5, 0.75 + 0.05 * seed, 0.25 + 0.05 * seed),
            Row("grpo", bench, "t", 4, 0.5, 0.6, 0.1, valid_frac=0.5)]
    abl = {"arm": "grpo", "benchmark": bench, "packets": 4, "full_delta": 0.1,
           "hooks": {"on_init": {"delta": 0.04, "drop": 0.06, "packets": 4}}}
    tr = [{"target": "qwen/tiny-b", "target_key": "k", "valid": True, "packet_success": 0.4, "packet_failures": 3,
           "heldout_before": 0.3, "heldout_after": 0.3 + 0.1 * seed, "delta": 0.1 * seed, "delta_std": 0.0, "seeds": 1}]
    evaluate.write(dict(schema=evaluate.SCHEMA, split="held_out", config="r1", target="t", **success_table(rows),
                        rows=[r.to_dict() for r in rows], ablation=abl, transfer=tr), os.path.join(workdir, "table_held_out"))


def test_harness_r1_evaluate_engineer_tables(tmp_path):
    for seed in (0, 1):
        _plain_run(tmp_path / f"db{seed}", "dbbench", seed, {"final": {"delta_b": 0.1, "success_rate": 0.6}})
        _r1_table(str(tmp_path / f"db{seed}"), "dbbench", seed)
    res = report.generate([str(tmp_path)], str(tmp_path / "out"), table="harness_r1", plots=False)
    by = {t.spec.title: t for t in res["tables"]}
    success = by["Harness-R1 (table_held_out): target success"]
    assert success.rows == ["no patch (target alone)", "rule-based engineer", "SFT+GRPO engineer"]
    rule = success.cells[("rule-based engineer", "dbbench", "success")]
    assert rule.mean == pytest.approx(0.775) and rule.n == 2
    assert by["Harness-R1 (table_held_out): Delta_B"].cells[("SFT+GRPO engineer", "dbbench", "delta_b")].mean == pytest.approx(0.1)
    abl = by["Harness-R1 (table_held_out): hook ablation"]
    assert abl.rows == ["full patch", "without on_init"]
    assert abl.cells[("without on_init", "dbbench", "delta_b")].mean == pytest.approx(0.04)
    tr = by["Harness-R1 (table_held_out): transfer across targets"]
    assert tr.rows == ["qwen/tiny-b"] and tr.cells[("qwen/tiny-b", "dbbench", "delta_b")].mean == pytest.approx(0.05)


def test_sibling_complementarity_plot_from_the_runs_pool(tmp_path):
    from harness_jax.harness.presets import base_harness
    from harness_jax.harness.siblings import Sibling
    from harness_jax.harness_s.pool import PoolEntry, SiblingPool, freeze_pool

    h0 = base_harness("dbbench", "text")
    res = lambda solves: {t: [t in solves] for t in ("t0", "t1", "t2")}
    pool = freeze_pool(SiblingPool([PoolEntry(Sibling(h0, name="H0"), validation=res({"t0"})),
                                    PoolEntry(Sibling(h0.child(name="sA", system_prompt="Inspect first."), name="sA"),
                                              1, None, "d", "x", res({"t1"}))], env_name="dbbench"), str(tmp_path / "pool"))
    _plain_run(tmp_path / "run", "dbbench", 0, {"final": {"success_rate": 0.5}},
               config_extra={"harness_s": {"pool": pool.path}})
    out = report.generate([str(tmp_path / "run")], str(tmp_path / "out"))
    plots = [p for p in out["files"]["plots"] if "complementarity" in p]
    assert len(plots) == 1 and os.path.getsize(plots[0]) > 1000
    assert "sibling complementarity" in open(out["files"]["html"]).read()


def test_bad_input_is_named(tmp_path, sweep_root):
    with pytest.raises(TablesError, match="--runs=.*no such directory"):
        runs_lib.load_runs([str(tmp_path / "nope")])
    os.makedirs(tmp_path / "empty")
    with pytest.raises(TablesError, match="--runs=.*no runs there"):
        runs_lib.load_runs([str(tmp_path / "empty")])
    with pytest.raises(TablesError, match="--metrics: no finished run reports 'eval_test/pass@5'.*eval_test/pass@3"):
        report.generate([sweep_root], str(tmp_path / "o"), metrics=["eval_test/pass@5"], plots=False)
    with pytest.raises(TablesError, match="--rows: 'opt.lrr'"):
        report.generate([sweep_root], str(tmp_path / "o"), rows=["opt.lrr"], plots=False)
    with pytest.raises(TablesError, match="--curves: .*'rollout/succes_rate'.*rollout/success_rate"):
        report.generate([sweep_root], str(tmp_path / "o"), curves=["rollout/succes_rate"])
    os.makedirs(tmp_path / "dead" / "sweep")
    rundir.RunDir(str(tmp_path / "dead")).write_status({"state": "failed", "exit_code": 1, "attempts": []})
    with pytest.raises(TablesError, match="none of the 1 runs finished.*dead: failed"):
        report.generate([str(tmp_path / "dead")], str(tmp_path / "o"))


def test_cli(sweep_root, tmp_path):
    out = tmp_path / "cli"
    cmd = [sys.executable, "launch/tables.py", f"--runs={sweep_root}", f"--out={out}", "--plots=false",
           "--metrics=final/success_rate"]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert p.returncode == 0, p.stderr
    assert "| opt.lr=0.001 | 0.300 ± 0.100 (n=3) |" in p.stdout and (out / "report.html").exists()
    bad = subprocess.run(cmd[:2] + [f"--runs={tmp_path / 'missing'}"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert bad.returncode == 2 and "--runs=" in bad.stderr and "no such directory" in bad.stderr
