"""The driver's pool of long-lived episode workers (``harness.workers`` describes the mechanism):
the listener workers connect back to, objects shared with them, the job scheduler (least loaded
worker with room, per-key limits), the messages of each connection (generation is proxied through
each job's ``Job``), and lost workers (their jobs fail with ``WorkerLost``; replacements start up
to ``max_restarts``). Starting and stopping workers is the launcher's (``launchers``)."""
from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import dataclasses
import itertools
import logging
import pickle
import secrets
import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any, Callable, Optional

from harness_jax.harness.workers import launchers
from harness_jax.harness.workers.jobs import Job
from harness_jax.harness.workers.launchers import Spawned
from harness_jax.harness.workers.shared import SharedObjects
from harness_jax.harness.workers.wire import (PICKLE, RemoteError, Ref, WorkerLost, fail, no_delay,
                                              resolve)
from harness_jax.sampling.types import RolloutEngine

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Slot:
    """The driver's record of one worker incarnation."""

    wid: int
    proc: Spawned                        # what the launcher started
    started: float
    conn: Optional[Connection] = None
    pid: Optional[int] = None
    host: str = ""
    alive: bool = True
    jobs: set = dataclasses.field(default_factory=set)
    limits: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    has: set = dataclasses.field(default_factory=set)
    send_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class WorkerPool:
    """Long-lived episode workers (module docstring).

    Args:
      backend: ``"processes"`` or ``"ray"``.
      workers: worker processes / actors.
      slots: jobs in flight per worker (a job is usually one episode).
      ray_address: ``""`` starts a local Ray (this machine's CPUs, loopback only); else the
        address given to ``ray.init`` (``"auto"``: the running cluster).
      ray_cpus: CPUs each Ray worker actor reserves.
      host: the address workers connect back to (default: 127.0.0.1 for local workers, the
        driver node's IP on a Ray cluster).
      start_timeout_s: a worker that has not connected by then counts as lost.
      max_restarts: replacements started for lost workers (default ``4 * workers + 4``).
    """

    remote = True

    def __init__(self, backend: str = "processes", workers: int = 2, slots: int = 16, *,
                 ray_address: str = "", ray_cpus: float = 1.0, host: Optional[str] = None,
                 start_timeout_s: float = 300.0, max_restarts: Optional[int] = None):
        launcher = launchers.make(backend, ray_address, ray_cpus)
        if workers < 1:
            raise ValueError(f"WorkerPool workers={workers}: need at least 1")
        if slots < 1:
            raise ValueError(f"WorkerPool slots={slots}: need at least 1")
        self.backend = backend
        self.workers = int(workers)
        self.slots = int(slots)
        self.host = host
        self.start_timeout_s = float(start_timeout_s)
        self.max_restarts = 4 * self.workers + 4 if max_restarts is None else int(max_restarts)
        self.stats = collections.Counter()       # jobs, done, lost_jobs, workers_lost, restarts
        self._lock = threading.RLock()
        self._slots: dict[int, _Slot] = {}
        self._jobs: dict[int, Job] = {}
        self._pending: collections.deque = collections.deque()
        self._shared = SharedObjects(backend)
        self._launcher = launcher
        self._ids = itertools.count()
        self._wids = itertools.count()
        self._started = False
        self._closing = False
        self._listener: Optional[Listener] = None
        self._authkey = secrets.token_bytes(32)

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "WorkerPool":
        """Starts the listener and the workers (idempotent; ``run`` calls it)."""
        with self._lock:
            if self._started:
                return self
            if self._closing:
                raise RuntimeError("WorkerPool is closed")
            host = self.host or self._launcher.default_host()
            self._listener = Listener((host, 0), authkey=self._authkey)
            self._started = True
            threading.Thread(target=self._accept_forever, daemon=True,
                             name="workerpool-accept").start()
            self._monitor = threading.Thread(target=self._monitor_forever, daemon=True,
                                             name="workerpool-monitor")
            self._monitor.start()
            for _ in range(self.workers):
                self._spawn()
            atexit.register(self.close)
        return self

    def _spawn(self) -> None:
        wid = next(self._wids)
        self._slots[wid] = _Slot(wid, self._launcher.spawn(wid, self._listener.address, self._authkey),
                                 time.monotonic())

    def close(self) -> None:
        """Stops every worker; jobs still pending or running fail with ``WorkerLost``."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            atexit.unregister(self.close)
            slots = list(self._slots.values())
            jobs = list(self._jobs.values())
            self._jobs.clear()
            self._pending.clear()
        for job in jobs:
            fail(job.future, WorkerLost("the worker pool was closed"))
        for s in slots:
            if s.conn is not None:
                try:
                    with s.send_lock:
                        s.conn.send_bytes(pickle.dumps(("stop",), PICKLE))
                except OSError:
                    pass
        for s in slots:
            self._stop_handle(s, graceful=True)
        if self._listener is not None:
            try:
                self._listener.close()
            except OSError:
                pass
        monitor = getattr(self, "_monitor", None)
        if monitor is not None and monitor is not threading.current_thread():
            # no Ray call may follow the shutdown: one would auto-connect to the stopped cluster,
            # and Ray ends the process when it cannot reach that cluster's GCS within 60 s
            monitor.join(timeout=10)
        self._launcher.close()

    def _stop_handle(self, s: _Slot, graceful: bool) -> None:
        self._launcher.stop(s.proc, graceful)
        if s.conn is not None:
            try:
                s.conn.close()
            except OSError:
                pass

    def __enter__(self) -> "WorkerPool":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- shared objects ---------------------------------------------------------------------------
    def share(self, obj: Any, deps: tuple = ()) -> Ref:
        """Ships ``obj`` to each worker once, with the first job that needs it (pickled now, so
        an unpicklable object fails here). Sharing the same object again returns the same
        ``Ref``. ``deps``: other ``Ref``s a job using this one also needs (shipped with it)."""
        return self._shared.share(obj, deps)

    def drop(self, ref: Ref) -> None:
        """Forgets a shared object here and on every worker (closing what workers built from
        it with ``ctx.cached(ref.key, ...)``)."""
        self._shared.forget(ref)
        with self._lock:
            targets = [s for s in self._slots.values() if ref.key in s.has and s.conn]
            for s in targets:
                s.has.discard(ref.key)
        for s in targets:
            self._send(s, ("drop", ref.key))

    # -- jobs -------------------------------------------------------------------------------------
    def submit(self, fn: Callable, *args, engine: Optional[RolloutEngine] = None,
               loop: Optional[asyncio.AbstractEventLoop] = None,
               limit: Optional[tuple] = None) -> concurrent.futures.Future:
        """Runs ``fn(ctx, *args)`` in a worker; the future gets its result, ``RemoteError`` if it
        raised, ``WorkerLost`` if its worker was lost. ``engine``: the driver engine behind
        ``ctx.engine()``, called on ``loop``. ``limit=(key, n)``: at most ``n`` jobs with this
        key at once per worker. Cancelling the future cancels the job."""
        if engine is not None and loop is None:
            raise ValueError("submit(engine=...) needs the event loop the engine runs on "
                             "(use `await pool.run(...)` from async code)")
        if limit is not None and (len(limit) != 2 or int(limit[1]) < 1):
            raise ValueError(f"limit={limit!r}: give (key, n) with n >= 1")
        refs = tuple(a for a in args if isinstance(a, Ref))
        try:
            blob = pickle.dumps((fn, args), PICKLE)
        except Exception as e:  # noqa: BLE001
            raise TypeError(f"cannot send job {getattr(fn, '__qualname__', fn)!r} to "
                            f"{self.backend} workers: {type(e).__name__}: {e}") from e
        self.start()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("WorkerPool is closed")
            missing = self._shared.missing(refs)
            if missing:
                raise KeyError(f"job arguments name dropped or unknown shared objects {missing}")
            job = Job(next(self._ids), blob, refs, engine, loop, fut,
                       (str(limit[0]), int(limit[1])) if limit else None)
            self._jobs[job.jid] = job
            self._pending.append(job)
            self.stats["jobs"] += 1
        fut.add_done_callback(lambda f, j=job: self._on_future_done(j))
        self._pump()
        return fut

    async def run(self, fn: Callable, *args, engine: Optional[RolloutEngine] = None,
                  limit: Optional[tuple] = None) -> Any:
        """``submit`` from async code; ``engine`` is called on the running loop."""
        fut = self.submit(fn, *args, engine=engine, loop=asyncio.get_running_loop(), limit=limit)
        return await asyncio.wrap_future(fut)

    def _on_future_done(self, job: Job) -> None:
        if not job.future.cancelled():
            return
        with self._lock:
            self._jobs.pop(job.jid, None)
            try:
                self._pending.remove(job)
            except ValueError:
                pass
            slot = self._slots.get(job.worker) if job.worker is not None else None
            if slot is not None:
                self._release(slot, job)
        job.abandon()
        if slot is not None:
            self._send(slot, ("cancel", job.jid))
        self._pump()

    def _release(self, slot: _Slot, job: Job) -> None:
        slot.jobs.discard(job.jid)
        if job.limit:
            slot.limits[job.limit[0]] -= 1

    def _pump(self) -> None:
        """Assigns pending jobs to connected workers with room (least loaded first)."""
        sends = []
        with self._lock:
            live = [s for s in self._slots.values() if s.alive and s.conn is not None]
            if not live:
                return
            keep = collections.deque()
            while self._pending:
                job = self._pending.popleft()
                fits = [s for s in live if len(s.jobs) < self.slots and (
                    job.limit is None or s.limits[job.limit[0]] < job.limit[1])]
                if not fits:
                    keep.append(job)
                    if all(len(s.jobs) >= self.slots for s in live):
                        break
                    continue
                s = min(fits, key=lambda x: len(x.jobs))
                s.jobs.add(job.jid)
                if job.limit:
                    s.limits[job.limit[0]] += 1
                job.worker = s.wid
                shipped = {}
                for key in self._shared.closure(job.refs):
                    blob = self._shared.blob(key)
                    if key not in s.has and blob is not None:
                        shipped[key] = blob
                        s.has.add(key)
                version = int(job.engine.weight_version) if job.engine is not None else 0
                sends.append((s, ("run", job.jid, job.blob, shipped, version)))
            keep.extend(self._pending)
            self._pending = keep
        for s, msg in sends:
            self._send(s, msg)

    def _send(self, s: _Slot, msg) -> None:
        try:
            data = pickle.dumps(msg, PICKLE)
            with s.send_lock:
                s.conn.send_bytes(data)
        except (OSError, AttributeError) as e:
            self._lost(s, f"send failed: {type(e).__name__}: {e}")

    # -- connections and messages -----------------------------------------------------------------
    def _accept_forever(self) -> None:
        while not self._closing:
            try:
                conn = self._listener.accept()
                no_delay(conn)
                hello = pickle.loads(conn.recv_bytes())
            except Exception:  # noqa: BLE001 - listener closed or a bad peer
                if self._closing:
                    return
                log.warning("worker pool: a connection failed its handshake", exc_info=True)
                continue
            _, wid, pid, host = hello
            with self._lock:
                s = self._slots.get(wid)
                if s is None or not s.alive:
                    conn.close()
                    continue
                s.conn, s.pid, s.host = conn, int(pid), str(host)
            threading.Thread(target=self._read_forever, args=(s,), daemon=True,
                             name=f"workerpool-read-{wid}").start()
            self._pump()

    def _read_forever(self, s: _Slot) -> None:
        while True:
            try:
                msg = pickle.loads(s.conn.recv_bytes())
            except (EOFError, OSError) as e:
                self._lost(s, f"connection closed ({type(e).__name__})")
                return
            except Exception as e:  # noqa: BLE001 - a message we cannot read
                self._lost(s, f"unreadable message: {type(e).__name__}: {e}")
                return
            kind = msg[0]
            if kind == "gen":
                _, jid, cid, request = msg
                job = self._jobs.get(jid)
                if job is None:
                    self._send(s, ("gen", cid, False, RuntimeError(f"job {jid} was cancelled")))
                else:
                    job.generate(cid, request, lambda reply, s=s: self._send(s, reply))
            elif kind == "end":
                job = self._jobs.get(msg[1])
                if job is not None:
                    job.end_episode(msg[2])
            elif kind == "done":
                self._done(s, *msg[1:])

    def _done(self, s: _Slot, jid: int, ok: bool, blob: bytes) -> None:
        with self._lock:
            job = self._jobs.pop(jid, None)
            if job is not None:
                self._release(s, job)
                self.stats["done"] += 1
        if job is not None:
            try:
                payload = pickle.loads(blob)
            except Exception as e:  # noqa: BLE001 - e.g. a class the driver cannot import
                ok, payload = False, RemoteError(f"cannot read the job's result: {e}")
            if ok:
                resolve(job.future, payload)
            else:
                fail(job.future, payload)
        self._pump()

    # -- lost workers -----------------------------------------------------------------------------
    def _lost(self, s: _Slot, why: str) -> None:
        with self._lock:
            if not s.alive:
                return
            s.alive = False
            self._slots.pop(s.wid, None)
            jobs = [self._jobs.pop(j) for j in list(s.jobs) if j in self._jobs]
            s.jobs.clear()
            closing = self._closing
            if not closing:
                self.stats["workers_lost"] += 1
                self.stats["lost_jobs"] += len(jobs)
                restart = self.stats["restarts"] < self.max_restarts
                if restart:
                    self.stats["restarts"] += 1
                    self._spawn()
        if closing:
            return
        where = f"worker {s.wid} (pid {s.pid or '?'} on {s.host or '?'})"
        log.warning("episode %s lost: %s; %d job(s) in flight fail as infrastructure errors%s",
                    where, why, len(jobs), "" if restart else "; no restarts left")
        for job in jobs:
            job.abandon()
            fail(job.future, WorkerLost(f"{where} lost: {why}"))
        self._stop_handle(s, graceful=False)
        if not restart:
            self._fail_if_no_workers()
        self._pump()

    def _fail_if_no_workers(self) -> None:
        with self._lock:
            if any(s.alive for s in self._slots.values()):
                return
            pending = list(self._pending)
            self._pending.clear()
            for job in pending:
                self._jobs.pop(job.jid, None)
        for job in pending:
            fail(job.future, WorkerLost(f"no {self.backend} worker left (restarts exhausted)"))

    def _monitor_forever(self) -> None:
        """Workers that died or stalled before connecting are lost too."""
        while not self._closing:
            time.sleep(0.5)
            with self._lock:
                waiting = [s for s in self._slots.values() if s.alive and s.conn is None]
            for s in waiting:
                if self._closing:
                    return
                why = None
                if time.monotonic() - s.started > self.start_timeout_s:
                    why = f"did not connect within {self.start_timeout_s:.0f}s"
                else:
                    why = self._launcher.ended(s.proc)
                if why:
                    self._lost(s, why)

    # -- introspection ----------------------------------------------------------------------------
    def worker_pids(self) -> dict[int, int]:
        """``{worker_id: pid}`` of the connected workers."""
        with self._lock:
            return {s.wid: s.pid for s in self._slots.values() if s.alive and s.pid}

    def wait_ready(self, n: Optional[int] = None, timeout_s: float = 300.0) -> None:
        """Blocks until ``n`` (default all) workers are connected."""
        self.start()
        n = self.workers if n is None else n
        deadline = time.monotonic() + timeout_s
        while len(self.worker_pids()) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.worker_pids())} of {n} {self.backend} "
                                   f"workers connected within {timeout_s:.0f}s")
            time.sleep(0.05)

    def job_worker(self, future: concurrent.futures.Future) -> Optional[int]:
        """The worker id a submitted job runs on (None while pending or when done)."""
        with self._lock:
            for job in self._jobs.values():
                if job.future is future:
                    return job.worker
        return None
