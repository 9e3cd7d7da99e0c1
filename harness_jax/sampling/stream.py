"""``ChunkStream``: the iterator ``JaxEngine.stream`` returns (one streamed request)."""
from __future__ import annotations

import queue
from typing import Optional

from harness_jax.sampling.types import GenerateRequest, StreamChunk


class ChunkStream:
    """Iterator over one streamed request's ``StreamChunk``s (``JaxEngine.stream``)."""

    def __init__(self, engine, request: GenerateRequest, timeout: Optional[float]):
        self._engine, self._rid, self._timeout = engine, request.request_id, timeout
        self._q: queue.Queue = queue.Queue()
        self._fut = engine.submit(request, on_chunk=self._q.put)
        # a failed step / closed engine fails the future without a final chunk: wake the reader
        self._fut.add_done_callback(lambda f: self._q.put(None) if f.exception() is not None else None)
        self._done = False

    def __iter__(self) -> "ChunkStream":
        return self

    def __next__(self) -> StreamChunk:
        if self._done:
            raise StopIteration
        chunk = self._q.get(timeout=self._timeout)
        if chunk is None:
            self._done = True
            raise self._fut.exception()
        self._done = chunk.result is not None
        return chunk

    def close(self) -> None:
        """Aborts the request unless its last chunk was read."""
        if not self._done:
            self._done = True
            self._engine.abort(self._rid, message="Abort by closed stream")

    def __enter__(self) -> "ChunkStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
