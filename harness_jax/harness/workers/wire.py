"""What the driver and its workers share: handles of shared objects, the two errors a job can
end with, and how messages cross the connection (pickled, TCP_NODELAY)."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import pickle
import socket
import traceback
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger(__name__)

PICKLE = pickle.HIGHEST_PROTOCOL


class WorkerLost(RuntimeError):
    """The worker running a job died or disconnected: an infrastructure failure (retry it, never
    score it)."""


class RemoteError(RuntimeError):
    """A job raised inside a worker (its type, message and traceback are in the text)."""


@dataclasses.dataclass(frozen=True)
class Ref:
    """A handle to an object shared with the workers (``WorkerPool.share``)."""

    key: str


def dumps_result(out: Any) -> bytes:
    try:
        return pickle.dumps(out, PICKLE)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"the job's result cannot be pickled: {type(e).__name__}: {e}") from e


def dumps_error(e: BaseException) -> bytes:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    err = RemoteError(f"{type(e).__name__}: {e}\n--- worker traceback ---\n{text}")
    return pickle.dumps(err, PICKLE)


def picklable_error(e: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(e, PICKLE))
        return e
    except Exception:  # noqa: BLE001
        return RemoteError(f"{type(e).__name__}: {e}")


def no_delay(conn: Connection) -> None:
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


def close_quietly(obj: Any) -> None:
    """``obj.close()`` when it has one, best effort (objects a worker built and caches)."""
    closer = getattr(obj, "close", None)
    if callable(closer):
        try:
            closer()
        except Exception:  # noqa: BLE001 - best effort
            log.debug("closing a cached worker object failed", exc_info=True)


def resolve(fut: concurrent.futures.Future, value: Any) -> None:
    try:
        fut.set_result(value)
    except concurrent.futures.InvalidStateError:   # cancelled meanwhile
        pass


def fail(fut: concurrent.futures.Future, exc: BaseException) -> None:
    try:
        fut.set_exception(exc)
    except concurrent.futures.InvalidStateError:
        pass
