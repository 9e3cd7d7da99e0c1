"""The asynchronous rollout producer: a thread that collects ahead of the learner, admission-
bounded by staleness (``rl.async_mode``, ``rl.max_staleness``)."""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Optional

from harness_jax.envs import registry
from harness_jax.train.collect import Batch
from harness_jax.train.data import TaskStream


class AsyncProducer:
    """Collects rollout batches on a background thread, admission-bounded by staleness.

    Batch i may start only when ``i - learner_steps_done <= max_staleness``; since collection
    starts with the weights of version >= i - max_staleness, every episode's lag at train time is
    at most ``max_staleness``. Finished batches are never discarded.
    """

    def __init__(self, collect: Callable[[int], Batch], stream: TaskStream, num_steps: int, max_staleness: int):
        self._collect = collect
        self._stream = stream
        self._num_steps = int(num_steps)
        self.k = int(max_staleness)
        self._q: "queue.Queue[Any]" = queue.Queue()
        self._cv = threading.Condition()
        self._done = 0
        self._closed = False
        self._pending_states: list[dict] = []   # stream states of batches produced, not yet trained
        self._thread: Optional[threading.Thread] = None

    def start(self, first_step: int) -> None:
        self._done = first_step
        self._thread = threading.Thread(target=self._work, args=(first_step,), daemon=True,
                                        name="rollout-producer")
        self._thread.start()

    def _work(self, first: int) -> None:
        try:
            with registry.training_scope("rollout-producer"):
                for i in range(first, self._num_steps):
                    with self._cv:
                        self._cv.wait_for(lambda: self._closed or i - self._done <= self.k)
                        if self._closed:
                            return
                    batch = self._collect(i)
                    with self._cv:
                        self._pending_states.append(batch.stream_state_before)
                    self._q.put(batch)
        except BaseException as e:  # surface the producer's failure in the learner thread
            self._q.put(e)

    def get(self) -> Batch:
        item = self._q.get()
        if isinstance(item, BaseException):
            raise RuntimeError(f"rollout producer failed: {item!r}") from item
        return item

    def step_done(self, steps_done: int) -> None:
        with self._cv:
            self._done = steps_done
            if self._pending_states:
                self._pending_states.pop(0)
            self._cv.notify_all()

    def resume_state(self) -> dict:
        """Stream position before the oldest batch not yet trained on (collected batches in
        flight are re-collected after a restart: same tasks, fresh rollouts)."""
        with self._cv:
            return self._pending_states[0] if self._pending_states else self._stream.state()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=600)
