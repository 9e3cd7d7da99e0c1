"""Rollout collection of one GRPO step: items from the stream -> one group per item (a group
source) -> group post-processors -> dynamic sampling (with over-sampling rounds).

The default group source (``RolloutGroups``) runs G episodes of a task under the harness the
selector picks (H0 by default); a method may bring its own (Harness-R1: K engineer samples of a
failure packet, each scored by re-running the target), through ``train.extensions``.
Post-processors transform a finished group before its advantages (Harness-S's rescue, ...).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Awaitable, Callable, Optional, Sequence

from harness_jax.train import groups as groups_lib
from harness_jax.train.data import TaskStream
from harness_jax.train.groups import Group

# async group(item, step, index) -> Group | None
GroupSource = Callable[[Any, int, int], Awaitable[Optional[Group]]]


@dataclasses.dataclass
class Batch:
    """One rollout batch, ready for the learner."""

    step: int                          # loop step it was collected for
    groups: list[Group]
    stream_state_before: dict          # task-stream position before its tasks were drawn
    dropped_groups: int = 0            # dynamic sampling
    oversample_rounds: int = 0
    rollout_s: float = 0.0
    collect_started_version: int = 0   # the engine's weight version when collection started


class RolloutGroups:
    """The default group source: ``group_size`` episodes of a task under the harness
    ``selector(task, step)`` chooses, seeded by (seed, step, index); infrastructure failures
    leave the group (they are not task failures)."""

    def __init__(self, runner, selector, *, group_size: int, seed: int):
        self.runner = runner
        self.selector = selector
        self.group_size = int(group_size)
        self.seed = int(seed)

    async def __call__(self, task, step: int, index: int) -> Optional[Group]:
        harness = self.selector(task, step)
        gid = f"s{step}-g{index}-{task.task_id}"
        episodes = await self.runner.run(task, harness, self.group_size, gid,
                                         seed=episode_seed(self.seed, step, index))
        ok = [e for e in episodes if not e.infra_error]
        return Group(gid, task, ok, harness_id=harness_id(harness), info={"infra_errors": len(episodes) - len(ok)})


class Collector:
    """Collects the rollout batch of a step (``collect(step)``; thread-safe per call).
    ``spec``: ``train.spec.CollectorSpec``."""

    def __init__(self, spec, runner, stream: TaskStream, group: GroupSource, post_processors: Sequence[Any] = ()):
        self.tasks_per_step = int(spec.tasks_per_step)
        self.dynamic_sampling = spec.dynamic_sampling
        self.max_oversample_rounds = int(spec.max_oversample_rounds)
        self.runner = runner
        self.stream = stream
        self.group = group
        self.post_processors = list(post_processors)

    async def _group(self, task, step: int, index: int) -> Optional[Group]:
        group = await self.group(task, step, index)
        for pp in self.post_processors:
            if group is None:
                break
            group = await pp(group, self.runner.rollout_fn, step)
        return group

    async def _groups(self, tasks, step: int, first_index: int):
        got = await asyncio.gather(*[self._group(t, step, first_index + i) for i, t in enumerate(tasks)])
        return groups_lib.dynamic_sampling_filter([g for g in got if g is not None], self.dynamic_sampling)

    def collect(self, step: int) -> Batch:
        return asyncio.run(self._collect(step))

    async def _collect(self, step: int) -> Batch:
        t0 = time.perf_counter()
        state_before = self.stream.state()
        version0 = int(self.runner.engine.weight_version)
        kept, dropped = await self._groups(self.stream.take(self.tasks_per_step), step, 0)
        n_dropped, rounds = len(dropped), 0
        while (self.dynamic_sampling == "oversample" and len(kept) < self.tasks_per_step
               and rounds < self.max_oversample_rounds):
            rounds += 1
            k2, d2 = await self._groups(self.stream.take(self.tasks_per_step - len(kept)), step, 1000 * rounds)
            kept += k2
            n_dropped += len(d2)
        return Batch(step, kept, state_before, n_dropped, rounds, time.perf_counter() - t0, version0)


def episode_seed(seed: int, step: int, index: int) -> int:
    return (int(seed) * 1_000_003 + step * 10_007 + index) % (2 ** 31 - 1)


def harness_id(h) -> str:
    for attr in ("sibling_id", "harness_id", "id", "name"):
        v = getattr(h, attr, None)
        if isinstance(v, str) and v:
            return v
    return type(h).__name__
