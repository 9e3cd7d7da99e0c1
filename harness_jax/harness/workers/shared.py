"""Objects the driver shares with its workers (``WorkerPool.share``): pickled once when shared, shipped
to a worker with the first job that needs them (with the objects they depend on), and kept there
until dropped."""
from __future__ import annotations

import itertools
import pickle
import secrets
import threading
from typing import Any, Optional

from harness_jax.harness.workers.wire import PICKLE, Ref


class SharedObjects:
    """The driver's registry of shared objects (thread-safe)."""

    def __init__(self, backend: str):
        self.backend = backend
        self._lock = threading.Lock()
        self._blobs: dict[str, tuple[bytes, tuple]] = {}      # key -> (blob, dep keys)
        self._ids: dict[int, tuple[Any, Ref]] = {}           # id(obj) -> (obj, ref)
        self._count = itertools.count()

    def share(self, obj: Any, deps: tuple = ()) -> Ref:
        """The object's ``Ref`` (the same one when ``obj`` is shared again); pickled now, so an
        unpicklable object fails here."""
        with self._lock:
            hit = self._ids.get(id(obj))
            if hit is not None and hit[0] is obj:
                return hit[1]
        try:
            blob = pickle.dumps(obj, PICKLE)
        except Exception as e:  # noqa: BLE001
            raise TypeError(
                f"cannot send {type(obj).__name__} to {self.backend} workers: {type(e).__name__}: "
                f"{e}. Worker jobs need picklable inputs: module-level functions and classes, "
                "functools.partial instead of lambdas, registry.EnvFactory for environments"
            ) from e
        ref = Ref(f"r{next(self._count)}-{secrets.token_hex(4)}")
        with self._lock:
            self._blobs[ref.key] = (blob, tuple(d.key for d in deps))
            self._ids[id(obj)] = (obj, ref)
        return ref

    def forget(self, ref: Ref) -> None:
        with self._lock:
            self._blobs.pop(ref.key, None)
            for i, (_, r) in list(self._ids.items()):
                if r == ref:
                    del self._ids[i]

    def missing(self, refs) -> list[str]:
        with self._lock:
            return [r.key for r in refs if r.key not in self._blobs]

    def closure(self, refs) -> list[str]:
        """The keys a job with ``refs`` needs, dependencies first."""
        out, todo = [], [r.key for r in refs]
        with self._lock:
            while todo:
                k = todo.pop()
                if k in out or k not in self._blobs:
                    continue
                out.append(k)
                todo.extend(self._blobs[k][1])
        return out[::-1]

    def blob(self, key: str) -> Optional[bytes]:
        with self._lock:
            hit = self._blobs.get(key)
        return hit[0] if hit is not None else None
