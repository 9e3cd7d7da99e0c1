"""The driver's side of one job: its record (future, engine, event loop, where it runs) and the
generation proxy. A worker's ``GenerateRequest`` reaches the driver, which calls the job's engine
on the event loop that submitted the job and sends the ``GenerateResult`` back; the engine-side
episode state of a lost or cancelled job is ended here so a retry starts clean."""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Callable, Optional

from harness_jax.harness.workers.wire import picklable_error
from harness_jax.sampling.types import GenerateRequest, RolloutEngine


@dataclasses.dataclass
class Job:
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

    def engine_call(self, coro) -> Optional[concurrent.futures.Future]:
        """Runs ``coro`` (a call of this job's engine) on the job's event loop."""
        if coro is None:
            return None
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:   # the loop is closed
            coro.close()
            return None

    def generate(self, cid: int, request: GenerateRequest, reply: Callable[[tuple], None]) -> None:
        """Serves one generation of the worker: ``reply(("gen", cid, ok, result_or_error))``."""
        if self.engine is None:
            reply(("gen", cid, False, RuntimeError(f"job {self.jid} has no driver engine")))
            return
        if request.episode_id:
            self.engine_keys.add(request.episode_id)
        cf = self.engine_call(self.engine.generate(request))
        if cf is None:
            reply(("gen", cid, False, RuntimeError("the job's event loop is closed")))
            return
        self.gens.add(cf)

        def done(f: concurrent.futures.Future) -> None:
            self.gens.discard(f)
            if f.cancelled():
                return
            e = f.exception()
            reply(("gen", cid, True, f.result()) if e is None else ("gen", cid, False, picklable_error(e)))
        cf.add_done_callback(done)

    def end_episode(self, key: str) -> None:
        """The worker ended an engine-side episode."""
        self.engine_keys.discard(key)
        if self.engine is not None:
            self.engine_call(self.engine.end_episode(key))

    def abandon(self) -> None:
        """Cancels the job's generations in flight and ends its engine-side episodes."""
        for g in list(self.gens):
            g.cancel()
        if self.engine is not None:
            for key in list(self.engine_keys):
                self.engine_call(self.engine.end_episode(key))
        self.engine_keys.clear()
