"""Episode workers: where the executor's episodes (and other per-worker jobs) run.

Backends (``create(backend, ...)`` / ``from_config(config)``):

* ``"inprocess"`` -- on the caller's event loop (today's behaviour and the default; ``create``
  returns ``None`` and the executor runs episodes itself);
* ``"processes"`` -- ``workers`` spawned local processes (``WorkerPool``);
* ``"ray"`` -- ``workers`` Ray actors (a local ``ray.init`` when no address is given, else the
  cluster at ``ray_address``; ``pip install .[ray]``).

Both remote backends are the same mechanism: every worker (a process or an actor) connects back
to the driver's listener (``multiprocessing.connection`` over TCP, HMAC-authenticated with a
per-pool key) and serves jobs over that one connection. Ray only places and starts the worker
processes. A job is ``fn(ctx, *args)`` (a module-level function; async or not) run on the
worker's event loop; ``ctx`` (``WorkerContext``) gives it

* ``ctx.resident(ref)`` -- an object the driver shared once (``pool.share(obj)``): shipped to a
  worker with the first job that needs it and kept there (a tokenizer, an executor recipe);
* ``ctx.cached(key, build)`` -- a per-worker memo (a built executor with its hook sandbox, a
  frozen target); dropped (and ``close()``-d) with ``pool.drop(ref)``;
* ``ctx.engine()`` -- the driver's rollout engine of the job (below).

The policy engine stays with the driver: workers run environments, the executor, overlays and
hooks, and **the driver proxies generation**. A worker's ``GenerateRequest`` travels to the
driver, which calls the job's engine (a colocated ``JaxEngine``, an ``SGLangClient``, a frozen
target) on the event loop that submitted the job and sends the ``GenerateResult`` back. Token
ids and log-probs cross the boundary as pickled Python ints and floats, so they are bit-exact;
weight versions, pause/abort/resume during weight sync and episode-sticky server routing stay in
the one driver-side client. The cost is one local round trip per turn (tens of microseconds
next to a generation). Frozen targets served over HTTP may instead be built in the worker
(``ctx.cached``), as Harness-R1's ``EvaluationPool`` does.

Long-lived workers: a worker keeps its resident objects, caches and the process-level state of
the environment families (a DBBench engine's gold-hash cache, the AppWorld service client, the
SWE sandbox checks, ALFWorld's imported engine) for its whole life. Families that are not
thread-safe declare ``Env.process_concurrency = 1`` (ALFWorld); ``run(..., limit=(key, 1))``
keeps such jobs to one per worker process while other jobs share the worker's ``slots``.

A lost worker (killed, crashed, out of memory, disconnected, never started) fails its in-flight
jobs with ``WorkerLost`` -- an infrastructure failure: the executor retries the episode (on
another or a replacement worker) and never scores it -- and the pool starts a replacement (up
to ``max_restarts``; past that, or when no worker can start, pending jobs fail with
``WorkerLost`` instead of waiting forever). The driver ends the engine-side episode state of a
lost job (``engine.end_episode``) so a retry starts clean.
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextvars
import dataclasses
import inspect
import itertools
import logging
import os
import pickle
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection, Listener
from typing import Any, Callable, Optional

from harness_jax import config_schema
from harness_jax.sampling.types import GenerateRequest, GenerateResult, RolloutEngine

log = logging.getLogger(__name__)

BACKENDS = config_schema.WORKER_BACKENDS
_PICKLE = pickle.HIGHEST_PROTOCOL


class WorkerLost(RuntimeError):
    """The worker running a job died or disconnected: an infrastructure failure (retry it, never
    score it)."""


class RemoteError(RuntimeError):
    """A job raised inside a worker (its type, message and traceback are in the text)."""


@dataclasses.dataclass(frozen=True)
class Ref:
    """A handle to an object shared with the workers (``WorkerPool.share``)."""

    key: str


# =============================================================================================
# worker side
# =============================================================================================
_CURRENT_JOB: contextvars.ContextVar = contextvars.ContextVar("harness_jax_worker_job",
                                                              default=None)


class _EngineProxy(RolloutEngine):
    """The driver's engine as seen from a worker: ``generate``/``end_episode`` of the current job
    (a context variable set per job) travel to the driver."""

    def __init__(self, worker: "_Worker"):
        self._w = worker

    def _job(self) -> int:
        jid = _CURRENT_JOB.get()
        if jid is None:
            raise RuntimeError("the driver engine proxy is only usable inside a worker job")
        return jid

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        jid = self._job()
        res = await self._w.call_driver(jid, request)
        self._w.versions[jid] = int(res.weight_version)
        return res

    async def end_episode(self, episode_id: str) -> None:
        self._w.send(("end", self._job(), episode_id))

    @property
    def weight_version(self) -> int:
        return int(self._w.versions.get(self._job(), 0))


class WorkerContext:
    """What a job sees (module docstring). ``worker_id`` is unique per worker incarnation."""

    def __init__(self, worker_id: int, resident: dict, cache: "collections.OrderedDict",
                 engine: Optional[RolloutEngine], max_cached: int = 32):
        self.worker_id = worker_id
        self._resident = resident
        self._cache = cache
        self._engine = engine
        self._max_cached = max_cached

    def resident(self, ref: Ref) -> Any:
        try:
            return self._resident[ref.key]
        except KeyError:
            raise KeyError(f"shared object {ref.key} is not on worker {self.worker_id}: pass its "
                           "Ref in the job's arguments or the deps of a shared object") from None

    def cached(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()`` once per worker (least recently used entries beyond ``max_cached`` are
        closed)."""
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        obj = self._cache[key] = build()
        while len(self._cache) > self._max_cached:
            _close(self._cache.popitem(last=False)[1])
        return obj

    def engine(self) -> RolloutEngine:
        if self._engine is None:
            raise RuntimeError("this job runs without a driver engine")
        return self._engine


