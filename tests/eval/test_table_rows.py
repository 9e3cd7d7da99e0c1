"""Tables never mix methods: runs whose resolved configs differ beyond the seed get rows of their
own, in plain workdirs and sweep roots alike; the benchmark and seed come from each run's config;
pooling different configs happens only when asked, and the output says so.

Run directories are written as the launchers write them: ``config.json`` (the resolved config of
``launch/train.py``, ``config.to_json_best_effort``) or the sweep driver's ``sweep/config.json``,
``summary.json`` with the final evaluation, ``metrics.jsonl`` through ``MetricsWriter``. Two
methods: ``harness_s`` (4 steps, seeds 0-2) and ``grpo_only`` (6 steps, rescue off, seeds 0-1)."""
import json
import os
import textwrap

import pytest

from harness_jax.eval import report, rows, tables
from harness_jax.eval.runs import Run, TablesError
from harness_jax.rl.metrics import MetricsWriter
from harness_jax.sweeps import rundir, runner, spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIG = '''
from ml_collections import ConfigDict
from harness_jax.sweeps import hyper

def get_config():
    c = ConfigDict()
    c.name = "harness_s"
    c.seed = 0
    c.num_steps = 4
    c.env = ConfigDict({"name": "dbbench", "dbbench": {"engine": "sqlite"}})
    c.opt = ConfigDict({"lr": 5e-5})
    c.harness_s = ConfigDict({"rescue": {"enabled": True}, "router": {"name": "features"}})
    return c

GRPO = {"name": "grpo_only", "num_steps": 6, "harness_s.rescue.enabled": False}
SWEEPS = {"methods": lambda: hyper.chain(hyper.sweep("seed", [0, 1, 2]),
                                         hyper.product(hyper.sweep("seed", [0, 1]), hyper.fixed(GRPO)))}
'''
GRPO = {"name": "grpo_only", "num_steps": 6, "harness_s.rescue.enabled": False}
RUNS = [("harness_s", {}, s) for s in (0, 1, 2)] + [("grpo_only", GRPO, s) for s in (0, 1)]


def _success(method: str, seed: int) -> float:
    return (0.3 if method == "harness_s" else 0.1) + 0.1 * seed


def _outputs(path: str, method: str, seed: int, steps: int) -> None:
    """What launch/train.py leaves in its workdir at the end (config.json aside)."""
    w = MetricsWriter(path, tensorboard=False, active=True)
    for s in range(1, steps + 1):
        w.write(s, {"rollout/success_rate": _success(method, seed) + 0.01 * s})
    w.close()
    rundir.write_json(os.path.join(path, "summary.json"), {
        "step": steps, "preempted": False,
        "eval": [{"tag": "final", "success_rate": _success(method, seed), "pass@1": _success(method, seed),
                  "step": steps}]})


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "methods.py"
    path.write_text(textwrap.dedent(CONFIG))
    return str(path)


@pytest.fixture(scope="module")
def plain_dir(tmp_path_factory, config_file):
    """Five plain launch/train.py workdirs side by side, each with its resolved config.json."""
    root = tmp_path_factory.mktemp("plain")
    for method, over, seed in RUNS:
        _, cfg = spec.resolve_run(config_file, {**over, "seed": seed})
        path = str(root / f"{method}-s{seed}")
        os.makedirs(path)
        rundir.write_json(os.path.join(path, "config.json"), cfg)
        _outputs(path, method, seed, cfg["num_steps"])
    return str(root)


@pytest.fixture(scope="module")
def sweep_root(tmp_path_factory, config_file):
    """One sweep root whose runs are both methods (the 'methods' sweep: seeds of each)."""
    root = str(tmp_path_factory.mktemp("sweep") / "methods")
    sw = runner.prepare(config_file, "methods", root, repo_root=ROOT)
    runner.write_manifest(sw, {"backend": "local"})
    for run in sw.runs:
        runner.write_run(sw, run)
        d = sw.run_dir(run)
        _outputs(d.path, run.config["name"], run.config["seed"], run.config["num_steps"])
        d.write_status({"state": "done", "exit_code": 0, "attempts": [{"attempt": 1, "code": {"commit": "abc"}}]})
    return root


