"""Sweep expansion: the hyper helpers, run names, config resolution through the launcher's own flag
parser, the run-directory layout on disk, and refusals (bad paths, wrong types, changed configs,
a second driver). No launcher process is started here."""
import json
import os

import pytest

from harness_jax.sweeps import hyper, rundir, runner
from harness_jax.sweeps.local import LocalBackend
from harness_jax.sweeps.spec import SweepError, config_diff

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "sweeps", "sweep_config.py")


def _write_config(tmp_path, sweeps_src):
    p = tmp_path / "cfg.py"
    p.write_text(f"import importlib.util\nfrom harness_jax.sweeps import hyper\n"
                 f"_s = importlib.util.spec_from_file_location('_b', {CONFIG!r})\n"
                 f"_m = importlib.util.module_from_spec(_s); _s.loader.exec_module(_m)\n"
                 f"get_config = _m.get_config\nSWEEPS = {sweeps_src}\n")
    return str(p)


def test_hyper_product_zip_chain():
    runs = hyper.product(hyper.sweep("seed", [0, 1]), hyper.sweep("config.opt.lr", [1e-3, 3e-3]))
    assert runs == [{"seed": 0, "opt.lr": 1e-3}, {"seed": 0, "opt.lr": 3e-3},
                    {"seed": 1, "opt.lr": 1e-3}, {"seed": 1, "opt.lr": 3e-3}]
    assert hyper.zip_(hyper.sweep("a", [1, 2]), hyper.sweep("b", [3, 4])) == [{"a": 1, "b": 3}, {"a": 2, "b": 4}]
    assert len(hyper.chain(runs, hyper.fixed({"seed": 9}))) == 5
    with pytest.raises(ValueError, match="set by two factors|set twice"):
        hyper.product(hyper.sweep("seed", [0]), hyper.sweep("seed", [1]))
    with pytest.raises(ValueError, match="different lengths"):
        hyper.zip_(hyper.sweep("a", [1, 2]), hyper.sweep("b", [3]))
    with pytest.raises(ValueError, match="dotted config path"):
        hyper.sweep("rl..group_size", [1])


def test_run_names_short_unique_and_safe():
    runs = [{"seed": 0, "rl.top_k": 1, "rollout.top_k": 5, "env.name": "db bench/x"},
            {"seed": 1, "rl.top_k": 1, "rollout.top_k": 5, "env.name": "db bench/x"},
            {"seed": 1, "rl.top_k": 2, "rollout.top_k": 5, "env.name": "db bench/x"}]
    names = hyper.run_names(runs)
    # constant paths (rollout.top_k, env.name) are left out; rl.top_k keeps its prefix (ambiguous suffix)
    assert names == ["seed=0,rl.top_k=1", "seed=1,rl.top_k=1", "seed=1,rl.top_k=2"]
    assert hyper.run_names([{"env.name": "db bench/x"}]) == ["name=db_bench_x"]
    long = hyper.run_names([{"a": "x" * 300}, {"a": "y"}])[0]
    assert len(long) <= hyper.MAX_NAME and long[-9] == "-"
    # identical readable names get the overrides' hash
    twins = hyper.run_names([{"a": "x/y"}, {"a": "x_y"}])
    assert twins[0] != twins[1] and twins[0].startswith("a=x_y-")


def test_expand_resolves_through_the_launchers_flag_parser():
    sw = runner.prepare(CONFIG, "grid", "/tmp/unused", repo_root=ROOT)
    assert [r.name for r in sw.runs] == ["seed=0,lr=0.001", "seed=0,lr=0.003", "seed=1,lr=0.001",
                                         "seed=1,lr=0.003", "seed=2,lr=0.001", "seed=2,lr=0.003"]
    r = sw.runs[3]
    assert r.config["seed"] == 1 and r.config["opt"]["lr"] == 3e-3
    assert r.config["mesh"]["shape"] == [1, 1, 1, 1] and r.config["env"]["dbbench"]["engine"] == "sqlite"
    assert r.config["num_steps"] == 3  # the config module's own value
    assert "--config.mesh.shape=(1, 1, 1, 1)" in r.flags
    assert sw.config_arg == "tests/sweeps/sweep_config.py" and sw.launcher == "launch/train.py"
    argv = sw.argv(r)
    assert argv[1:4] == ["launch/train.py", "--config=tests/sweeps/sweep_config.py",
                         "--workdir=/tmp/unused/seed=1,lr=0.003"]


@pytest.mark.parametrize("src,match", [
    ("{'s': [{'rl.gruop_size': 4}]}", "gruop_size"),                 # misspelt path
    ("{'s': [{'rl.group_size': 'four'}]}", "group_size"),            # wrong type
    ("{'s': [{'seed': 0}, {'seed': 0}]}", "same overrides"),
    ("{'s': []}", "non-empty"),
    ("{}", "declares no sweeps"),
])
def test_bad_sweeps_fail_before_anything_runs(tmp_path, src, match):
    cfg = _write_config(tmp_path, src)
    with pytest.raises(SweepError, match=match):
        runner.prepare(cfg, "s", str(tmp_path / "root"), repo_root=ROOT)
    assert not (tmp_path / "root").exists()


def test_unknown_sweep_lists_the_declared_ones():
    with pytest.raises(SweepError, match=r"declares \['e2e', 'fails', 'fails_and_one', 'grid'\]"):
        runner.prepare(CONFIG, "nope", "/tmp/unused", repo_root=ROOT)