def _close(obj: Any) -> None:
    closer = getattr(obj, "close", None)
    if callable(closer):
        try:
            closer()
        except Exception:  # noqa: BLE001 - best effort
            log.debug("closing a cached worker object failed", exc_info=True)


class _Worker:
    """One worker's serving loop (in a spawned process or a Ray actor)."""

    def __init__(self, conn: Connection, worker_id: int):
        self.conn = conn
        self.worker_id = worker_id
        self.loop = asyncio.new_event_loop()
        self.send_lock = threading.Lock()
        self.resident: dict = {}
        self.cache: collections.OrderedDict = collections.OrderedDict()
        self.tasks: dict[int, asyncio.Task] = {}
        self.calls: dict[int, asyncio.Future] = {}
        self.versions: dict[int, int] = {}
        self.call_ids = itertools.count()
        self.stopped = self.loop.create_future()
        self.ctx = WorkerContext(worker_id, self.resident, self.cache, _EngineProxy(self))

    def send(self, msg) -> None:
        data = pickle.dumps(msg, _PICKLE)
        with self.send_lock:
            self.conn.send_bytes(data)

    async def call_driver(self, jid: int, request: GenerateRequest) -> GenerateResult:
        cid = next(self.call_ids)
        fut = self.calls[cid] = self.loop.create_future()
        try:
            self.send(("gen", jid, cid, request))
            return await fut
        finally:
            self.calls.pop(cid, None)

    # -- messages from the driver (reader thread -> loop) ---------------------------------------
    def read_forever(self) -> None:
        while True:
            try:
                msg = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                msg = ("stop",)
            try:
                self.loop.call_soon_threadsafe(self.handle, msg)
            except RuntimeError:   # the loop is closed
                return
            if msg[0] == "stop":
                return

    def handle(self, msg) -> None:
        kind = msg[0]
        if kind == "run":
            _, jid, blob, shipped, version = msg
            for key, obj_blob in shipped.items():
                self.resident[key] = pickle.loads(obj_blob)
            self.versions[jid] = version
            self.tasks[jid] = self.loop.create_task(self.run_job(jid, blob))
        elif kind == "gen":
            _, cid, ok, payload = msg
            fut = self.calls.get(cid)
            if fut is not None and not fut.done():
                if ok:
                    fut.set_result(payload)
                else:
                    fut.set_exception(payload)
        elif kind == "cancel":
            task = self.tasks.get(msg[1])
            if task is not None:
                task.cancel()
        elif kind == "drop":
            self.resident.pop(msg[1], None)
            if msg[1] in self.cache:
                _close(self.cache.pop(msg[1]))
        elif kind == "stop" and not self.stopped.done():
            self.stopped.set_result(None)

    async def run_job(self, jid: int, blob: bytes) -> None:
        _CURRENT_JOB.set(jid)
        try:
            fn, args = pickle.loads(blob)
            out = fn(self.ctx, *args)
            if inspect.isawaitable(out):
                out = await out
            reply = ("done", jid, True, _dumps_result(out))
        except asyncio.CancelledError:
            reply = None
        except BaseException as e:  # noqa: BLE001 - reported to the driver
            reply = ("done", jid, False, _dumps_error(e))
        finally:
            self.tasks.pop(jid, None)
            self.versions.pop(jid, None)
        if reply is not None:
            try:
                self.send(reply)
            except OSError:
                pass

    def serve(self) -> None:
        self.send(("hello", self.worker_id, os.getpid(), socket.gethostname()))
        threading.Thread(target=self.read_forever, daemon=True, name="worker-reader").start()
        try:
            self.loop.run_until_complete(self.stopped)
        finally:
            for task in list(self.tasks.values()):
                task.cancel()
            for obj in list(self.cache.values()):
                _close(obj)
            self.cache.clear()
            try:
                self.conn.close()
            except OSError:
                pass


