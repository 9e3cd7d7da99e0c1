"""What keeps CI inside its time and says what happened: the persistent JAX compilation cache
(``harness_jax.compile_cache``) shared with subprocesses and launchers, and the pytest hooks of
``tests/ci_plugin.py`` (xdist work units, the watchdog under xdist, the closing service-skip
section, the timings file). About 25 s on 2 cores, mostly the pytest subprocess with 2 workers."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness_jax import compile_cache
from tests import ci_plugin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cache_directory_resolution():
    assert compile_cache.resolve_dir({}) == compile_cache.default_dir()
    assert compile_cache.default_dir().endswith(os.path.join(".cache", "harness_jax", "jax_compilation"))
    assert compile_cache.resolve_dir({compile_cache.ENV: "off"}) is None
    assert compile_cache.resolve_dir({compile_cache.ENV: "/x/c"}) == "/x/c"
    # jax's own variable wins over ours
    assert compile_cache.resolve_dir({compile_cache.ENV: "off", "JAX_COMPILATION_CACHE_DIR": "/j"}) == "/j"
    env = {compile_cache.ENV: "/x/c", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "2"}
    assert compile_cache.export_env(env) == "/x/c"
    assert env["JAX_COMPILATION_CACHE_DIR"] == "/x/c"
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "2"        # kept
    assert env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] == "0"         # small programs cached
    off = {compile_cache.ENV: "off"}
    assert compile_cache.export_env(off) is None and "JAX_COMPILATION_CACHE_DIR" not in off


def test_the_session_cache_reaches_subprocesses_and_launcher_start_up(tmp_path):
    """tests/conftest.py exported the cache to this session, so a child process inherits it; a
    second process with the same program loads it from the cache instead of compiling it. A
    process that only sets HARNESS_JAX_COMPILATION_CACHE gets it from distributed.initialize()
    (every launcher's first step)."""
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] and os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    prog = textwrap.dedent("""
        import sys, jax, jax.numpy as jnp
        hits = []
        jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name))
        if sys.argv[1] == "launcher":
            from harness_jax import distributed
            distributed.initialize()
        jax.jit(lambda x: jnp.tanh(x) * 3.0 + 0.25)(jnp.ones((7, 5)))
        print("HIT" if "/jax/compilation_cache/cache_hits" in hits else "MISS", jax.config.jax_compilation_cache_dir)
    """)

    def run(mode, env):
        env = dict(env, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
        env.pop("XLA_FLAGS", None)
        p = subprocess.run([sys.executable, "-c", prog, mode], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return p.stdout.split()

    inherited = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path / "session"))
    assert run("plain", inherited) == ["MISS", str(tmp_path / "session")]
    assert os.listdir(tmp_path / "session")
    assert run("plain", inherited) == ["HIT", str(tmp_path / "session")]
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    bare[compile_cache.ENV] = str(tmp_path / "launcher")
    assert run("launcher", bare) == ["MISS", str(tmp_path / "launcher")]
    assert run("launcher", bare) == ["HIT", str(tmp_path / "launcher")]


def test_work_units_and_summaries():
    assert ci_plugin.unit_of("tests/e2e/test_train_e2e.py::test_x") == "tests/e2e/test_train_e2e.py"
    assert ci_plugin.unit_of("tests/harness/test_workers.py::test_ray_backend[a]") == "ray"
    assert ci_plugin.unit_of("tests/sweeps/test_sweep_ray.py::test_y") == "ray"
    assert ci_plugin.unit_of("tests/envs/test_appworld_runtime.py::t") == "appworld"
    for unit in ci_plugin.HEAVY_FIRST:
        assert unit in ci_plugin.SHARED_UNITS or os.path.exists(os.path.join(ROOT, unit)), unit

    class Rep:
        def __init__(self, nodeid, reason):
            self.nodeid, self.longrepr = nodeid, ("f.py", 3, f"Skipped: {reason}")
    skips = ci_plugin.service_skips([Rep("a::x", "MariaDB not reachable (start it with `bash scripts/mariadb.sh start`)"),
                                     Rep("a::y", "no GPU"), Rep("b::z", "run `bash scripts/appworld.sh start`")])
    assert skips == {"mariadb": ["a::x"], "appworld": ["b::z"]}
    t = ci_plugin.timings({"tests/e2e/a.py::x": 3.0, "tests/e2e/b.py::y": 1.0, "tests/test_ci.py::z": 0.5}, top=2)
    assert t["dirs"] == {"tests/e2e": {"tests": 2, "seconds": 4.0}, "tests": {"tests": 1, "seconds": 0.5}}
    assert t["slowest"] == [["tests/e2e/a.py::x", 3.0], ["tests/e2e/b.py::y", 1.0]] and t["test_seconds"] == 4.5
    assert t["per_test"] == {"tests/e2e/a.py::x": 3.0, "tests/e2e/b.py::y": 1.0, "tests/test_ci.py::z": 0.5}


def _pytest_n2(directory, **env):
    pytest.importorskip("xdist")
    (directory / "conftest.py").write_text('pytest_plugins = ["tests.ci_plugin"]\n')
    env = dict(os.environ, PYTHONPATH=ROOT, **env)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", str(directory)],
                       cwd=directory, env=env, capture_output=True, text=True, timeout=240)
    return p.returncode, p.stdout + p.stderr


