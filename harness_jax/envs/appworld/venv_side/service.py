"""The AppWorld service: AppWorld's own environment servers, one sandboxed process per episode,
behind one HTTP endpoint.

Runs INSIDE the AppWorld virtual environment (``scripts/appworld.sh start``); imports only the
standard library, never ``harness_jax`` or ``appworld`` (its sandboxes do: ``pool.py``,
``inside.py``). The **manager** (this file) is an HTTP/1.1 server on a Unix socket (directory
mode 0700: only this user can reach it). It owns episodes, leases one worker slot per episode,
forwards each call, enforces the per-cell deadline, and ties every episode to its client.

Isolation (``pool.py`` has the details):

* every **worker slot** is a bubblewrap sandbox (the SWE family's machinery, ``envs/bwrap.py``:
  new namespaces, no network, no host file system but the read-only system and Python, an
  unprivileged uid of its own, rlimits) whose zygote forks a fresh child per episode, running
  AppWorld's environment server with its unsafe-syntax guard as shipped;
* an episode's root holds only what AppWorld needs for that task: the base databases, the API
  docs, the task's ``specs.json`` and ``dbs/`` (read-only), plus its own writable outputs; no
  other task, no task index, no ground truth, no answers, no generator sidecars; worlds are
  initialized with ``load_ground_truth=False``;
* AppWorld's **evaluator** runs in a separate sandbox (own uid) on the task's ground truth and a
  copy of the episode's end state, so code in a cell can neither read the answer nor patch the
  evaluator.

Leases: an episode belongs to the connection that opened it (``POST /episodes``). It is closed
and its worker freed when that connection closes, when the client process behind it (SO_PEERCRED)
exits, or after ``idle_limit_s`` without a request (the service's ``--idle-limit-s``, lowered per
episode by ``idle_timeout_s``). When every worker is busy, opening fails after
``acquire_timeout_s`` with an error naming each holder (episode, task, client pid and command).

Manager API (JSON bodies):
  GET    /health                      service, worker, episode and sandbox state
  POST   /episodes                    {data_dir, task_id, max_interactions, timeout_seconds, ...}
                                      -> {episode_id, task: {instruction, supervisor, datetime},
                                          worker, timings}
  POST   /episodes/<id>/execute       {code} -> {output, task_completed, elapsed_s}
                                      | {killed: true, output} (cell outlived its deadline, or
                                        the episode's files outgrew the disk limit)
                                      | {infra_error: true, error} (worker died / runtime error)
  POST   /episodes/<id>/evaluate      -> {tracker: AppWorld TestTracker.to_dict(), timings}
  DELETE /episodes/<id>               kills the episode's processes, empties its files (after
                                      answering)
  POST   /shutdown                    stops the sandboxes and the manager
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import http.client
import http.server
import json
import os
import re
import secrets
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback

from pool import (Busy, EvaluationError, Evaluator, Limits, SandboxError, SlotPool, bwrap,
                  copy_untrusted, now, pid_alive)

PROTOCOL_VERSION = 2
GRACE_S = 15.0  # default: a cell may run this long past AppWorld's timeout before a kill
WORKER_START_TIMEOUT_S = 120.0
MARKER = "harness_jax-appworld-service"
TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


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


def _proc_stat(pid: int):
    """(state, start time) of a process, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