def _dumps_result(out: Any) -> bytes:
    try:
        return pickle.dumps(out, _PICKLE)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"the job's result cannot be pickled: {type(e).__name__}: {e}") from e


def _dumps_error(e: BaseException) -> bytes:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    err = RemoteError(f"{type(e).__name__}: {e}\n--- worker traceback ---\n{text}")
    return pickle.dumps(err, _PICKLE)


def main() -> None:
    """Entry point of a ``processes`` worker: ``(address, authkey, worker_id)`` on stdin."""
    address, authkey, worker_id = pickle.loads(sys.stdin.buffer.read())
    serve(address, authkey, worker_id)


def serve(address, authkey: bytes, worker_id: int) -> None:
    """A worker's main: connects to the driver and serves jobs until told to stop (or the driver
    goes away)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    conn = Client(tuple(address), authkey=authkey)
    _no_delay(conn)
    _Worker(conn, worker_id).serve()


def _no_delay(conn: Connection) -> None:
    """TCP_NODELAY: ``Connection`` writes a message over 16 KiB as header + body, which Nagle's
    algorithm and delayed ACKs would hold back ~40 ms (an 8k-token context is ~40 KiB)."""
    try:
        s = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        finally:
            s.close()
    except OSError:
        pass


class _RayWorker:
    """The Ray actor: ``serve`` blocks in the actor for the worker's life."""

    def serve(self, address, authkey: bytes, worker_id: int) -> None:
        serve(address, authkey, worker_id)


