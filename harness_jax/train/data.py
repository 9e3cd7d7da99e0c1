"""The task stream: a grain pipeline over an environment's task split.

Deterministic by seed (the order is a function of ``seed`` and the task list only), shuffled
anew every epoch, infinite (epochs repeat), and checkpointable: ``state()`` is a small JSON-able
dict that goes into the training checkpoint, and ``restore(state)`` continues with exactly the
tasks that would have come next. Tasks are pulled one at a time, so dynamic sampling can ask for
replacement tasks without disturbing the order of the rest.

``tasks`` is a list, or any random-access source (``len`` and ``[i]``) such as a built task set's
``harness_jax.data.tasksets.open_split(...)`` (ArrayRecord through grain, decoded on access):
grain reads it directly, and a list and a source with the same tasks give the same stream and
the same checkpoint state for a seed.
"""
from __future__ import annotations

from typing import Any, Sequence

import grain

from harness_jax.envs.base import Task
from harness_jax.envs.registry import SealedSplitError


class TaskStream:
    """Infinite, shuffled, checkpointable iterator over ``tasks``."""

    def __init__(self, tasks: Sequence[Task], seed: int):
        if getattr(tasks, "split", None) == "test":
            raise SealedSplitError("TaskStream: a test-split task source was given; training reads "
                                   "train/search/selection only")
        if len(tasks) == 0:
            raise ValueError("TaskStream: the task split is empty; check config.env.num_tasks, the "
                             "env family's section (config.env.<name>) and config.env.train_split")
        self._tasks = list(tasks) if isinstance(tasks, (list, tuple)) else tasks
        self._seed = int(seed)
        self._dataset = (grain.MapDataset.source(self._tasks)
                         .shuffle(seed=self._seed)
                         .repeat(None)
                         .to_iter_dataset())
        self._it = iter(self._dataset)
        self.num_taken = 0

    def __len__(self) -> int:
        return len(self._tasks)

    def next(self) -> Task:
        self.num_taken += 1
        return next(self._it)

    def take(self, n: int) -> list[Task]:
        return [self.next() for _ in range(n)]

    def state(self) -> dict[str, Any]:
        """JSON-serialisable position in the stream (goes into checkpoints)."""
        return {"grain": _jsonable(self._it.get_state()), "seed": self._seed,
                "num_tasks": len(self._tasks), "num_taken": self.num_taken}

    def restore(self, state: dict[str, Any]) -> None:
        if state.get("seed") != self._seed or state.get("num_tasks") != len(self._tasks):
            raise ValueError(
                f"TaskStream.restore: checkpoint was written for seed={state.get('seed')} over "
                f"{state.get('num_tasks')} tasks, this run has seed={self._seed} over {len(self._tasks)}; "
                "resume with the same config.seed and config.env (num_tasks, task_seed, section)")
        self._it = iter(self._dataset)
        self._it.set_state(state["grain"])
        self.num_taken = int(state.get("num_taken", 0))


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):
        return x.item()
    return x
