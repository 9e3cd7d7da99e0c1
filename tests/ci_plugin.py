"""Pytest hooks that keep the suite inside CI's time and say what happened (loaded by the root
conftest through ``pytest_plugins``):

* the per-test watchdog: a test that hangs fails fast with every thread's stack;
* scheduling under pytest-xdist (``-n 2``): tests run in work units, one unit per module, so
  module- and session-scoped fixtures (compiled engines, end-to-end launcher chains) are built
  once, never on both workers; modules that start or find a machine-wide singleton share one unit
  (``SHARED_UNITS``); the units known to take minutes start first (``HEAVY_FIRST``) so the two
  workers finish together;
* at the end, the tests skipped because a service is not running and the one command that starts
  every service (``bash scripts/services.sh start``);
* with ``HARNESS_JAX_TEST_TIMINGS=FILE``, test seconds per directory and the slowest tests as JSON
  (``.ci/run`` prints them in its timing summary).
"""
from __future__ import annotations

import collections
import faulthandler
import json
import os
import re
import sys
import threading

import pytest

# --------------------------------------------------------------------------------------------
# Watchdog. A test that hangs (XLA:CPU has deadlocked with many fake devices on 2 cores) would
# otherwise eat CI's whole 90 minutes and say nothing. Past TEST_TIMEOUT_S for one test (set-up
# included, so a module fixture's launcher chain counts towards its first test) a watchdog
# thread stops output capture, dumps every thread's stack to stderr and ends the process (exit
# code 70); a faulthandler timer 60 s later ends it even if the hang holds the GIL. Without
# xdist that ends the run. Under xdist it ends the worker; xdist reports the test as failed
# ("worker 'gw0' crashed while running ...") after the stacks, and the run ends as well: worker
# restarts are off unless --max-worker-restart says otherwise (a replacement worker would be
# given the rest of the hung module, and xdist has raced into a hang of its own on such restarts
# here), and the hung test is never sent to another worker (``UnitScheduling.remove_node``).
# The slowest set-up (the Harness-S launcher chain) takes a few minutes.
# --------------------------------------------------------------------------------------------
TEST_TIMEOUT_S = float(os.environ.get("HARNESS_JAX_TEST_TIMEOUT_S", "1200"))


