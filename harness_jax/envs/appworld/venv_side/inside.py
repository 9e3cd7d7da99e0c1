"""The AppWorld service's code that runs INSIDE a bubblewrap sandbox (``pool.py`` starts them).

Run by AppWorld's venv python, as the sandbox's unprivileged uid; standard library and
``appworld`` only. This file is the only file of the repository a sandbox can see (bound
read-only at ``/opt/harness_jax/inside.py``).

    python inside.py zygote --role worker|evaluator --control-fd N

The **zygote** imports appworld and every app once, makes itself non-dumpable (the code it forks
runs as the same uid but can then neither ptrace it nor read its memory through ``/proc``),
answers ``{"ready": ...}`` and serves one request per SOCK_SEQPACKET record on the control socket:

  {"op": "spawn_worker", "log", "cpu_s"} + a listening socket's fd  -> {"pid"}
        a child serves AppWorld's own environment server (``appworld.serve.environment``) on
        that socket: one episode, then it is killed
  {"op": "spawn_evaluator", "root", "task_id", "experiment", "result", "log", "cpu_s"} -> {"pid"}
        a child runs AppWorld's evaluator for one task and writes the TestTracker (or the error)
        to ``result`` as JSON, then exits
  {"op": "reap"} -> {"ok"}   SIGKILL every other process of this uid in the sandbox (the
        episode's child and anything it left behind)
  {"op": "preload", "root"} -> {"ok"}   load the API docs of the data tree under ``root`` once
        (after the manager installed a new tree)
  {"op": "ping"} -> {"ok"}

Children are single-use: a fresh process per episode and per evaluation, forked from a zygote
that never ran agent code.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import json
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback

ROOT = "/appworld"             # APPWORLD_ROOT of every worker (the slot's binds)
PR_SET_DUMPABLE = 4
# The only statements an evaluator applies from a ``changes`` database file: rows in, rows out
# (and the read-only pragma SQLite's full-text index runs itself). A file in the agent's output
# that tries ATTACH, other pragmas, schema changes... fails to load.
_SQL_ALLOWED = ("SQLITE_INSERT", "SQLITE_UPDATE", "SQLITE_DELETE", "SQLITE_READ",
                "SQLITE_SELECT", "SQLITE_FUNCTION", "SQLITE_TRANSACTION", "SQLITE_SAVEPOINT",
                "SQLITE_RECURSIVE")
_SQL_PRAGMAS = ("data_version",)


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)   # freezegun does not patch this


def _set_dumpable(flag: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, flag, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


def _import_appworld() -> dict:
    t0 = now()
    import appworld
    from appworld.apps import get_all_apps
    from appworld.common.utils import import_apis_module, import_models_module
    import appworld.evaluator  # noqa: F401
    import appworld.serve.environment  # noqa: F401  (AppWorld's environment server app)
    import uvicorn  # noqa: F401
    for app_name in get_all_apps():
        import_models_module(app_name)
        import_apis_module(app_name)
    _warm_up()
    return {"import_s": round(now() - t0, 3), "appworld_version": appworld.__version__}


# Imported lazily by AppWorld's server, APIs and evaluator on first use; a child serves one
# episode, so each lazy import would be paid per episode (trio's, at import, even runs the C
# compiler to find libpthread). Measured by listing the modules a first episode imports.
_LAZY = ("trio", "anyio._backends._asyncio", "dateutil.rrule", "dateutil.easter",
         "dateutil.zoneinfo", "jsonref", "libcst.native", "unittest.async_case", "shelve",
         "pytest")


def _warm_up() -> None:
    import uvicorn
    from appworld.apps.api_lib import set_local_date_and_time, unset_local_date_and_time
    from appworld.common.constants import DEFAULT_SYSTEM_DATETIME
    from appworld.serve.environment import app
    uvicorn.Config(app, log_level="warning").load()     # the HTTP protocol implementations
    for name in _LAZY:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # freezegun scans every module the first time a clock is frozen and caches the scan
    unset_local_date_and_time(set_local_date_and_time(DEFAULT_SYSTEM_DATETIME))


def _preload_api_docs(root: str) -> None:
    """AppWorld caches its API docs per process (not per data tree): load the docs of the tree
    under ``root`` once here, the way ``Task`` asks for them, so each child inherits them
    instead of parsing them again."""
    from appworld import update_root
    from appworld.apps import get_all_apps
    from appworld.collections.api_docs import ApiDocCollection
    from appworld.common.path_store import path_store
    ApiDocCollection.__dict__["load"].__func__.cache_clear()
    before = path_store.root
    update_root(root)
    try:
        ApiDocCollection.load(load_apps=tuple(get_all_apps(skip_admin=True)),
                              include_response_schemas=True)
    finally:
        update_root(before)


def zygote_main(role: str, control_fd: int) -> None:
    ctl = socket.socket(fileno=control_fd)
    info = _import_appworld()
    gc.collect()
    gc.freeze()          # children's collections skip the zygote's objects: no copy-on-write
    _set_dumpable(0)
    children: set = set()

    def reap_exited(signum=None, frame=None):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            children.discard(pid)

    signal.signal(signal.SIGCHLD, reap_exited)
    ctl.send(json.dumps(dict(info, ready=True, role=role, uid=os.getuid(),
                             pid=os.getpid())).encode())
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctl, 1 << 16, 4)
        except InterruptedError:
            continue
        if not data:
            return                                   # the manager closed the channel
        try:
            reply = _handle(json.loads(data), fds, ctl, children, reap_exited)
        except Exception as e:  # noqa: BLE001 - answered, the zygote goes on
            reply = {"error": f"{type(e).__name__}: {e}"}
        for fd in fds:
            os.close(fd)
        ctl.send(json.dumps(reply).encode())


def _handle(req: dict, fds: list, ctl: socket.socket, children: set, reap_exited) -> dict:
    op = req.get("op")
    if op == "ping":
        return {"ok": True}
    if op == "preload":
        t0 = now()
        _preload_api_docs(req.get("root", ROOT))
        gc.freeze()
        return {"ok": True, "preload_s": round(now() - t0, 3)}
    if op == "reap":
        # SIGKILL every process of this uid but this one (and bwrap's init): none of them runs
        # another instruction of its own; their exits are collected by reap_exited
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap_exited()
        return {"ok": True, "dying": len(children)}
    if op in ("spawn_worker", "spawn_evaluator"):
        if op == "spawn_worker" and len(fds) != 1:
            return {"error": "spawn_worker needs exactly one listening socket"}
        pid = os.fork()
        if pid == 0:
            try:
                ctl.close()
                if op == "spawn_worker":
                    worker_child(req, fds[0])
                else:
                    evaluator_child(req)
            except BaseException:  # noqa: BLE001 - logged to the child's own log
                traceback.print_exc()
            finally:
                os._exit(1)
        children.add(pid)
        return {"pid": pid}
    return {"error": f"unknown op {op!r}"}


def _child_setup(log: str, cpu_s: int, keep_fd: int = -1) -> None:
    """In a fresh child: own log, nothing inherited but ``keep_fd``, a CPU-time limit."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for other in range(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0]):
        if other != keep_fd:
            try:
                os.close(other)
            except OSError:
                pass
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_s), int(cpu_s)))
    zygote = os.getppid()

    def orphan_watch():  # a child never outlives its zygote
        while True:
            time.sleep(1.0)
            if os.getppid() != zygote:
                os._exit(0)

    threading.Thread(target=orphan_watch, daemon=True).start()


