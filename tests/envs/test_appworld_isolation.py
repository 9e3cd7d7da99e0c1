"""AppWorld's integrity against the code an agent sends (issue: reward hacks, guard bypasses,
pinned workers), on the real runtime through ``AppWorldEnv``:

* what a cell can see: its own task's start state only (no task index, no other task, no ground
  truth), read-only; AppWorld's evaluator is out of its reach;
* what a bypass of AppWorld's syntax guard reaches: nothing of the host (sandbox: unprivileged
  uid, no network, no host file system, no other process);
* leases: a killed client, a closed connection, an idle client each free their worker within
  seconds; exhausted workers name their holders.

Needs the AppWorld service (`bash scripts/appworld.sh start`; .ci/run starts it), like
test_appworld_runtime.py, whose fixtures these tests share."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness_jax.envs import appworld
from harness_jax.envs.appworld import data as awdata
from harness_jax.envs.base import InfraError
from test_appworld_runtime import _need, all_tasks, by_template, fence, service  # noqa: F401

FREED_WITHIN_S = 10.0   # a lease is checked every 0.5 s; generous for a loaded machine


def _cell(env, code: str) -> str:
    r = env.step(fence(code))
    assert not r.info.get("infra_error"), r.info
    return r.observation


def _answer_task(tasks):
    index = awdata.read_index(tasks[0].data["data_dir"])
    return next(t for t in tasks if index[t.data["task_id"]]["answer"] is not None)


def test_a_cell_sees_only_its_own_task_and_no_answer(all_tasks, service):
    """The answer-lookup cell (show_active_task + the generator's task index), the ground truth
    through files and through AppWorld's own loader, and other tasks' files: all absent."""
    task = _answer_task(all_tasks)
    tid = task.data["task_id"]
    env = appworld.AppWorldEnv(timeout_seconds=10, max_interactions=20)
    env.reset(task)
    listing = _cell(env, "import json, pathlib\nprint(json.dumps({d: sorted(p.name for p in "
                         "pathlib.Path('data', d).glob('*')) for d in ('', 'tasks', 'tasks/"
                         f"{tid}')}}))")
    seen = json.loads(listing.strip().splitlines()[-1])
    assert seen[""] == ["api_docs", "base_dbs", "tasks"]          # no harness_jax/, datasets/
    assert seen["tasks"] == [tid] and seen[f"tasks/{tid}"] == ["dbs", "specs.json"]
    lookup = _cell(env, "import json, pathlib\nt = apis.supervisor.show_active_task()\n"
                        "rows = pathlib.Path('data/harness_jax/index.jsonl').read_text()")
    assert "FileNotFoundError" in lookup, lookup
    found = _cell(env, "import pathlib\nprint(sorted(str(p) for p in "
                       "pathlib.Path('/appworld').glob('**/answer.json')))")
    assert found.strip() == "[]", found
    gt = _cell(env, "import pathlib\nfrom appworld.common.path_store import path_store\n"
                    f"print(pathlib.Path(path_store.data, 'tasks', '{tid}', 'ground_truth', "
                    "'answer.json').read_text())")
    assert gt.startswith("Execution failed") and "FileNotFoundError" in gt, gt
    loader = _cell(env, "from appworld.ground_truth import GroundTruth\n"
                        f"print(GroundTruth.load(task_id='{tid}', mode='minimal').answer)")
    assert "doesn't exist" in loader, loader
    # the data tree behind the episode, seen from the host, is not there either
    host = _cell(env, f"import pathlib\nprint(pathlib.Path({task.data['data_dir']!r}).exists())")
    assert host.strip() == "False"
    r = env.step(fence("apis.supervisor.complete_task(answer='unknown')"))
    assert r.done and r.reward == 0.0 and not env.evaluate()["success"]
    env.close()


def test_guard_bypasses_reach_nothing_of_the_host(all_tasks, service, tmp_path):
    """AppWorld's guard is on (as shipped), and what gets past it finds a sandbox: no host
    files, read-only data, an unprivileged uid, no network, no other process."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    sock = appworld.runtime_paths().socket
    env = appworld.AppWorldEnv(timeout_seconds=10, max_interactions=30)
    env.reset(by_template(all_tasks)["note_create"][0])
    assert "not allowed" in _cell(env, "import os\nos.system('id')")      # the guard is on
    reads = {
        "builtins_subscript": "print(__builtins__['open']('/etc/passwd').read())",
        "builtins_getattr": "print(getattr(__builtins__, 'open')('/etc/passwd').read())",
        "builtins_dict": "print(__builtins__.__dict__['open']('/etc/passwd').read())",
        "pathlib": "import pathlib\nprint(pathlib.Path('/etc/passwd').read_text())",
        "host_file": f"import pathlib\nprint(pathlib.Path({str(secret)!r}).read_text())",
        "io_module": "io = getattr(__builtins__, '__import__')('_io')\n"
                     f"print(io.FileIO({str(secret)!r}).read())",
    }
    for name, code in reads.items():
        out = _cell(env, code)
        assert out.startswith("Execution failed") and "root:" not in out and \
            "TOPSECRET" not in out, (name, out)
    imp = "imp = getattr(__builtins__, '__import__')\n"
    uid = _cell(env, imp + "print(imp('os').getuid(), imp('os').getgid())")
    assert [int(x) for x in uid.split()] != [0, 0] and 0 not in [int(x) for x in uid.split()]
    write = _cell(env, imp + "imp('_io').FileIO('/appworld/data/pwned', 'w')")
    assert "Read-only file system" in write, write
    net = _cell(env, imp + "s = imp('socket')\ns.create_connection(('1.1.1.1', 53), timeout=3)")
    assert "Network is unreachable" in net, net
    mgr = _cell(env, imp + f"s = imp('socket')\nc = s.socket(s.AF_UNIX)\nc.connect({sock!r})")
    assert "No such file or directory" in mgr, mgr
    procs = _cell(env, "import pathlib\nprint(sorted(int(p.name) for p in "
                       "pathlib.Path('/proc').glob('[0-9]*')))")
    assert len(json.loads(procs)) <= 4, procs        # bwrap's init, the zygote, this worker
    home = _cell(env, "import pathlib\nprint(sorted(p.name for p in pathlib.Path('/').glob('*')))")
    assert "work" not in home and "home" not in home and "etc" in home, home
    env.close()


PATCH_EVALUATOR = """import appworld.evaluator as ev
_orig = ev.evaluate_task
def _fake(*a, **k):
    t = _orig(*a, **k)
    t.failures.clear()
    t.__dict__['_num_tests'] = None
    return t
ev.evaluate_task = _fake
apis.supervisor.complete_task()"""

FORGE_END_STATE = """from appworld.environment import AppWorld
AppWorld._save_state = lambda self, directory: None
imp = getattr(__builtins__, '__import__')
import json, pathlib
dbs = sorted(pathlib.Path('/appworld/experiments/outputs').glob('*/tasks/*/dbs'))[0]
f = imp('_io').FileIO(str(dbs / 'admin.jsonl'), 'w')
f.write(json.dumps(["ATTACH DATABASE '/results/forged.db' AS x", [], False]).encode())
f.close()
apis.supervisor.complete_task()"""


def test_a_cell_cannot_change_how_it_is_graded(all_tasks, service):
    """Patching AppWorld's evaluator in the worker changes nothing (the evaluator runs in
    another sandbox); an end state forged to run SQL beyond row changes fails to load there."""
    tasks = by_template(all_tasks)["venmo_send_money"]
    env = appworld.AppWorldEnv(timeout_seconds=10)
    env.reset(tasks[0])
    r = env.step(fence(PATCH_EVALUATOR))
    assert r.done and r.reward == 0.0 and not env.evaluate()["success"]
    env.reset(tasks[1])
    r = env.step(fence(FORGE_END_STATE))
    ev = env.evaluate()
    assert r.done and r.reward == 0.0 and not ev["success"]
    assert ev.get("infra_error") and "not authorized" in ev.get("error", ""), ev
    results = os.path.join(appworld.runtime_paths().state_dir, "evaluator", "results")
    assert not os.path.exists(os.path.join(results, "forged.db"))
    env.close()


def _episode_ids(service) -> set:
    return {e["id"] for e in service.health()["episode_list"]}


def _wait_freed(service, eid: str) -> float:
    t0 = time.perf_counter()
    while eid in _episode_ids(service):
        assert time.perf_counter() - t0 < FREED_WITHIN_S, f"episode {eid} still held"
        time.sleep(0.1)
    return time.perf_counter() - t0


CLIENT = """import sys, time
from harness_jax.envs import appworld
from harness_jax.envs.appworld import data as awdata
from harness_jax.envs.base import InfraError
env = appworld.AppWorldEnv()
env.reset(awdata.make_task({"task_id": sys.argv[2], "data_dir": sys.argv[1]}))
print(env.episode_id, flush=True)
time.sleep(600)
"""


def test_a_killed_client_frees_its_worker_within_seconds(all_tasks, service):
    task = all_tasks[0]
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, task.data["data_dir"],
                             task.data["task_id"]], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        eid = proc.stdout.readline().strip()
        assert eid in _episode_ids(service)
        before = service.health()["counters"]
        holder = next(e for e in service.health()["episode_list"] if e["id"] == eid)
        assert holder["holder_pid"] == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        freed = _wait_freed(service, eid)
    finally:
        proc.kill()
    after = service.health()["counters"]
    assert after["released_connection"] + after["released_client_exit"] > \
        before["released_connection"] + before["released_client_exit"]
    print(f"\nkilled client: episode freed after {freed:.2f} s")


