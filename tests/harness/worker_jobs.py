"""Jobs, engines and environments for the episode-worker tests (test doubles; module-level so
worker processes can import them by name).

``GatedEngine`` wraps a driver-side engine and holds every generation until the test opens the
gate, so a test can kill a worker while its episodes are provably in flight. ``ExclusiveEnv``
stands in for a family whose engine is not thread-safe (like ALFWorld): two of its episodes
active in one process at once is an infrastructure error.
"""
from __future__ import annotations

import asyncio
import os
import time

from harness_jax.envs.base import InfraError
from harness_jax.sampling.types import RolloutEngine

from tests.harness.doubles import ScriptedEnv

_ACTIVE = {"n": 0, "max": 0}


async def add(ctx, a, b, sleep_s=0.0):
    await asyncio.sleep(sleep_s)
    return a + b, ctx.worker_id, os.getpid()


def fail(ctx, message):
    raise ValueError(message)


def resident_identity(ctx, ref):
    obj = ctx.resident(ref)
    return id(obj), len(obj), ctx.worker_id


async def exclusive(ctx, hold_s):
    """Records how many of these jobs run at once in this process."""
    _ACTIVE["n"] += 1
    _ACTIVE["max"] = max(_ACTIVE["max"], _ACTIVE["n"])
    try:
        await asyncio.sleep(hold_s)
    finally:
        _ACTIVE["n"] -= 1
    return _ACTIVE["max"], ctx.worker_id


async def sleep_then_mark(ctx, path, sleep_s):
    """Writes ``path`` when cancelled (the driver's cancel reached the worker)."""
    try:
        await asyncio.sleep(sleep_s)
    except asyncio.CancelledError:
        with open(path, "w") as f:
            f.write("cancelled")
        raise
    return "finished"


class GatedEngine(RolloutEngine):
    """Holds each ``generate`` until ``open()`` (driver side; counts what is waiting)."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = None
        self.waiting = 0
        self.calls = 0

    def close_gate(self):
        self.gate = asyncio.Event()

    def open(self):
        if self.gate is not None:
            self.gate.set()

    @property
    def weight_version(self):
        return self.inner.weight_version

    async def generate(self, request):
        self.calls += 1
        if self.gate is not None and not self.gate.is_set():
            self.waiting += 1
            try:
                await self.gate.wait()
            finally:
                self.waiting -= 1
        return await self.inner.generate(request)

    async def end_episode(self, episode_id):
        await self.inner.end_episode(episode_id)


async def wait_until(cond, timeout_s=120.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.02)


class ExclusiveEnv(ScriptedEnv):
    process_concurrency = 1
    active = 0

    async def areset(self, task):
        ExclusiveEnv.active += 1
        if ExclusiveEnv.active > 1:
            ExclusiveEnv.active -= 1
            raise InfraError("two episodes of a non-thread-safe engine in one process")
        self._counted = True
        await asyncio.sleep(0.05)
        return await super().areset(task)

    async def aclose(self):
        if getattr(self, "_counted", False):
            ExclusiveEnv.active -= 1
            self._counted = False


class ExclusiveFactory:
    """A picklable factory that declares its family's process concurrency."""

    process_concurrency = 1

    def __call__(self):
        return ExclusiveEnv("text")