def worker_child(req: dict, listen_fd: int) -> None:
    """Serves AppWorld's own environment server on the listening socket (one episode)."""
    _child_setup(req["log"], req["cpu_s"], keep_fd=listen_fd)
    os.chdir(ROOT)
    from appworld import update_root
    update_root(ROOT)
    import uvicorn
    from appworld.serve.environment import app
    uvicorn.run(app, fd=listen_fd, log_level="warning", access_log=False)
    os._exit(0)


def _guard_changes_sql() -> None:
    """Loads database ``changes`` files under an SQLite authorizer that allows row operations
    only (AppWorld's own change files hold nothing else): the end state is written by the
    agent's process, so it is data to the evaluator, never a way to run ATTACH or PRAGMA."""
    import sqlite3
    from appworld.apps import model_lib
    allowed = {getattr(sqlite3, name) for name in _SQL_ALLOWED}

    def authorizer(action, arg1, arg2, *_):
        if action in allowed or (action == sqlite3.SQLITE_PRAGMA and arg1 in _SQL_PRAGMAS
                                 and arg2 is None):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY

    apply_changes = model_lib.apply_db_changes

    def guarded(connection, changes_file_path):
        connection.set_authorizer(authorizer)
        try:
            return apply_changes(connection, changes_file_path)
        finally:
            connection.set_authorizer(None)

    model_lib.apply_db_changes = guarded


def evaluator_child(req: dict) -> None:
    """AppWorld's evaluator on one task (ground truth, start state and the episode's end state
    in ``root``); writes ``{"tracker": ...}`` or ``{"error": ...}`` to ``result``."""
    _child_setup(req["log"], req["cpu_s"])
    root = req["root"]
    os.chdir(root)
    from appworld import update_root
    update_root(root)
    _guard_changes_sql()
    from appworld.evaluator import evaluate_task
    t0 = now()
    try:
        tracker = evaluate_task(task_id=req["task_id"], experiment_name=req["experiment"],
                                suppress_errors=True, save_report=False)
        out = {"tracker": tracker.to_dict(stats_only=False), "eval_s": round(now() - t0, 4)}
    except Exception as e:  # noqa: BLE001 - reported to the manager
        out = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
    tmp = req["result"] + ".part"
    with open(tmp, "w") as f:
        json.dump(out, f, default=str)
    os.rename(tmp, req["result"])
    os._exit(0)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    zp = sub.add_parser("zygote")
    zp.add_argument("--role", choices=("worker", "evaluator"), required=True)
    zp.add_argument("--control-fd", type=int, required=True)
    args = p.parse_args(argv)
    zygote_main(args.role, args.control_fd)


if __name__ == "__main__":
    main()