def test_xdist_run_keeps_modules_whole_and_ends_with_the_service_skips(tmp_path):
    """A real ``pytest -n 2`` over a throw-away suite with this plugin: every test of a module ran
    on one worker (its module fixture built once); the run ends with the service-skip section and
    the one command; the timings file counts every test."""
    for m in ("a", "b", "c"):
        (tmp_path / f"test_{m}.py").write_text(textwrap.dedent(f"""
            import os, pytest
            @pytest.fixture(scope="module")
            def built():
                with open(os.path.join({str(tmp_path)!r}, "built_{m}_" + os.environ["PYTEST_XDIST_WORKER"]), "w"):
                    pass
            @pytest.mark.parametrize("i", range(4))
            def test_part(built, i):
                pass
        """))
    (tmp_path / "test_svc.py").write_text(
        "import pytest\ndef test_needs_db():\n    pytest.skip('MariaDB not reachable (start it with `bash scripts/mariadb.sh start`)')\n")
    timings = tmp_path / "timings.json"
    rc, out = _pytest_n2(tmp_path, HARNESS_JAX_TEST_TIMINGS=str(timings))
    assert rc == 0, out
    for m in ("a", "b", "c"):
        assert len([f for f in os.listdir(tmp_path) if f.startswith(f"built_{m}_")]) == 1, out
    tail = out[out.index("skipped: a service is not running"):]
    assert "1 test(s) need scripts/mariadb.sh, e.g. test_svc.py::test_needs_db" in tail
    assert "start every service with: bash scripts/services.sh start" in tail and "12 passed, 1 skipped" in tail
    t = json.loads(timings.read_text())
    assert t["counts"] == {"passed": 12, "failed": 0, "skipped": 1, "error": 0} and t["exitstatus"] == 0
    assert t["dirs"]["test_a.py"]["tests"] == 4


def test_xdist_keeps_the_collection_order_of_units(tmp_path):
    """Units go to the workers in collection order (the order HEAVY_FIRST sets), not reordered by
    xdist's default ``--loadscope-reorder`` (more tests first), which would send a 1-test unit of
    minutes last. Three units: test_a (1 test) before test_b and test_c (4 tests each): test_a
    runs before test_c starts (with the reorder, test_b and test_c would start first)."""
    log = tmp_path / "starts"
    log.mkdir()
    for m, n in (("a", 1), ("b", 4), ("c", 4)):
        (tmp_path / f"test_{m}.py").write_text(textwrap.dedent(f"""
            import os, time, pytest
            @pytest.mark.parametrize("i", range({n}))
            def test_part(i):
                open(os.path.join({str(log)!r}, "{m}%d" % i), "w").write(repr(time.time()))
                time.sleep(0.2)
        """))
    rc, out = _pytest_n2(tmp_path)
    assert rc == 0 and "9 passed" in out, out
    start = {f: float((log / f).read_text()) for f in os.listdir(log)}
    assert start["a0"] < min(v for k, v in start.items() if k.startswith("c")), start


def test_a_hang_under_xdist_fails_fast_with_its_stacks(tmp_path):
    """The watchdog under xdist: the hung test's worker prints every thread's stack and ends, the
    test is reported failed, it is not run again, and the run ends (no worker restart)."""
    (tmp_path / "test_hang.py").write_text("import time\ndef test_hangs():\n    time.sleep(120)\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    rc, out = _pytest_n2(tmp_path, HARNESS_JAX_TEST_TIMEOUT_S="3")
    assert rc == 1, out
    assert out.count("ran past HARNESS_JAX_TEST_TIMEOUT_S=3s; stacks of every thread") == 1, out
    assert "test_hang.py::test_hangs (xdist worker gw" in out and 'line 3 in test_hangs' in out
    assert "crashed while running 'test_hang.py::test_hangs'" in out and "1 failed" in out


def test_cache_is_pruned_once_per_process_not_scanned_on_every_write(tmp_path):
    """jax's own size bound scans the whole cache under a lock on every write (quadratic over a
    test session); ours is off for jax and applied once, oldest entries first."""
    env = {compile_cache.ENV: str(tmp_path)}
    compile_cache.export_env(env)
    assert env["JAX_COMPILATION_CACHE_MAX_SIZE"] == "-1"
    for i, age in enumerate([300, 100, 200]):          # entry 0 oldest, then 2, then 1
        f = tmp_path / f"jit_f-{i}-cache"
        f.write_bytes(b"x" * 1000)
        (tmp_path / f"jit_f-{i}-atime").write_bytes(b"t")
        os.utime(f, (1e9 - age, 1e9 - age))
    (tmp_path / "unrelated.txt").write_bytes(b"y" * 5000)
    assert compile_cache.prune(str(tmp_path), max_bytes=2500) == 1
    assert sorted(os.listdir(tmp_path)) == ["jit_f-1-atime", "jit_f-1-cache", "jit_f-2-atime", "jit_f-2-cache",
                                            "unrelated.txt"]
    assert compile_cache.prune(str(tmp_path), max_bytes=1000) == 1 and not (tmp_path / "jit_f-2-cache").exists()
    assert compile_cache.prune(str(tmp_path / "missing")) == 0
