"""Rollout collection of one GRPO step: tasks from the stream -> G episodes per task under the
selected harness -> group post-processors -> dynamic sampling (with over-sampling rounds).

Hooks (Harness-S plugs in here without touching the loop): ``harness_selector(task, step)``
chooses the harness a group is rolled out under (H0 by default); ``post_processors`` transform a
finished group before its advantages (rescue, logging of routing decisions, ...).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Optional, Sequence

from harness_jax.train import groups as groups_lib
from harness_jax.train.data import TaskStream
from harness_jax.train.groups import Group


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


class Collector:
    """Collects the rollout batch of a step (``collect(step)``; thread-safe per call)."""

    def __init__(self, config, runner, stream: TaskStream, harness_selector, post_processors: Sequence[Any] = ()):
        rl = config.rl
        self.seed = int(config.seed)
        self.group_size = int(rl.group_size)
        self.tasks_per_step = int(rl.tasks_per_step)
        self.dynamic_sampling = rl.dynamic_sampling
        self.max_oversample_rounds = int(rl.max_oversample_rounds)
        self.runner = runner
        self.stream = stream
        self.harness_selector = harness_selector
        self.post_processors = list(post_processors)

    async def _group(self, task, step: int, index: int) -> Optional[Group]:
        harness = self.harness_selector(task, step)
        gid = f"s{step}-g{index}-{task.task_id}"
        episodes = await self.runner.run(task, harness, self.group_size, gid,
                                         seed=episode_seed(self.seed, step, index))
        ok = [e for e in episodes if not e.infra_error]   # infra failures are not task failures
        group = Group(gid, task, ok, harness_id=harness_id(harness),
                      info={"infra_errors": len(episodes) - len(ok)})
        for pp in self.post_processors:
            group = await pp(group, self.runner.rollout_fn, step)
            if group is None:
                break
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
