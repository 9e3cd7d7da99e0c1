"""The episode workers' job API on the caller's event loop (no isolation; the default for code that
takes a pool), and the construction of the configured backend."""
from __future__ import annotations

import collections
import inspect
import itertools
from typing import Any, Callable, Optional

from harness_jax.harness.workers.pool import WorkerPool
from harness_jax.harness.workers.wire import Ref, close_quietly
from harness_jax.harness.workers.worker import WorkerContext
from harness_jax.sampling.types import RolloutEngine

BACKENDS = ("inprocess", "processes", "ray")   # where episodes run (``create``); the package docstring describes each


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
            close_quietly(self._cache.pop(ref.key))

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
            close_quietly(obj)
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


def from_spec(spec):
    """The backend of a ``workers`` spec (``train.spec.WorkersSection``: backend, num_workers,
    slots, ray_address, ray_cpus); None = in-process."""
    return create(str(spec.backend), int(spec.num_workers), int(spec.slots), ray_address=str(spec.ray_address),
                  ray_cpus=float(spec.ray_cpus))