def pytest_configure(config):
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "maxworkerrestart", "") is None:
        config.option.maxworkerrestart = "0"
    if hasattr(config.option, "loadscopereorder"):    # keep HEAVY_FIRST's order (see there)
        config.option.loadscopereorder = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if TEST_TIMEOUT_S <= 0:
        yield
        return
    done = threading.Event()

    def watchdog():
        if done.wait(TEST_TIMEOUT_S):
            return
        capman = item.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            capman.suspend_global_capture(in_=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        sys.stderr.write(f"\n{item.nodeid}{f' (xdist worker {worker})' if worker else ''} ran past "
                         f"HARNESS_JAX_TEST_TIMEOUT_S={TEST_TIMEOUT_S:.0f}s; stacks of every thread:\n")
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(70)

    threading.Thread(target=watchdog, name="test-timeout", daemon=True).start()
    faulthandler.dump_traceback_later(TEST_TIMEOUT_S + 60, exit=True)
    try:
        yield
    finally:
        done.set()
        faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------------------------------
# Scheduling under xdist.
# --------------------------------------------------------------------------------------------
# Modules that must run on one worker, one after the other: they start or attach to a
# machine-wide singleton. Ray: `ray.init()` without an address attaches to any Ray cluster
# running on the machine (the sweep test's `ray start` head) instead of starting its own.
# AppWorld: the service serves a bounded number of episodes at once, and the generated data tree
# is built under a lock by whichever test asks first.
SHARED_UNITS = {
    "ray": ("tests/sweeps/test_sweep_ray.py", "tests/harness/test_workers.py"),
    "appworld": ("tests/envs/test_appworld",),
}
# Work units that take minutes, longest first (test-seconds per unit of the 2026-12-07 clean-clone
# run, docs/ci.md; the AppWorld unit after the first few, by when .ci/prepare_data.py has built
# its data tree, ~100 s). Starting them first keeps one worker from getting a long unit at the
# end while the other sits idle; the many short units fill in behind them. xdist's own
# "--loadscope-reorder" (on by default: units with more tests first) would put these 1-4-test
# units last, so it is switched off (pytest_configure): simulated on that run's per-test
# seconds, the two workers end at 1814 s with it and at 1758 s without (3515 test-seconds).
HEAVY_FIRST = (
    "tests/experiments/test_aot.py",
    "tests/rl/test_learner_qwen.py",
    "ray",
    "tests/e2e/test_learning.py",
    "tests/e2e/test_harness_s_e2e.py",
    "appworld",
    "tests/sampling/test_engine.py",
    "tests/models/test_gdn_pallas.py",
    "tests/models/test_moe_ep.py",
    "tests/rl/test_learner_toy.py",
    "tests/models/test_gdn_numerics.py",
    "tests/sweeps/test_sweep_local.py",
    "tests/e2e/test_modes.py",
    "tests/experiments/test_accel_probe.py",
    "tests/models/test_parity.py",
    "tests/harness_r1/test_engineer_pipeline.py",
    "tests/models/test_sharding.py",
    "tests/models/test_attention.py",
    "tests/sampling/test_paged.py",
    "tests/e2e/test_train_e2e.py",
    "tests/envs/test_alfworld.py",
    "tests/sampling/test_serving.py",
    "tests/models/test_remat.py",
    "tests/e2e/test_main_job.py",
    "tests/models/test_checkpoint.py",
)


def unit_of(nodeid: str) -> str:
    """The work unit of a test: a shared unit's name, else its module's path."""
    path = nodeid.split("::", 1)[0]
    for name, prefixes in SHARED_UNITS.items():
        if path.startswith(prefixes):
            return name
    return path


def _distributed(config) -> bool:
    return hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None) not in (None, 0)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """Under xdist: the units of HEAVY_FIRST first, then the rest in collection order (a stable
    sort, identical on every worker, as xdist requires)."""
    if not _distributed(config):
        return
    rank = {u: i for i, u in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda it: rank.get(unit_of(it.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config, log):
    """One work unit per module (or shared unit), sent to the workers in collection order."""
    if config.getoption("dist") not in ("load", "loadscope"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return unit_of(nodeid)

        def remove_node(self, node):
            """As xdist's, except that the test a crashed worker was running (the watchdog ends a
            worker whose test hangs) is not sent again: a replacement worker would hang on it too,
            and so on up to xdist's restart limit. The rest of its unit goes back to the queue."""
            workload = self.assigned_work.pop(node)
            pending = [(unit, nodeid) for unit, tests in workload.items()
                       for nodeid, completed in tests.items() if not completed]
            if not pending:
                return None
            crash_unit, crashitem = pending[0]
            workload[crash_unit][crashitem] = True
            self.workqueue.update({u: t for u, t in workload.items() if not all(t.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

    return UnitScheduling(config, log)


# --------------------------------------------------------------------------------------------
# Closing summaries (controller only).
# --------------------------------------------------------------------------------------------
SERVICES_COMMAND = "bash scripts/services.sh start"
_SCRIPT = re.compile(r"scripts/(\w+)\.sh")


def _reason(rep) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])
    return str(lr)


def service_skips(reports) -> dict:
    """``{script name: [nodeid, ...]}`` of the skips whose reason names a ``scripts/*.sh``."""
    out = collections.defaultdict(list)
    for rep in reports:
        m = _SCRIPT.search(_reason(rep))
        if m:
            out[m.group(1)].append(rep.nodeid)
    return dict(out)


def _dir_of(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


_SECONDS: collections.Counter = collections.Counter()    # nodeid -> set-up + call + tear-down


def pytest_runtest_logreport(report):
    _SECONDS[report.nodeid] += float(getattr(report, "duration", 0.0) or 0.0)


def timings(per_test: dict, top: int = 15) -> dict:
    """Test seconds (set-up + call + tear-down) per test directory, the ``top`` slowest tests, and
    every test's (``per_test``: what the next cut of CI time is chosen from)."""
    dirs: dict = {}
    for nodeid, s in per_test.items():
        d = dirs.setdefault(_dir_of(nodeid), {"tests": 0, "seconds": 0.0})
        d["tests"] += 1
        d["seconds"] += s
    slowest = sorted(per_test.items(), key=lambda kv: -kv[1])[:top]
    return {"dirs": {k: {"tests": v["tests"], "seconds": round(v["seconds"], 1)} for k, v in sorted(dirs.items())},
            "slowest": [[n, round(s, 1)] for n, s in slowest],
            "test_seconds": round(sum(per_test.values()), 1),
            "per_test": {n: round(s, 2) for n, s in sorted(per_test.items())}}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Outermost wrapper: runs after pytest's own sections (durations, the short summary), so the
    run ends with the service skips, just before the final counts line."""
    result = yield
    if hasattr(config, "workerinput"):
        return result
    stats = terminalreporter.stats
    path = os.environ.get("HARNESS_JAX_TEST_TIMINGS")
    if path:
        out = timings(_SECONDS)
        out["exitstatus"] = int(exitstatus)
        out["counts"] = {k: len(stats.get(k, [])) for k in ("passed", "failed", "skipped", "error")}
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
    skips = service_skips(stats.get("skipped", []))
    if skips:
        terminalreporter.section("skipped: a service is not running")
        for name, ids in sorted(skips.items()):
            terminalreporter.write_line(f"{len(ids)} test(s) need scripts/{name}.sh, e.g. {ids[0]}")
        terminalreporter.write_line(f"start every service with: {SERVICES_COMMAND}  (then rerun)")
    return result
