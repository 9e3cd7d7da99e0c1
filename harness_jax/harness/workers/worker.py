"""The worker side of episode workers: a worker process (or Ray actor) connects back to the
driver and serves jobs on its own event loop (``harness.workers`` describes the mechanism). A
job is ``fn(ctx, *args)``; ``WorkerContext`` gives it the objects the driver shared, a per-worker
cache, and the driver's engine through ``_EngineProxy`` (generation travels to the driver).
"""
from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import itertools
import os
import pickle
import socket
import sys
import threading
from multiprocessing.connection import Client, Connection
from typing import Any, Callable, Optional

from harness_jax.harness.workers.wire import (PICKLE, Ref, close_quietly, dumps_error, dumps_result,
                                              no_delay)
from harness_jax.sampling.types import GenerateRequest, GenerateResult, RolloutEngine

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
            close_quietly(self._cache.popitem(last=False)[1])
        return obj

    def engine(self) -> RolloutEngine:
        if self._engine is None:
            raise RuntimeError("this job runs without a driver engine")
        return self._engine


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
        data = pickle.dumps(msg, PICKLE)
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
                close_quietly(self.cache.pop(msg[1]))
        elif kind == "stop" and not self.stopped.done():
            self.stopped.set_result(None)

    async def run_job(self, jid: int, blob: bytes) -> None:
        _CURRENT_JOB.set(jid)
        try:
            fn, args = pickle.loads(blob)
            out = fn(self.ctx, *args)
            if inspect.isawaitable(out):
                out = await out
            reply = ("done", jid, True, dumps_result(out))
        except asyncio.CancelledError:
            reply = None
        except BaseException as e:  # noqa: BLE001 - reported to the driver
            reply = ("done", jid, False, dumps_error(e))
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
                close_quietly(obj)
            self.cache.clear()
            try:
                self.conn.close()
            except OSError:
                pass


def main() -> None:
    """Entry point of a ``processes`` worker: ``(address, authkey, worker_id)`` on stdin."""
    address, authkey, worker_id = pickle.loads(sys.stdin.buffer.read())
    serve(address, authkey, worker_id)


def serve(address, authkey: bytes, worker_id: int) -> None:
    """A worker's main: connects to the driver and serves jobs until told to stop (or the driver
    goes away)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    conn = Client(tuple(address), authkey=authkey)
    no_delay(conn)
    _Worker(conn, worker_id).serve()


class RayWorker:
    """The Ray actor: ``serve`` blocks in the actor for the worker's life."""

    def serve(self, address, authkey: bytes, worker_id: int) -> None:
        serve(address, authkey, worker_id)