class Lease:
    """A client connection and the process behind it (SO_PEERCRED, checked against pid reuse
    by the process's start time)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.closed = False
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            self.pid = struct.unpack("3i", creds)[0]
        except OSError:
            self.pid = 0
        st = _proc_stat(self.pid) if self.pid > 0 else None
        self.start = st[1] if st else None
        self.cmd = _cmdline(self.pid) if self.pid > 0 else "?"

    def process_gone(self) -> bool:
        if self.pid <= 0 or self.start is None:
            return False                  # a client in another pid namespace: no pid check
        st = _proc_stat(self.pid)
        return st is None or st[0] in ("Z", "X") or st[1] != self.start

    def hung_up(self) -> bool:
        if self.closed:
            return True
        try:
            fd = self.sock.fileno()
        except OSError:
            return True
        if fd < 0:
            return True
        p = select.poll()
        p.register(fd, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        return bool(p.poll(0))

    def describe(self) -> str:
        return f"client pid {self.pid} ({self.cmd})" if self.pid > 0 else "a client"


class Episode:
    def __init__(self, eid: str, slot, task_id: str, data_dir: str, opts: dict, lease,
                 idle_limit_s: float):
        self.eid, self.slot, self.task_id, self.data_dir = eid, slot, task_id, data_dir
        self.experiment = f"hj-{eid}"
        self.opts, self.lease, self.idle_limit_s = opts, lease, idle_limit_s
        self.lock = threading.Lock()
        self.state = "open"          # open | killed | infra_error | abandoned
        self.error: str | None = None
        self.opened = self.last_used = now()
        self.inflight = 0
        self.cells = 0

    def describe(self) -> dict:
        t = now()
        return {"id": self.eid, "task_id": self.task_id, "state": self.state, "cells": self.cells,
                "worker": self.slot.index, "age_s": round(t - self.opened, 1),
                "idle_s": round(t - self.last_used, 1), "idle_limit_s": self.idle_limit_s,
                "holder_pid": self.lease.pid if self.lease else None,
                "holder": self.lease.cmd if self.lease else None}

    def holder_line(self) -> str:
        t = now()
        who = self.lease.describe() if self.lease else "a client"
        return (f"worker {self.slot.index} holds episode {self.eid} (task {self.task_id}) for "
                f"{who}, open {t - self.opened:.0f} s, idle {t - self.last_used:.0f} s")


class ServiceError(Exception):
    def __init__(self, status: int, payload: dict):
        super().__init__(payload.get("error", str(payload)))
        self.status = status
        self.payload = payload


@dataclasses.dataclass
class Config:
    state_dir: str
    max_workers: int = 4
    limits: Limits = Limits()
    idle_limit_s: float = 900.0
    uid_base: int = bwrap.APPWORLD_UID_BASE
    prewarm: int = 1


class Manager:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.pool = SlotPool(cfg.state_dir, cfg.max_workers, cfg.uid_base, cfg.limits)
        self.evaluator = Evaluator(cfg.state_dir, cfg.uid_base, cfg.limits)
        self.cv = threading.Condition()
        self.episodes: dict[str, Episode] = {}
        self.ended: collections.OrderedDict = collections.OrderedDict()  # eid -> why (recent)
        self.started = time.time()
        self.counters = {"episodes_opened": 0, "workers_spawned": 0, "workers_died": 0,
                         "cells_killed": 0, "infra_errors": 0, "evaluations": 0,
                         "released_closed": 0, "released_connection": 0,
                         "released_client_exit": 0, "released_idle": 0}
        self.stopping = False

    def start(self) -> None:
        self.evaluator.start()
        self.pool.prewarm(self.cfg.prewarm)

    # -- episodes -------------------------------------------------------------------------------
    def _options(self, body: dict) -> tuple:
        for field in ("data_dir", "task_id"):
            if not isinstance(body.get(field), str) or not body[field]:
                raise ServiceError(400, {"error": f"field {field!r} is required (a string)"})
        task_id, data_dir = body["task_id"], os.path.realpath(body["data_dir"])
        if not TASK_ID.match(task_id):
            raise ServiceError(400, {"error": f"task_id {task_id!r} is not an AppWorld task id "
                                     "(letters, digits, '_', '.', '-')", "missing": "task"})
        if not os.path.isdir(os.path.join(data_dir, "tasks")):
            raise ServiceError(400, {"error": f"data_dir {body['data_dir']!r} is not an AppWorld "
                                     "data tree (no tasks/ directory)", "missing": "data"})
        task_dir = os.path.join(data_dir, "tasks", task_id)
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
        idle = float(body.get("idle_timeout_s") or 0)
        idle = min(idle, self.cfg.idle_limit_s) if idle > 0 else self.cfg.idle_limit_s
        return task_id, data_dir, opts, idle

    def open_episode(self, body: dict, lease) -> dict:
        task_id, data_dir, opts, idle = self._options(body)
        t0 = now()
        try:
            slot = self.pool.acquire(float(body.get("acquire_timeout_s", 600)), self._holders)
        except Busy as e:
            raise ServiceError(503, {"error": str(e), "busy": True, "infra_error": True,
                                     "holders": self._holders()}) from e
        except SandboxError as e:
            raise ServiceError(503, {"error": f"no AppWorld worker could start: {e}",
                                     "infra_error": True}) from e
        timings = {"acquire_s": now() - t0}
        eid = secrets.token_hex(8)
        args = {k: v for k, v in opts.items() if k != "kill_grace_s"}
        args.update(task_id=task_id, experiment_name=f"hj-{eid}", show_api_response_schemas=True,
                    load_ground_truth=False)
        try:
            t = now()
            slot.prepare(data_dir, task_id)
            timings["prepare_s"] = now() - t
            t = now()
            slot.spawn(WORKER_START_TIMEOUT_S, self._wait_ready)
            timings["spawn_s"] = now() - t
            with self.cv:
                self.counters["workers_spawned"] += 1
            t = now()
            status, out = uds_request(slot.sock, "POST", "/initialize", args, timeout=180)
            timings["initialize_s"] = now() - t
            if status != 200:
                raise RuntimeError(f"AppWorld could not initialize task {task_id!r}: {out}")
        except Exception as e:  # noqa: BLE001 - the slot is cleaned, the error reported
            log = slot.log_tail()
            slot.end()
            self.pool.release(slot)
            raise ServiceError(502, {"error": f"AppWorld worker failed to open task {task_id!r}: "
                                     f"{e}\nworker log:\n{log}", "infra_error": True}) from e
        ep = Episode(eid, slot, task_id, data_dir, opts, lease, idle)
        with self.cv:
            slot.episode = eid
            slot.episodes_served += 1
            self.episodes[eid] = ep
            self.counters["episodes_opened"] += 1
        task = out.get("output", {}) if isinstance(out, dict) else {}
        timings = {k: round(v, 4) for k, v in timings.items()}
        return {"episode_id": eid, "task": task, "worker": slot.describe(), "timings": timings,
                "protocol": PROTOCOL_VERSION}

    @staticmethod
    def _wait_ready(sock: str, deadline: float) -> None:
        while True:
            try:
                status, _ = uds_request(sock, "GET", "/", timeout=max(1.0, deadline - now()))
                if status == 200:
                    return
            except ConnectionRefusedError as e:
                raise RuntimeError("the episode's worker process exited while starting") from e
            except OSError:
                pass
            if now() > deadline:
                raise RuntimeError(f"the episode's worker did not answer within "
                                   f"{WORKER_START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def _holders(self) -> list:
        with self.cv:
            return [ep.holder_line() for ep in self.episodes.values()]

    def _episode(self, eid: str) -> Episode:
        with self.cv:
            ep = self.episodes.get(eid)
            why = self.ended.get(eid)
        if ep is None:
            reason = why or "closed, or the service restarted"
            raise ServiceError(404, {"error": f"no open episode {eid!r} ({reason})",
                                     "infra_error": True})
        return ep

    def _dead_episode(self, ep: Episode) -> dict:
        return {"error": ep.error or f"episode is {ep.state}", "state": ep.state,
                "infra_error": ep.state in ("infra_error", "abandoned"),
                "killed": ep.state == "killed"}

    def _infra_failure(self, ep: Episode, what: str, e: Exception) -> dict:
        """The worker died, AppWorld failed internally, or the evaluator failed: the episode is
        an infrastructure failure and its processes are killed."""
        if ep.state == "abandoned":
            return {"infra_error": True, "error": ep.error}
        pid = ep.slot.child_pid
        deadline = now() + 1.0                # a dying process closes its sockets before it
        alive = pid is not None and pid_alive(pid)     # turns into a zombie: give it a moment
        while alive and now() < deadline:
            time.sleep(0.02)
            alive = pid_alive(pid)
        ep.state = "infra_error"
        ep.error = f"AppWorld {what} failed{'' if alive else ' (its worker died)'}: {e!r}"
        with self.cv:
            self.counters["infra_errors"] += 1
            self.counters["workers_died"] += not alive
        ep.slot.kill_children()
        return {"infra_error": True, "error": ep.error}

    def _kill_episode(self, ep: Episode, why: str) -> None:
        ep.state = "killed"
        ep.error = why
        with self.cv:
            self.counters["cells_killed"] += 1
        ep.slot.kill_children()

    def execute(self, eid: str, body: dict) -> dict:
        code = body.get("code")
        if not isinstance(code, str):
            raise ServiceError(400, {"error": "field 'code' is required (a string)"})
        ep = self._episode(eid)
        with ep.lock:
            if ep.state != "open":
                return self._dead_episode(ep)
            ep.inflight += 1
            t0 = ep.last_used = now()
            try:
                return self._execute(ep, code, t0)
            finally:
                ep.inflight -= 1
                ep.last_used = now()

    def _execute(self, ep: Episode, code: str, t0: float) -> dict:
        limit = ep.opts["timeout_seconds"] + ep.opts["kill_grace_s"]
        try:
            output = self._call(ep, "execute", {"code": code}, limit)["output"]
            done = self._call(ep, "task_completed", {}, 60)["output"]
        except socket.timeout:
            self._kill_episode(ep, f"the cell ran past {ep.opts['timeout_seconds']} s + "
                                   f"{ep.opts['kill_grace_s']:.0f} s grace and its worker was "
                                   "killed")
            return {"killed": True, "elapsed_s": now() - t0,
                    "output": "Execution failed. Traceback:\nExecution timed out after "
                              f"{ep.opts['timeout_seconds']} seconds."}
        except Exception as e:  # noqa: BLE001 - worker died or AppWorld failed internally
            return self._infra_failure(ep, "execute", e)
        used = ep.slot.disk_used()
        if used > self.cfg.limits.disk_mb << 20:
            self._kill_episode(ep, f"the episode's files grew to {used >> 20} MB, over its "
                                   f"{self.cfg.limits.disk_mb} MB limit; its worker was killed")
            return {"killed": True, "elapsed_s": now() - t0,
                    "output": "Execution failed. Traceback:\nThe episode's files exceed its "
                              f"disk limit ({self.cfg.limits.disk_mb} MB)."}
        ep.cells += 1
        return {"output": output, "task_completed": bool(done), "elapsed_s": now() - t0}

    def _call(self, ep: Episode, what: str, body: dict, timeout: float) -> dict:
        """One call to the episode's worker; a non-200 answer is an exception."""
        status, out = uds_request(ep.slot.sock, "POST", f"/{what}",
                                  dict(body, task_id=ep.task_id), timeout=timeout)
        if status != 200:
            raise RuntimeError(f"{what} answered HTTP {status}: {out}")
        return out

    def evaluate(self, eid: str) -> dict:
        ep = self._episode(eid)
        with ep.lock:
            if ep.state != "open":
                return self._dead_episode(ep)
            ep.inflight += 1
            t0 = now()
            try:
                out = self.evaluator.evaluate(
                    ep.data_dir, ep.task_id, ep.experiment, self._end_state_copier(ep),
                    timeout_s=300)
            except (EvaluationError, SandboxError, OSError, ValueError) as e:
                return self._infra_failure(ep, "evaluation", e)
            finally:
                ep.inflight -= 1
                ep.last_used = now()
            with self.cv:
                self.counters["evaluations"] += 1
            return {"tracker": out["tracker"], "timings": {
                "prepare_s": out["prepare_s"], "eval_s": out.get("eval_s"),
                "total_s": round(now() - t0, 4)}}

    def _end_state_copier(self, ep: Episode):
        slot, limit = ep.slot, self.cfg.limits.disk_mb << 20
        return lambda dst: copy_untrusted(slot.outputs, [ep.experiment, "tasks", ep.task_id,
                                                         "dbs"], dst, limit)

    def _end(self, ep: Episode, why: str, kind: str) -> bool:
        """Removes an open episode from the table (once); False when it was already gone."""
        with self.cv:
            if self.episodes.get(ep.eid) is not ep:
                return False
            del self.episodes[ep.eid]
            self.ended[ep.eid] = why
            while len(self.ended) > 4096:
                self.ended.popitem(last=False)
            self.counters[f"released_{kind}"] += 1
        return True

    def _free(self, ep: Episode) -> None:
        with ep.lock:
            ep.slot.end()
            self.pool.release(ep.slot)

    def close_episode(self, eid: str) -> dict:
        """Answers at once; the episode's processes and files go in the background (its worker
        counts as freeing, so a new episode waits for it rather than starting another)."""
        with self.cv:
            ep = self.episodes.get(eid)
        if ep is None or not self._end(ep, "closed by its client", "closed"):
            return {"closed": False}
        self.pool.freeing(ep.slot)
        threading.Thread(target=self._free, args=(ep,), daemon=True).start()
        return {"closed": True}

    def abandon(self, ep: Episode, kind: str, why: str) -> None:
        """Ends an episode its client left: kills its processes at once (so an in-flight cell
        stops), then frees its worker."""
        if not self._end(ep, f"closed by the service: {why}", kind):
            return
        ep.state, ep.error = "abandoned", f"the episode was closed by the service: {why}"
        print(f"episode {ep.eid} (task {ep.task_id}) released: {why}", flush=True)
        self.pool.freeing(ep.slot)
        ep.slot.kill_children()
        threading.Thread(target=self._free, args=(ep,), daemon=True).start()

    def connection_closed(self, lease: Lease) -> None:
        lease.closed = True
        with self.cv:
            mine = [ep for ep in self.episodes.values() if ep.lease is lease]
        for ep in mine:
            self.abandon(ep, "connection", "its client closed the connection")

    def watch(self) -> None:
        """Frees episodes whose client left or went silent; notices dead idle sandboxes."""
        while not self.stopping:
            time.sleep(0.5)
            with self.cv:
                eps = list(self.episodes.values())
            for ep in eps:
                lease = ep.lease
                try:
                    if lease is not None and lease.process_gone():
                        self.abandon(ep, "client_exit", f"its client process {lease.pid} exited")
                    elif lease is not None and lease.hung_up():
                        self.abandon(ep, "connection", "its client closed the connection")
                    elif ep.inflight == 0 and now() - ep.last_used > ep.idle_limit_s:
                        self.abandon(ep, "idle", f"no request for {now() - ep.last_used:.0f} s "
                                                 f"(idle limit {ep.idle_limit_s:.0f} s)")
                except Exception:  # noqa: BLE001 - the watcher never dies
                    traceback.print_exc()
            self.pool.health_check()

    def health(self) -> dict:
        info = self.evaluator.sandbox.info if self.evaluator.sandbox else {}
        with self.cv:
            return {"ok": True, "protocol": PROTOCOL_VERSION, "marker": MARKER, "pid": os.getpid(),
                    "appworld_version": info.get("appworld_version"),
                    "zygote_import_s": info.get("import_s"),
                    "max_workers": self.cfg.max_workers, "rlimit_as_mb": self.cfg.limits.as_mb,
                    "idle_limit_s": self.cfg.idle_limit_s,
                    "sandbox": {"kind": "bubblewrap", "uid_base": self.cfg.uid_base,
                                "limits": dataclasses.asdict(self.cfg.limits),
                                "evaluator_uid": info.get("uid"),
                                "sandboxes_started": self.pool.started},
                    "uptime_s": round(time.time() - self.started, 1),
                    "workers": [s.describe() for s in self.pool.slots],
                    "episodes": len(self.episodes),
                    "episode_list": [ep.describe() for ep in self.episodes.values()],
                    "counters": dict(self.counters)}

    def shutdown(self) -> None:
        self.stopping = True
        self.pool.stop()
        self.evaluator.stop()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    manager: Manager = None  # set in serve()

    def log_message(self, fmt, *args):  # quiet; errors are logged explicitly
        return

    def setup(self):
        super().setup()
        self.lease = Lease(self.connection)

    def handle(self):
        try:
            super().handle()
        finally:
            self.manager.connection_closed(self.lease)

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
                return self._send(200, m.open_episode(body, self.lease))
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
    if not 1 <= args.workers <= 63:
        raise SystemExit(f"--workers {args.workers}: between 1 and 63")
    limits = Limits(as_mb=args.rlimit_as_mb, disk_mb=args.disk_mb)
    uid_base = bwrap.APPWORLD_UID_BASE + (os.getpid() % 1024) * 64
    m = Manager(Config(state_dir, args.workers, limits, args.idle_limit_s, uid_base,
                       min(args.prewarm, args.workers)))
    try:
        m.start()
    except SandboxError as e:
        raise SystemExit(f"the AppWorld service cannot start its sandbox: {e}") from e
    Handler.manager = m
    sock = os.path.abspath(args.socket)
    try:
        os.remove(sock)
    except FileNotFoundError:
        pass
    _SERVER = UnixThreadingHTTPServer(sock, Handler)
    os.chmod(sock, 0o600)
    threading.Thread(target=m.watch, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, f: threading.Thread(target=_shutdown_soon, args=(m,),
                                                         daemon=True).start())
    with open(os.path.join(state_dir, "service.pid"), "w") as f:
        f.write(str(os.getpid()))
    info = m.evaluator.sandbox.info
    print(f"AppWorld service ready on {sock} (appworld {info.get('appworld_version')}, "
          f"sandbox import {info.get('import_s')} s, max {args.workers} workers, uids "
          f"{uid_base}..{uid_base + args.workers}, idle limit {args.idle_limit_s:.0f} s)",
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
    mp.add_argument("--idle-limit-s", type=float, default=900.0,
                    help="an episode without a request for this long is closed")
    mp.add_argument("--disk-mb", type=int, default=256,
                    help="an episode's writable files (outputs, scratch); checked per cell")
    mp.add_argument("--prewarm", type=int, default=1,
                    help="worker sandboxes started with the service (the rest on demand)")
    args = p.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    manager_main(args)


if __name__ == "__main__":
    main()