# =============================================================================================
# driver side
# =============================================================================================
@dataclasses.dataclass
class _Job:
    jid: int
    blob: bytes
    refs: tuple
    engine: Optional[RolloutEngine]
    loop: Optional[asyncio.AbstractEventLoop]
    future: concurrent.futures.Future
    limit: Optional[tuple]
    worker: Optional[int] = None
    gens: set = dataclasses.field(default_factory=set)
    engine_keys: set = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class _Slot:
    """The driver's record of one worker incarnation."""

    wid: int
    handle: Any                          # subprocess.Popen | Ray actor handle
    started: float
    serve_ref: Any = None                # Ray: the ObjectRef of serve()
    log_path: str = ""                   # processes: the worker's stdout/stderr
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
        if backend not in ("processes", "ray"):
            raise ValueError(f"WorkerPool backend={backend!r}: use 'processes' or 'ray' "
                             "('inprocess' needs no pool: pass backend=None to the executor)")
        if workers < 1:
            raise ValueError(f"WorkerPool workers={workers}: need at least 1")
        if slots < 1:
            raise ValueError(f"WorkerPool slots={slots}: need at least 1")
        self.backend = backend
        self.workers = int(workers)
        self.slots = int(slots)
        self.ray_address = ray_address
        self.ray_cpus = float(ray_cpus)
        self.host = host
        self.start_timeout_s = float(start_timeout_s)
        self.max_restarts = 4 * self.workers + 4 if max_restarts is None else int(max_restarts)
        self.stats = collections.Counter()       # jobs, done, lost_jobs, workers_lost, restarts
        self._lock = threading.RLock()
        self._slots: dict[int, _Slot] = {}
        self._jobs: dict[int, _Job] = {}
        self._pending: collections.deque = collections.deque()
        self._shared: dict[str, tuple[bytes, tuple]] = {}      # key -> (blob, dep keys)
        self._shared_ids: dict[int, tuple[Any, Ref]] = {}      # id(obj) -> (obj, ref)
        self._ids = itertools.count()
        self._wids = itertools.count()
        self._started = False
        self._closing = False
        self._listener: Optional[Listener] = None
        self._authkey = secrets.token_bytes(32)
        self._owns_ray = False
        self._actor_cls = None
        self._logdir = ""

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "WorkerPool":
        """Starts the listener and the workers (idempotent; ``run`` calls it)."""
        with self._lock:
            if self._started:
                return self
            if self._closing:
                raise RuntimeError("WorkerPool is closed")
            host = self.host or self._default_host()
            if self.backend == "processes":
                self._logdir = tempfile.mkdtemp(prefix="harness_jax_workers_")
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

    def _default_host(self) -> str:
        if self.backend == "ray":
            self._init_ray()
            if self.ray_address:
                import ray
                return ray.util.get_node_ip_address()
        return "127.0.0.1"

    def _init_ray(self) -> None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("backend='ray' needs Ray: pip install -e '.[ray]'") from e
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address, log_to_driver=False)
            else:   # a private single-node Ray on this machine, loopback only
                os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False,
                         _node_ip_address="127.0.0.1", log_to_driver=False,
                         configure_logging=False)
            self._owns_ray = True
        self._actor_cls = ray.remote(num_cpus=self.ray_cpus, max_restarts=0)(_RayWorker)

    def _spawn(self) -> None:
        wid = next(self._wids)
        address = self._listener.address
        if self.backend == "processes":
            # a fresh interpreter (not multiprocessing's spawn: that re-imports the driver's
            # __main__); the worker imports what the driver can (its sys.path) and reads its
            # connection details from stdin, so the key never shows on a command line
            log_path = os.path.join(self._logdir, f"worker-{wid}.log")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                       TOKENIZERS_PARALLELISM="false")
            with open(log_path, "wb") as logf:
                proc = subprocess.Popen(
                    [sys.executable, "-c", "from harness_jax.harness.workers import main; main()"],
                    stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT, env=env)
            proc.stdin.write(pickle.dumps((address, self._authkey, wid), _PICKLE))
            proc.stdin.close()
            slot = _Slot(wid, proc, time.monotonic(), log_path=log_path)
        else:
            actor = self._actor_cls.remote()
            slot = _Slot(wid, actor, time.monotonic(),
                         serve_ref=actor.serve.remote(address, self._authkey, wid))
        self._slots[wid] = slot

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
            _fail(job.future, WorkerLost("the worker pool was closed"))
        for s in slots:
            if s.conn is not None:
                try:
                    with s.send_lock:
                        s.conn.send_bytes(pickle.dumps(("stop",), _PICKLE))
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
        if self._owns_ray:
            import ray
            ray.shutdown()
            self._owns_ray = False
        if self._logdir:
            shutil.rmtree(self._logdir, ignore_errors=True)

    def _stop_handle(self, s: _Slot, graceful: bool) -> None:
        if self.backend == "processes":
            try:
                s.handle.wait(timeout=5 if graceful else 0.01)
            except subprocess.TimeoutExpired:
                s.handle.kill()
                s.handle.wait(timeout=5)
        else:
            import ray
            try:
                ray.kill(s.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
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
        with self._lock:
            hit = self._shared_ids.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
        try:
            blob = pickle.dumps(obj, _PICKLE)
        except Exception as e:  # noqa: BLE001
            raise TypeError(
                f"cannot send {type(obj).__name__} to {self.backend} workers: {type(e).__name__}: "
                f"{e}. Worker jobs need picklable inputs: module-level functions and classes, "
                "functools.partial instead of lambdas, registry.EnvFactory for environments"
            ) from e
        ref = Ref(f"r{next(self._ids)}-{secrets.token_hex(4)}")
        with self._lock:
            self._shared[ref.key] = (blob, tuple(d.key for d in deps))
            self._shared_ids[id(obj)] = (obj, ref)
        return ref

    def drop(self, ref: Ref) -> None:
        """Forgets a shared object here and on every worker (closing what workers built from
        it with ``ctx.cached(ref.key, ...)``)."""
        with self._lock:
            self._shared.pop(ref.key, None)
            for i, (o, r) in list(self._shared_ids.items()):
                if r == ref:
                    del self._shared_ids[i]
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
            blob = pickle.dumps((fn, args), _PICKLE)
        except Exception as e:  # noqa: BLE001
            raise TypeError(f"cannot send job {getattr(fn, '__qualname__', fn)!r} to "
                            f"{self.backend} workers: {type(e).__name__}: {e}") from e
        self.start()
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("WorkerPool is closed")
            missing = [r.key for r in refs if r.key not in self._shared]
            if missing:
                raise KeyError(f"job arguments name dropped or unknown shared objects {missing}")
            job = _Job(next(self._ids), blob, refs, engine, loop, fut,
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

    def _on_future_done(self, job: _Job) -> None:
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
        for g in list(job.gens):
            g.cancel()
        if slot is not None:
            self._send(slot, ("cancel", job.jid))
        self._end_engine_episodes(job)
        self._pump()

    def _release(self, slot: _Slot, job: _Job) -> None:
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
                for key in self._closure(job.refs):
                    if key not in s.has:
                        shipped[key] = self._shared[key][0]
                        s.has.add(key)
                version = int(job.engine.weight_version) if job.engine is not None else 0
                sends.append((s, ("run", job.jid, job.blob, shipped, version)))
            keep.extend(self._pending)
            self._pending = keep
        for s, msg in sends:
            self._send(s, msg)

    def _closure(self, refs) -> list[str]:
        out, todo = [], [r.key for r in refs]
        while todo:
            k = todo.pop()
            if k in out or k not in self._shared:
                continue
            out.append(k)
            todo.extend(self._shared[k][1])
        return out[::-1]

    def _send(self, s: _Slot, msg) -> None:
        try:
            data = pickle.dumps(msg, _PICKLE)
            with s.send_lock:
                s.conn.send_bytes(data)
        except (OSError, AttributeError) as e:
            self._lost(s, f"send failed: {type(e).__name__}: {e}")

    # -- connections and messages -----------------------------------------------------------------
    def _accept_forever(self) -> None:
        while not self._closing:
            try:
                conn = self._listener.accept()
                _no_delay(conn)
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
                self._generate(s, *msg[1:])
            elif kind == "end":
                job = self._jobs.get(msg[1])
                if job is not None:
                    job.engine_keys.discard(msg[2])
                    self._engine_call(job, job.engine.end_episode(msg[2]) if job.engine else None)
            elif kind == "done":
                self._done(s, *msg[1:])

    def _generate(self, s: _Slot, jid: int, cid: int, request: GenerateRequest) -> None:
        job = self._jobs.get(jid)
        if job is None or job.engine is None:
            why = "was cancelled" if job is None else "has no driver engine"
            self._send(s, ("gen", cid, False, RuntimeError(f"job {jid} {why}")))
            return
        if request.episode_id:
            job.engine_keys.add(request.episode_id)
        cf = self._engine_call(job, job.engine.generate(request))
        if cf is None:
            self._send(s, ("gen", cid, False, RuntimeError("the job's event loop is closed")))
            return
        job.gens.add(cf)

        def reply(f: concurrent.futures.Future) -> None:
            job.gens.discard(f)
            if f.cancelled():
                return
            e = f.exception()
            if e is None:
                self._send(s, ("gen", cid, True, f.result()))
            else:
                self._send(s, ("gen", cid, False, _picklable_error(e)))
        cf.add_done_callback(reply)

    @staticmethod
    def _engine_call(job: _Job, coro) -> Optional[concurrent.futures.Future]:
        if coro is None:
            return None
        try:
            return asyncio.run_coroutine_threadsafe(coro, job.loop)
        except RuntimeError:   # the loop is closed
            coro.close()
            return None

    def _end_engine_episodes(self, job: _Job) -> None:
        if job.engine is None:
            return
        for key in list(job.engine_keys):
            self._engine_call(job, job.engine.end_episode(key))
        job.engine_keys.clear()

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
                _resolve(job.future, payload)
            else:
                _fail(job.future, payload)
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
            for g in list(job.gens):
                g.cancel()
            self._end_engine_episodes(job)
            _fail(job.future, WorkerLost(f"{where} lost: {why}"))
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
            _fail(job.future, WorkerLost(f"no {self.backend} worker left (restarts exhausted)"))

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
                elif self.backend == "processes" and s.handle.poll() is not None:
                    why = (f"exited with code {s.handle.returncode} before connecting; its "
                           f"output ends with:\n{_tail(s.log_path)}")
                elif self.backend == "ray":
                    import ray
                    ready, _ = ray.wait([s.serve_ref], timeout=0)
                    if ready:
                        why = "the Ray actor ended before connecting"
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


def _tail(path: str, n: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return "(no output)"


def _resolve(fut: concurrent.futures.Future, value: Any) -> None:
    try:
        fut.set_result(value)
    except concurrent.futures.InvalidStateError:   # cancelled meanwhile
        pass


def _fail(fut: concurrent.futures.Future, exc: BaseException) -> None:
    try:
        fut.set_exception(exc)
    except concurrent.futures.InvalidStateError:
        pass


def _picklable_error(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e, _PICKLE))
        return e
    except Exception:  # noqa: BLE001
        return RemoteError(f"{type(e).__name__}: {e}")


# =============================================================================================
# in-process backend and construction
# =============================================================================================
class InProcessPool:
    """The same job API on the caller's event loop (no isolation; the default for code that
    takes a pool). ``share`` returns the object's Ref and ``ctx.resident`` the object itself."""

    remote = False
    backend = "inprocess"

    def __init__(self):
        self._objects: dict[str, Any] = {}
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._ids = itertools.count()
        self.stats = collections.Counter()

    def share(self, obj: Any, deps: tuple = ()) -> Ref:
        for k, o in self._objects.items():
            if o is obj:
                return Ref(k)
        ref = Ref(f"local{next(self._ids)}")
        self._objects[ref.key] = obj
        return ref

    def drop(self, ref: Ref) -> None:
        self._objects.pop(ref.key, None)
        if ref.key in self._cache:
            _close(self._cache.pop(ref.key))

    async def run(self, fn: Callable, *args, engine: Optional[RolloutEngine] = None,
                  limit: Optional[tuple] = None) -> Any:
        self.stats["jobs"] += 1
        out = fn(WorkerContext(-1, self._objects, self._cache, engine), *args)
        if inspect.isawaitable(out):
            out = await out
        self.stats["done"] += 1
        return out

    def close(self) -> None:
        for obj in self._cache.values():
            _close(obj)
        self._cache.clear()
        self._objects.clear()

    def __enter__(self) -> "InProcessPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create(backend: str = "inprocess", workers: int = 2, slots: int = 16, **kw):
    """``None`` for ``"inprocess"`` (the executor runs episodes itself), else a ``WorkerPool``
    (not started until its first job)."""
    if backend not in BACKENDS:
        raise ValueError(f"episode worker backend {backend!r}: use one of {BACKENDS}")
    if backend == "inprocess":
        return None
    return WorkerPool(backend, workers, slots, **kw)


def from_config(config):
    """The backend of ``config.workers`` (None = in-process; every field is read)."""
    w = config.workers
    backend, n, slots = str(w.backend), int(w.num_workers), int(w.slots)
    ray_address, ray_cpus = str(w.ray_address), float(w.ray_cpus)
    return create(backend, n, slots, ray_address=ray_address, ray_cpus=ray_cpus)