@pytest.mark.parametrize("where", ["plain_dir", "sweep_root"])
def test_two_methods_get_separate_rows_seeds_pool(where, request, tmp_path):
    res = report.generate([request.getfixturevalue(where)], str(tmp_path / "out"), plots=False)
    main = res["tables"][0]
    assert main.spec.metrics == ["final/success_rate"]
    assert sorted(main.rows) == ["grpo_only", "harness_s"] and main.benchmarks == ["dbbench"]
    hs, grpo = (main.cells[(r, "dbbench", "final/success_rate")] for r in ("harness_s", "grpo_only"))
    assert (hs.n, hs.expected, grpo.n, grpo.expected) == (3, 3, 2, 2)
    assert hs.mean == pytest.approx(0.4) and grpo.mean == pytest.approx(0.15)
    assert hs.notes == [] and grpo.notes == []          # seeds of one config: nothing to say
    md = res["markdown"]
    assert "| harness_s | 0.400 ± 0.100 (n=3) |" in md and "| grpo_only | 0.150 ± 0.071 (n=2) |" in md
    assert "all runs" not in md and "?" not in md.split("### Runs")[1]
    runs_info = {r["name"]: r for r in json.load(open(res["files"]["json"]))["runs"]}
    assert {(r["row"], r["benchmark"], r["seed"]["seed"]) for r in runs_info.values()} == {
        ("harness_s", "dbbench", 0), ("harness_s", "dbbench", 1), ("harness_s", "dbbench", 2),
        ("grpo_only", "dbbench", 0), ("grpo_only", "dbbench", 1)}
    for name, r in runs_info.items():                   # the runs list of the Markdown says the same
        assert f"| {name} | {r['row']} | dbbench | {r['seed']['seed']} | done |" in md
    html = open(res["files"]["html"]).read()
    assert "<td>grpo_only</td><td>dbbench</td><td>1</td>" in html

    curves = report.group_curves(res["grouping"].groups(res["runs"], split_benchmarks=True), "rollout/success_rate")
    by = {c["label"]: c for c in curves}
    assert set(by) == {"harness_s", "grpo_only"}
    assert (by["harness_s"]["n"], by["harness_s"]["steps"]) == (3, [1, 2, 3, 4])
    assert (by["grpo_only"]["n"], by["grpo_only"]["steps"]) == (2, [1, 2, 3, 4, 5, 6])
    assert by["grpo_only"]["mean"][0] == pytest.approx(0.16)


@pytest.mark.parametrize("where", ["plain_dir", "sweep_root"])
def test_pooling_methods_only_when_asked_and_said(where, request, tmp_path):
    runs_dir = request.getfixturevalue(where)
    res = report.generate([runs_dir], str(tmp_path / "o1"), plots=False,
                          pool_over=["name", "num_steps", "harness_s.rescue.enabled"])
    main = res["tables"][0]
    label = "harness_s / grpo_only" if where == "sweep_root" else "grpo_only / harness_s"   # first seen first
    assert main.rows == [label]
    c = main.cells[(label, "dbbench", "final/success_rate")]
    assert c.n == 5 and c.mean == pytest.approx((0.3 + 0.4 + 0.5 + 0.1 + 0.2) / 5)
    assert f"pooled over name = {label.replace(' / ', ', ')} (--pool_over)" in c.notes
    assert any(n in c.notes for n in ("pooled over num_steps = 4, 6 (--pool_over)", "pooled over num_steps = 6, 4 (--pool_over)"))
    assert any(n.startswith("runs share a seed") for n in c.notes)     # seed 0 of both methods
    assert "pooled over name, num_steps, harness_s.rescue.enabled as asked: --pool_over" in res["markdown"]

    res = report.generate([runs_dir], str(tmp_path / "o2"), plots=False, rows=[], pool_configs=True)
    c = res["tables"][0].cells[(label, "dbbench", "final/success_rate")]
    assert c.n == 5
    assert "pools runs whose configs differ at harness_s.rescue.enabled, name, num_steps (--pool_configs)" in c.notes
    assert "configs pooled as asked (--pool_configs)" in res["markdown"]
    with pytest.raises(TablesError, match="--strict: .*configs differ at harness_s.rescue.enabled"):
        report.generate([runs_dir], str(tmp_path / "o3"), plots=False, rows=[], pool_configs=True, strict=True)

    # pooling one of the differences leaves the rest splitting the rows
    res = report.generate([runs_dir], str(tmp_path / "o4"), plots=False, pool_over=["num_steps"])
    assert sorted(res["tables"][0].rows) == ["grpo_only", "harness_s"]