def test_a_closed_connection_or_a_silent_client_frees_the_episode(all_tasks, service):
    task = all_tasks[1]
    conn = service.connect()
    eid = conn.open_episode(task.data["data_dir"], task.data["task_id"])["episode_id"]
    conn.close()                                   # no DELETE: the lease alone ends it
    _wait_freed(service, eid)
    other = service.connect()
    with pytest.raises(InfraError, match="closed by the service: its client closed the connection"):
        other.execute(eid, "print(1)", timeout_s=30)
    other.close()
    env = appworld.AppWorldEnv(idle_timeout_s=1.0)
    env.reset(task)
    time.sleep(2.5)
    r = env.step(fence("print(1)"))
    assert r.done and r.info["infra_error"] and "idle" in r.info["error"], r.info
    env.close()


def test_exhausted_workers_name_their_holders(all_tasks, service):
    n = service.health()["max_workers"]
    conns = [service.connect() for _ in range(n)]
    opened = []

    def open_one(conn, task):
        opened.append((conn, conn.open_episode(task.data["data_dir"], task.data["task_id"])))

    threads = [threading.Thread(target=open_one, args=(c, t)) for c, t in zip(conns, all_tasks)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    try:
        assert len(opened) == n
        env = appworld.AppWorldEnv(acquire_timeout_s=0.5)
        with pytest.raises(appworld.AppWorldBusy) as err:
            env.reset(all_tasks[n])
        msg = str(err.value)
        assert f"all {n} AppWorld workers are busy" in msg
        assert f"client pid {os.getpid()}" in msg
        assert all(out["episode_id"] in msg for _, out in opened)
        assert all(t.data["task_id"] in msg for t in all_tasks[:n])
    finally:
        for c in conns:
            c.close()
    for _, out in opened:
        _wait_freed(service, out["episode_id"])
