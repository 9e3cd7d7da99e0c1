"""The AppWorld service: a pool of AppWorld's own environment servers behind one HTTP endpoint.

Runs INSIDE the AppWorld virtual environment (``scripts/appworld.sh start``); it imports only the
standard library and ``appworld``, never ``harness_jax``. Three kinds of process:

* the **manager** (``service.py manager``): an HTTP/1.1 server on a Unix socket (directory mode
  0700, so only this user can reach it). It owns episodes, leases one worker per episode, forwards
  each call, enforces the per-cell deadline, and restarts workers that die or hang;
* the **zygote** (``service.py zygote``): imports appworld and every app once, then forks workers
  on request, so a worker starts in well under a second instead of importing for ~10 s;
* the **workers**: each runs AppWorld's own environment server (``appworld.serve.environment``,
  the FastAPI app behind ``appworld serve environment``) with uvicorn on its own Unix socket,
  bound to one ``APPWORLD_ROOT``, under rlimits, in its own session. AppWorld keeps one task
  world per process (``AppWorld.initialize`` closes all others and freezes the clock process-
  wide), so parallel episodes need parallel workers: each episode's databases are the in-memory
  copies of its own worker.

Manager API (JSON bodies):
  GET    /health                      service, worker and episode state
  POST   /episodes                    {data_dir, task_id, max_interactions, timeout_seconds, ...}
                                      -> {episode_id, task: {instruction, supervisor, datetime}}
  POST   /episodes/<id>/execute       {code} -> {output, task_completed, elapsed_s}
                                      | {killed: true, output} (cell outlived its deadline)
                                      | {infra_error: true, error} (worker died / runtime error)
  POST   /episodes/<id>/evaluate      -> {tracker: AppWorld TestTracker.to_dict()}
  DELETE /episodes/<id>               closes the world, deletes its outputs, frees the worker
  POST   /shutdown                    stops workers, zygote and manager

A worker that dies mid-episode turns that episode into an infrastructure failure (never a task
failure) and is replaced; a cell that outlives ``timeout_seconds`` + grace (AppWorld's own SIGALRM
timeout should have stopped it, unless the code swallowed it) gets its worker killed and ends the
episode with ``killed``.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import http.server
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 1
GRACE_S = 15.0  # default: a cell may run this long past AppWorld's timeout before a kill
WORKER_START_TIMEOUT_S = 120.0
MARKER = "harness_jax-appworld-service"


def now() -> float:
    # CLOCK_MONOTONIC directly: freezegun (used by AppWorld) patches time.monotonic in modules
    # that import it, and workers run with a frozen clock.
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# ------------------------------------------------------------------------------------------------
# HTTP over Unix sockets (client side, used by the manager to reach workers)
# ------------------------------------------------------------------------------------------------
class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def uds_request(path: str, method: str, url: str, body=None, timeout: float = 30.0):
    """One HTTP request over a Unix socket; returns (status, parsed JSON or text)."""
    conn = UnixHTTPConnection(path, timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, url, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw.decode() or "null")
        except ValueError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


# ------------------------------------------------------------------------------------------------
# Zygote (imports appworld once, forks workers)
# ------------------------------------------------------------------------------------------------
def zygote_main() -> None:
    """Reads spawn requests (JSON lines) on stdin, answers {"pid"} or {"error"} on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies goes to the pipe
    t0 = now()
    import appworld  # noqa: F401
    from appworld.apps import get_all_apps
    from appworld.common.utils import import_apis_module, import_models_module
    import appworld.serve.environment  # noqa: F401  (AppWorld's environment server app)
    import uvicorn  # noqa: F401  (preloaded for the forked workers)
    for app_name in get_all_apps():
        import_models_module(app_name)
        import_apis_module(app_name)

    def reap(signum, frame):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    signal.signal(signal.SIGCHLD, reap)
    out.write(json.dumps({"ready": True, "import_s": round(now() - t0, 3),
                          "appworld_version": appworld.__version__}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            pid = os.fork()
        except Exception as e:  # noqa: BLE001
            out.write(json.dumps({"error": repr(e)}) + "\n")
            out.flush()
            continue
        if pid == 0:
            try:
                worker_child(req)
            finally:
                os._exit(1)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()


def worker_child(req: dict) -> None:
    """In the forked child: isolate, limit, then serve AppWorld's environment app."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if req.get("rlimit_as_mb"):
        lim = int(req["rlimit_as_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    root = req["root"]
    os.environ["APPWORLD_ROOT"] = root
    os.chdir(root)
    from appworld import update_root
    update_root(root)
    manager_pid = int(req["manager_pid"])

    def orphan_watch():  # a worker never outlives its manager
        while True:
            time.sleep(2.0)
            if not pid_alive(manager_pid):
                os._exit(0)

    threading.Thread(target=orphan_watch, daemon=True).start()
    import uvicorn
    from appworld.serve.environment import app
    uvicorn.run(app, uds=req["uds"], log_level="warning", access_log=False)
    os._exit(0)


class ZygoteHandle:
    """Manager-side handle of the zygote process (restarted when it dies)."""

    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    def _start(self) -> None:
        log = open(os.path.join(self.state_dir, "zygote.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "zygote"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, cwd=self.state_dir)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the AppWorld zygote exited while importing appworld; see "
                               f"{os.path.join(self.state_dir, 'zygote.log')}")
        self.info = json.loads(line)
        write_pid(self.state_dir, self.proc.pid, "zygote")

    def ensure(self) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def spawn(self, req: dict) -> int:
        with self.lock:
            for attempt in range(2):
                if self.proc is None or self.proc.poll() is not None:
                    self._start()
                try:
                    self.proc.stdin.write((json.dumps(req) + "\n").encode())
                    self.proc.stdin.flush()
                    line = self.proc.stdout.readline()
                    if not line:
                        raise BrokenPipeError("zygote closed its pipe")
                    reply = json.loads(line)
                    if "pid" not in reply:
                        raise RuntimeError(f"zygote could not fork: {reply}")
                    return int(reply["pid"])
                except (BrokenPipeError, OSError, ValueError):
                    self.proc = None
                    if attempt == 1:
                        raise
        raise RuntimeError("unreachable")

    def stop(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)


def write_pid(state_dir: str, pid: int, kind: str) -> None:
    d = os.path.join(state_dir, "pids")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, str(pid)), "w") as f:
        f.write(kind)


def drop_pid(state_dir: str, pid: int) -> None:
    try:
        os.remove(os.path.join(state_dir, "pids", str(pid)))
    except FileNotFoundError:
        pass


def kill_stale(state_dir: str) -> int:
    """Kills workers/zygotes a previous (crashed) manager left behind; returns how many."""
    d = os.path.join(state_dir, "pids")
    n = 0
    if not os.path.isdir(d):
        return 0
    for name in os.listdir(d):
        try:
            pid = int(name)
        except ValueError:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            cmd = b""
        if pid_alive(pid) and os.path.basename(__file__).encode() in cmd:
            kill_group(pid)
            n += 1
        drop_pid(state_dir, pid)
    return n


# ------------------------------------------------------------------------------------------------
# Manager
# ------------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, wid: int, root: str, uds: str, log: str):
        self.wid = wid
        self.root = root
        self.uds = uds
        self.log = log
        self.pid: int | None = None
        self.state = "starting"      # starting | idle | busy | dead
        self.episode: str | None = None
        self.episodes_served = 0

    def describe(self) -> dict:
        return {"id": self.wid, "pid": self.pid, "state": self.state, "root": self.root,
                "episode": self.episode, "episodes_served": self.episodes_served}


class Episode:
    def __init__(self, eid: str, worker: Worker, task_id: str, experiment: str, opts: dict,
                 root: str):
        self.eid = eid
        self.root = root
        self.worker = worker
        self.task_id = task_id
        self.experiment = experiment
        self.opts = opts
        self.lock = threading.Lock()
        self.state = "open"          # open | killed | infra_error | closed
        self.error: str | None = None
        self.last_used = now()
        self.cells = 0


class ServiceError(Exception):
    def __init__(self, status: int, payload: dict):
        super().__init__(payload.get("error", str(payload)))
        self.status = status
        self.payload = payload


class Manager:
    def __init__(self, state_dir: str, max_workers: int, rlimit_as_mb: int,
                 episode_ttl_s: float, keep_outputs: bool):
        self.state_dir = state_dir
        self.max_workers = max_workers
        self.rlimit_as_mb = rlimit_as_mb
        self.episode_ttl_s = episode_ttl_s
        self.keep_outputs = keep_outputs
        self.zygote = ZygoteHandle(state_dir)
        self.cv = threading.Condition()
        self.workers: list[Worker] = []
        self.episodes: dict[str, Episode] = {}
        self.next_wid = 0
        self.started = time.time()
        self.counters = {"episodes_opened": 0, "workers_spawned": 0, "workers_died": 0,
                         "cells_killed": 0, "infra_errors": 0}
        self.stopping = False

    # -- roots ----------------------------------------------------------------------------------
    def root_for(self, data_dir: str) -> str:
        """A private APPWORLD_ROOT whose ``data`` links to ``data_dir`` (read-only use) and whose
        ``experiments/outputs`` hold episode outputs, so the data tree is never written."""
        real = os.path.realpath(data_dir)
        if not os.path.isdir(os.path.join(real, "tasks")):
            raise ServiceError(400, {"error": f"data_dir {data_dir!r} is not an AppWorld data tree "
                                     "(no tasks/ directory)", "missing": "data"})
        key = hashlib.sha256(real.encode()).hexdigest()[:16]
        root = os.path.join(self.state_dir, "roots", key)
        link = os.path.join(root, "data")
        os.makedirs(os.path.join(root, "experiments", "outputs"), exist_ok=True)
        if not os.path.islink(link) or os.readlink(link) != real:
            tmp = f"{link}.{secrets.token_hex(4)}"
            os.symlink(real, tmp)
            os.replace(tmp, link)
        return root

    # -- workers --------------------------------------------------------------------------------
    def _spawn(self, root: str) -> Worker:
        """Creates a worker record (state starting); the caller waits with _wait_ready."""
        self.next_wid += 1
        wid = self.next_wid
        wdir = os.path.join(self.state_dir, "workers")
        os.makedirs(wdir, exist_ok=True)
        w = Worker(wid, root, os.path.join(wdir, f"w{wid}.sock"), os.path.join(wdir, f"w{wid}.log"))
        self.workers.append(w)
        self.counters["workers_spawned"] += 1
        return w

    def _start_worker(self, w: Worker) -> None:
        try:
            os.remove(w.uds)
        except FileNotFoundError:
            pass
        w.pid = self.zygote.spawn({"uds": w.uds, "root": w.root, "log": w.log,
                                   "rlimit_as_mb": self.rlimit_as_mb,
                                   "manager_pid": os.getpid()})
        write_pid(self.state_dir, w.pid, "worker")
        deadline = now() + WORKER_START_TIMEOUT_S
        while now() < deadline:
            if not pid_alive(w.pid):
                raise RuntimeError(f"AppWorld worker {w.wid} exited while starting; log {w.log}:\n"
                                   + tail(w.log))
            if os.path.exists(w.uds):
                try:
                    status, _ = uds_request(w.uds, "GET", "/", timeout=5)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"AppWorld worker {w.wid} did not answer within "
                           f"{WORKER_START_TIMEOUT_S:.0f} s; log {w.log}:\n" + tail(w.log))

    def _retire(self, w: Worker, reason: str) -> None:
        """Kills a worker and forgets it (caller holds self.cv)."""
        if w.pid is not None:
            kill_group(w.pid)
            drop_pid(self.state_dir, w.pid)
        w.state = "dead"
        if w in self.workers:
            self.workers.remove(w)
        self.cv.notify_all()

    def acquire(self, root: str, timeout_s: float) -> Worker:
        deadline = now() + timeout_s
        with self.cv:
            while True:
                if self.stopping:
                    raise ServiceError(503, {"error": "the service is shutting down"})
                for w in self.workers:
                    if w.state == "idle" and w.root == root:
                        w.state = "busy"
                        return w
                if len(self.workers) < self.max_workers:
                    w = self._spawn(root)
                    break
                other = [w for w in self.workers if w.state == "idle"]
                if other:  # re-bind an idle worker of another data tree
                    self._retire(other[0], "rebind")
                    w = self._spawn(root)
                    break
                left = deadline - now()
                if left <= 0:
                    raise ServiceError(503, {"error": f"all {self.max_workers} AppWorld workers are "
                                             "busy; raise --workers or close episodes",
                                             "busy": True})
                self.cv.wait(timeout=min(left, 1.0))
        try:
            self._start_worker(w)
        except Exception as e:
            with self.cv:
                self._retire(w, "start failed")
            raise ServiceError(500, {"error": str(e), "infra_error": True}) from e
        with self.cv:
            w.state = "busy"
        return w

    def release(self, w: Worker, healthy: bool) -> None:
        with self.cv:
            w.episode = None
            if healthy and w.state != "dead" and not self.stopping:
                w.state = "idle"
                self.cv.notify_all()
            else:
                self._retire(w, "unhealthy")

    # -- episodes -------------------------------------------------------------------------------
    def open_episode(self, body: dict) -> dict:
        for field in ("data_dir", "task_id"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise ServiceError(400, {"error": f"field {field!r} is required (a string)"})
        root = self.root_for(body["data_dir"])
        task_id = body["task_id"]
        task_dir = os.path.join(root, "data", "tasks", task_id)
        if not os.path.isfile(os.path.join(task_dir, "specs.json")):
            raise ServiceError(404, {"error": f"task {task_id!r} not found: {task_dir}/specs.json "
                                     "does not exist", "missing": "task"})
        opts = {
            "max_interactions": int(body.get("max_interactions", 1000)),
            "max_api_calls_per_interaction": int(body.get("max_api_calls_per_interaction", 1000)),
            "timeout_seconds": int(body.get("timeout_seconds", 100)),
            "raise_on_unsafe_syntax": bool(body.get("raise_on_unsafe_syntax", True)),
            "random_seed": body.get("random_seed", 100),
            "kill_grace_s": max(0.0, float(body.get("kill_grace_s", GRACE_S))),
        }
        w = self.acquire(root, float(body.get("acquire_timeout_s", 600)))
        eid = secrets.token_hex(8)
        experiment = f"hj-{eid}"
        args = {k: v for k, v in opts.items() if k != "kill_grace_s"}
        args.update(task_id=task_id, experiment_name=experiment, show_api_response_schemas=True)
        try:
            status, out = uds_request(w.uds, "POST", "/initialize", args, timeout=180)
        except OSError as e:
            self._worker_failed(w, f"initialize: {e!r}")
            raise ServiceError(502, {"error": f"AppWorld worker failed during initialize: {e!r}",
                                     "infra_error": True}) from e
        if status != 200:
            self.release(w, healthy=pid_alive(w.pid))
            raise ServiceError(502, {"error": f"AppWorld could not initialize task {task_id!r}: "
                                     f"{out}", "infra_error": True})
        ep = Episode(eid, w, task_id, experiment, opts, root)
        with self.cv:
            w.episode = eid
            w.episodes_served += 1
            self.episodes[eid] = ep
            self.counters["episodes_opened"] += 1
        task = out.get("output", {}) if isinstance(out, dict) else {}
        return {"episode_id": eid, "task": task, "worker": w.describe()}

    def _worker_failed(self, w: Worker, why: str) -> None:
        with self.cv:
            self.counters["workers_died"] += 1
            self._retire(w, why)

    def _episode(self, eid: str) -> Episode:
        with self.cv:
            ep = self.episodes.get(eid)
        if ep is None:
            raise ServiceError(404, {"error": f"no open episode {eid!r} (closed, expired after "
                                     f"{self.episode_ttl_s:.0f} s idle, or the service restarted)",
                                     "infra_error": True})
        return ep

    def _dead_episode(self, ep: Episode) -> dict:
        return {"error": ep.error or f"episode is {ep.state}", "state": ep.state,
                "infra_error": ep.state == "infra_error", "killed": ep.state == "killed"}

    def _call(self, ep: Episode, what: str, body: dict, timeout: float) -> dict:
        """One call to the episode's worker; a non-200 answer is an exception."""
        status, out = uds_request(ep.worker.uds, "POST", f"/{what}",
                                  dict(body, task_id=ep.task_id), timeout=timeout)
        if status != 200:
            raise RuntimeError(f"{what} answered HTTP {status}: {out}")
        return out

    def _infra_failure(self, ep: Episode, what: str, e: Exception) -> dict:
        """The worker died or AppWorld failed internally: the episode is an infrastructure
        failure and the worker is replaced."""
        w = ep.worker
        alive = w.pid is not None and pid_alive(w.pid)
        ep.state = "infra_error"
        ep.error = f"AppWorld worker {'failed' if alive else 'died'} during {what}: {e!r}"
        with self.cv:
            self.counters["infra_errors"] += 1
            if not alive:
                self.counters["workers_died"] += 1
            self._retire(w, f"{what} failed")
        return {"infra_error": True, "error": ep.error}

    def execute(self, eid: str, body: dict) -> dict:
        code = body.get("code")
        if not isinstance(code, str):
            raise ServiceError(400, {"error": "field 'code' is required (a string)"})
        ep = self._episode(eid)
        with ep.lock:
            ep.last_used = now()
            if ep.state != "open":
                return self._dead_episode(ep)
            t0 = now()
            try:
                output = self._call(ep, "execute", {"code": code}, timeout=ep.opts[
                    "timeout_seconds"] + ep.opts["kill_grace_s"])["output"]
                done = self._call(ep, "task_completed", {}, timeout=60)["output"]
            except socket.timeout:
                ep.state = "killed"
                ep.error = (f"the cell ran past {ep.opts['timeout_seconds']} s + "
                            f"{ep.opts['kill_grace_s']:.0f} s grace and its worker was killed")
                with self.cv:
                    self.counters["cells_killed"] += 1
                    self._retire(ep.worker, "runaway cell")
                return {"killed": True, "elapsed_s": now() - t0,
                        "output": "Execution failed. Traceback:\nExecution timed out after "
                                  f"{ep.opts['timeout_seconds']} seconds."}
            except Exception as e:  # noqa: BLE001 - worker died or AppWorld failed internally
                return self._infra_failure(ep, "execute", e)
            ep.cells += 1
            ep.last_used = now()
            return {"output": output, "task_completed": bool(done), "elapsed_s": now() - t0}

    def evaluate(self, eid: str) -> dict:
        ep = self._episode(eid)
        with ep.lock:
            ep.last_used = now()
            if ep.state != "open":
                return self._dead_episode(ep)
            try:
                out = self._call(ep, "evaluate", {"suppress_errors": True}, timeout=300)
            except Exception as e:  # noqa: BLE001
                return self._infra_failure(ep, "evaluate", e)
            return {"tracker": out["output"]}

    def close_episode(self, eid: str) -> dict:
        with self.cv:
            ep = self.episodes.pop(eid, None)
        if ep is None:
            return {"closed": False}
        with ep.lock:
            w = ep.worker
            healthy = ep.state == "open"
            if healthy:
                try:
                    status, _ = uds_request(w.uds, "POST", "/close", {"task_id": ep.task_id},
                                            timeout=60)
                    healthy = status == 200
                except OSError:
                    healthy = False
            ep.state = "closed"
            if not self.keep_outputs:
                shutil.rmtree(os.path.join(ep.root, "experiments", "outputs", ep.experiment),
                              ignore_errors=True)
            if w.state != "dead":
                self.release(w, healthy)
        return {"closed": True}

    def reap(self) -> None:
        """Closes idle episodes and forgets workers that died while idle (a thread)."""
        while not self.stopping:
            time.sleep(5.0)
            stale = []
            with self.cv:
                for ep in self.episodes.values():
                    if now() - ep.last_used > self.episode_ttl_s:
                        stale.append(ep.eid)
                for w in list(self.workers):
                    if w.state == "idle" and w.pid is not None and not pid_alive(w.pid):
                        self.counters["workers_died"] += 1
                        self._retire(w, "died idle")
            for eid in stale:
                try:
                    self.close_episode(eid)
                except Exception:  # noqa: BLE001
                    traceback.print_exc()

    def health(self) -> dict:
        with self.cv:
            return {"ok": True, "protocol": PROTOCOL_VERSION, "marker": MARKER, "pid": os.getpid(),
                    "appworld_version": self.zygote.info.get("appworld_version"),
                    "zygote_import_s": self.zygote.info.get("import_s"),
                    "max_workers": self.max_workers, "rlimit_as_mb": self.rlimit_as_mb,
                    "uptime_s": round(time.time() - self.started, 1),
                    "workers": [w.describe() for w in self.workers],
                    "episodes": len(self.episodes), "counters": dict(self.counters)}

    def shutdown(self) -> None:
        with self.cv:
            self.stopping = True
            for w in list(self.workers):
                self._retire(w, "shutdown")
        self.zygote.stop()


def tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    manager: Manager = None  # set in serve()

    def log_message(self, fmt, *args):  # quiet; errors are logged explicitly
        return

    def _send(self, status: int, payload) -> None:
        data = json.dumps(payload, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        if not n:
            return {}
        try:
            body = json.loads(self.rfile.read(n))
        except ValueError as e:
            raise ServiceError(400, {"error": f"the request body is not JSON: {e}"}) from e
        if not isinstance(body, dict):
            raise ServiceError(400, {"error": "the request body must be a JSON object"})
        return body

    def _route(self, method: str) -> None:
        m = self.manager
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        try:
            body = self._body() if method in ("POST", "DELETE") else {}
            if method == "GET" and parts == ["health"]:
                return self._send(200, m.health())
            if method == "POST" and parts == ["episodes"]:
                return self._send(200, m.open_episode(body))
            if len(parts) == 3 and parts[0] == "episodes" and method == "POST":
                if parts[2] == "execute":
                    return self._send(200, m.execute(parts[1], body))
                if parts[2] == "evaluate":
                    return self._send(200, m.evaluate(parts[1]))
            if len(parts) == 2 and parts[0] == "episodes" and method == "DELETE":
                return self._send(200, m.close_episode(parts[1]))
            if method == "POST" and parts == ["shutdown"]:
                self._send(200, {"stopping": True})
                threading.Thread(target=_shutdown_soon, args=(m,), daemon=True).start()
                return None
            return self._send(404, {"error": f"no route {method} {self.path}"})
        except ServiceError as e:
            return self._send(e.status, e.payload)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            return self._send(500, {"error": f"service error: {e!r}", "infra_error": True})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")


class UnixThreadingHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self):
        sock, _ = super().get_request()
        return sock, ("local", 0)


_SERVER = None


def _shutdown_soon(m: Manager) -> None:
    time.sleep(0.2)
    m.shutdown()
    if _SERVER is not None:
        _SERVER.shutdown()


def manager_main(args) -> None:
    global _SERVER
    state_dir = os.path.abspath(args.state_dir)
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o700)
    stale = kill_stale(state_dir)
    if stale:
        print(f"killed {stale} stale AppWorld processes of a previous service", flush=True)
    shutil.rmtree(os.path.join(state_dir, "workers"), ignore_errors=True)
    m = Manager(state_dir, args.workers, args.rlimit_as_mb, args.episode_ttl_s, args.keep_outputs)
    m.zygote.ensure()
    Handler.manager = m
    sock = os.path.abspath(args.socket)
    try:
        os.remove(sock)
    except FileNotFoundError:
        pass
    _SERVER = UnixThreadingHTTPServer(sock, Handler)
    os.chmod(sock, 0o600)
    threading.Thread(target=m.reap, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: threading.Thread(target=_shutdown_soon, args=(m,),
                                                         daemon=True).start())
    with open(os.path.join(state_dir, "service.pid"), "w") as f:
        f.write(str(os.getpid()))
    print(f"AppWorld service ready on {sock} (appworld {m.zygote.info.get('appworld_version')}, "
          f"zygote import {m.zygote.info.get('import_s')} s, max {args.workers} workers)",
          flush=True)
    try:
        _SERVER.serve_forever(poll_interval=0.5)
    finally:
        m.shutdown()
        for p in (sock, os.path.join(state_dir, "service.pid")):
            try:
                os.remove(p)
            except FileNotFoundError:
                pass


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    mp = sub.add_parser("manager")
    mp.add_argument("--socket", required=True)
    mp.add_argument("--state-dir", required=True)
    mp.add_argument("--workers", type=int, default=4)
    mp.add_argument("--rlimit-as-mb", type=int, default=4096)
    mp.add_argument("--episode-ttl-s", type=float, default=1800.0)
    mp.add_argument("--keep-outputs", action="store_true")
    sub.add_parser("zygote")
    args = p.parse_args(argv)
    if args.cmd == "zygote":
        zygote_main()
    else:
        manager_main(args)


if __name__ == "__main__":
    main()