def test_same_name_split_by_what_differs_and_no_config_kept_apart(plain_dir, config_file, tmp_path):
    """Two lengths of one config (same name) are rows ``num_steps=4`` / ``num_steps=8``; a
    workdir that recorded no config.json is a row of its own, never averaged with another."""
    for seed in (0, 1):
        _, cfg = spec.resolve_run(config_file, {"seed": seed, "num_steps": 8})
        path = str(tmp_path / f"long-s{seed}")
        os.makedirs(path)
        rundir.write_json(os.path.join(path, "config.json"), cfg)
        _outputs(path, "harness_s", seed, 8)
    os.makedirs(tmp_path / "old")
    _outputs(str(tmp_path / "old"), "harness_s", 0, 4)
    os.makedirs(tmp_path / "dead")             # started, no config, never finished: listed, no row
    open(tmp_path / "dead" / "metrics.jsonl", "w").write('{"step": 1, "rollout/success_rate": 0.1}\n')
    res = report.generate([plain_dir, str(tmp_path)], str(tmp_path / "out"), plots=False)
    main = res["tables"][0]
    assert main.rows == ["grpo_only, num_steps=6", "harness_s, num_steps=4", "harness_s, num_steps=8", "old (no config)"]
    assert main.benchmarks == ["?", "dbbench"]
    assert main.cells[("harness_s, num_steps=8", "dbbench", "final/success_rate")].n == 2
    assert main.cells[("old (no config)", "?", "final/success_rate")].n == 1
    assert "| old | old (no config) | ? | ? (no config) | done |" in res["markdown"]
    assert "| dead | dead (no config) | ? | ? (no config) | incomplete |" in res["markdown"]


def _run(name, config, overrides=None):
    return Run(name=name, path="/r/" + name, source="/r", state="done", config=config,
               overrides=overrides or {}, code={}, scalars={})


def test_plan_seed_axis_labels_and_bad_paths():
    cfg = lambda **kw: {"name": "m", "seed": 0, "env": {"name": "dbbench"}, "data": {"seed": 0},
                        "opt": {"lr": 1e-3}, "rl": {"lr": 1.0}, **kw}
    # a sweep over data.seed: its seed axis, pooled like the seed
    runs = [_run(f"s{i}", {**cfg(), "data": {"seed": i}}, {"data.seed": i}) for i in range(3)]
    g = rows.plan(runs)
    assert g.seeds == ["seed", "data.seed"] and {g.label(r) for r in runs} == {"m"}
    # a swept path that differs is named; one that only follows the name makes no label longer
    runs = [_run("a", cfg(opt={"lr": 1e-3}), {"opt.lr": 1e-3}), _run("b", cfg(opt={"lr": 3e-3}), {"opt.lr": 3e-3}),
            _run("c", cfg(name="n", opt={"lr": 1e-2}), {"opt.lr": 1e-2})]
    g = rows.plan(runs)
    assert g.keys == ["name", "opt.lr"] and [g.label(r) for r in runs] == ["m, opt.lr=0.001", "m, opt.lr=0.003", "n, opt.lr=0.01"]
    # a benchmark sweep: one row, benchmarks are columns
    runs = [_run("db", cfg()), _run("alf", cfg(env={"name": "alfworld", "alfworld": {"x": 1}}))]
    g = rows.plan(runs)
    assert g.keys == [] and {g.label(r) for r in runs} == {"m"}
    # --rows names a path; a difference it misses still splits, named by its short form
    runs = [_run("x", cfg()), _run("y", cfg(opt={"lr": 2e-3})), _run("z", cfg(opt={"lr": 2e-3}, rl={"lr": 2.0}))]
    g = rows.plan(runs, row_keys=["name"])
    assert [g.label(r) for r in runs] == ["m, opt.lr=0.001, rl.lr=1.0", "m, opt.lr=0.002, rl.lr=1.0",
                                          "m, opt.lr=0.002, rl.lr=2.0"]
    assert tables.group_runs(runs, g) == {g.label(r): [r] for r in runs}
    with pytest.raises(TablesError, match="--pool_over: 'opt.lrr'"):
        rows.plan(runs, pool_over=["opt.lrr"])