def test_layout_written_and_changed_config_refused(tmp_path):
    root = str(tmp_path / "sw")
    sw = runner.prepare(CONFIG, "grid", root, repo_root=ROOT)
    runner.write_manifest(sw, LocalBackend().describe())
    for r in sw.runs:
        runner.write_run(sw, r)
    loaded = rundir.load_sweep(root)
    assert loaded["sweep"]["name"] == "grid" and len(loaded["runs"]) == 6
    run0 = loaded["runs"][0]
    assert run0["status"]["state"] == "pending" and run0["spec"]["overrides"] == {"seed": 0, "opt.lr": 1e-3,
                                                                                  "mesh.shape": [1, 1, 1, 1],
                                                                                  "env.dbbench.engine": "sqlite"}
    assert run0["config"]["opt"]["lr"] == 1e-3
    code = loaded["sweep"]["code"]
    assert len(code["commit"]) == 40 and isinstance(code["dirty"], bool)
    # a started run whose config changed under it is refused (its checkpoint belongs to the old one)
    d = sw.run_dir(sw.runs[0])
    d.write_status({"state": "interrupted", "attempts": [{"attempt": 1, "backend": "local"}]})
    cfg = json.load(open(d.file("config.json")))
    cfg["rl"]["group_size"] = 99
    rundir.write_json(d.file("config.json"), cfg)
    with pytest.raises(SweepError, match=r"differs from today's at rl.group_size"):
        runner.write_run(sw, sw.runs[0])
    # a done one is kept, with a note
    d.write_status({"state": "done", "attempts": [{"attempt": 1, "backend": "local"}]})
    runner.write_run(sw, sw.runs[0])
    assert any("rl.group_size" in n for n in sw.notes)
    # another sweep in the same root is refused
    other = runner.prepare(CONFIG, "e2e", root, repo_root=ROOT)
    with pytest.raises(SweepError, match="its own --workdir"):
        runner.write_manifest(other, LocalBackend().describe())


def test_one_driver_per_root(tmp_path):
    with runner.sweep_lock(str(tmp_path)):
        with pytest.raises(SweepError, match=f"pid {os.getpid()}"):
            with runner.sweep_lock(str(tmp_path)):
                pass
    with runner.sweep_lock(str(tmp_path)):  # released
        pass


def test_config_diff_paths():
    assert config_diff({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1, "c": 5}, "e": 3}) == ["a.c", "d", "e"]


def test_dry_run_writes_nothing(tmp_path):
    root = tmp_path / "sw"
    sw = runner.prepare(CONFIG, "e2e", str(root), repo_root=ROOT)
    lines = []
    plan = runner.dry_run(sw, LocalBackend(), reporter=runner.Reporter("e2e", lines.append))
    assert [p["action"] for p in plan] == ["start"] * 3
    assert not root.exists() and any("--config.rl.group_size=1" in ln for ln in lines)


_DRIVER = r"""
import sys, time
from harness_jax.sweeps.local import LocalBackend
from harness_jax.sweeps.rundir import RunDir
be = LocalBackend(max_parallel=2, env={"SLOT_SEEN": "gpu{slot}"}, cwd=sys.argv[1])
child = [sys.executable, "-c", "import os, time; print(os.environ['SLOT_SEEN'], flush=True); time.sleep(300)"]
hs = [be.start(RunDir(f"{sys.argv[1]}/r{i}"), child, 1) for i in range(2)]
print(" ".join(str(h.proc.pid) for h in hs), [h.slot for h in hs], flush=True)
time.sleep(300)
"""


def test_local_backend_slots_env_and_no_orphans_when_the_driver_dies(tmp_path):
    """The backend's process handling with plain child processes: slots and {slot} env, logs, and
    PR_SET_PDEATHSIG (a SIGKILLed driver takes its launchers with it)."""
    import signal
    import subprocess
    import sys
    import time
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    drv = subprocess.Popen([sys.executable, "-c", _DRIVER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                           env=env)
    first = drv.stdout.readline().split()
    pids = [int(p) for p in first[:2]]
    assert " ".join(first[2:]) == "[0, 1]"
    deadline = time.time() + 60
    logs = [tmp_path / f"r{i}" / "sweep" / "log.txt" for i in range(2)]
    while time.time() < deadline and not all("gpu" in p.read_text() for p in logs if p.exists()):
        time.sleep(0.2)
    assert sorted(p.read_text().splitlines()[-1] for p in logs) == ["gpu0", "gpu1"]
    drv.send_signal(signal.SIGKILL)
    drv.wait()
    deadline = time.time() + 30
    while time.time() < deadline and any(os.path.exists(f"/proc/{p}") and
                                         "zombie" not in open(f"/proc/{p}/status").read().lower() for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")
             and "zombie" not in open(f"/proc/{p}/status").read().lower()]
    assert not alive, f"children outlived the driver: {alive}"


def test_base_overrides_reach_every_run_under_the_sweeps_own():
    """``launch/sweep.py --set``: every run gets the base overrides; the sweep's own win; names
    come from the sweep's overrides only; a bad base path fails before anything runs."""
    sw = runner.prepare(CONFIG, "grid", "/tmp/unused", repo_root=ROOT,
                        base={"num_steps": 1, "opt.lr": 0.5})
    assert [r.name for r in sw.runs][:2] == ["seed=0,lr=0.001", "seed=0,lr=0.003"]
    for r in sw.runs:
        assert r.config["num_steps"] == 1 and r.overrides["num_steps"] == 1
        assert r.config["opt"]["lr"] in (1e-3, 3e-3)          # the sweep's value wins
        assert "--config.num_steps=1" in r.flags
    with pytest.raises(SweepError, match="num_stepz"):
        runner.prepare(CONFIG, "grid", "/tmp/unused", repo_root=ROOT, base={"num_stepz": 1})
