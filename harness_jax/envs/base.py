"""The environment protocol every benchmark implements (async first, sync wrappers).

An action is either text (text protocol: the policy's raw reply, parsed by the environment's
text-action parser) or a ``ToolCall`` (function-calling protocol). ``StepResult.info`` may carry
``"infra_error": True`` when the environment itself failed (engine down, timeout of the
environment's own machinery): executors retry those and never count them as task failures.
``info["error"]`` (a string) says that the action itself failed (a SQL error, an invalid or
no-op command); the executor hands it to lifecycle hooks as ``ctx.last_error``.
"""
from __future__ import annotations

import abc
import asyncio
import dataclasses
import hashlib
import json
from typing import Any, Optional, Union

from harness_jax.envs.splits import SPLITS, check_split, check_test_access
from harness_jax.types import ToolCall

__all__ = ["SPLITS", "Action", "BlockingEnv", "Env", "InfraError", "StepResult", "Task", "teacher_reply",
           "ToolCall", "content_hash"]


class InfraError(RuntimeError):
    """The environment's own machinery failed (engine unreachable, game server crashed): raised
    by ``reset``; executors retry it and never count it as a task failure."""


Action = Union[str, ToolCall]


@dataclasses.dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict = dataclasses.field(default_factory=dict)


def content_hash(obj: Any, n: int = 16) -> str:
    """Stable identity of a JSON-serialisable object (sorted keys, compact separators)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:n]


@dataclasses.dataclass(frozen=True)
class Task:
    env_name: str
    data: dict                      # the benchmark's own record (e.g. one AgentBench DB item)
    split: str = "train"
    category: Optional[str] = None  # per-category metrics (e.g. DBBench "counting", ALFWorld task type)

    def __post_init__(self):
        # the one place the sealed test split is enforced (see harness_jax.envs.splits)
        check_split(self.split)
        if self.split == "test":
            check_test_access(f"making a {self.env_name!r} task with split='test'")

    @property
    def task_id(self) -> str:
        return f"{self.env_name}-{content_hash(self.data)}"


PROTOCOLS = ("text", "function")   # how actions reach an environment: parsed text, or ToolCall


class Env(abc.ABC):
    """One episode at a time; create one Env per concurrent episode."""

    name: str = "env"
    protocol: str = "text"  # one of PROTOCOLS
    # episodes one process may run at once (None: any number; 1: the family's engine is not
    # thread-safe, so episode workers run one of its episodes per process)
    process_concurrency: Optional[int] = None

    @abc.abstractmethod
    async def areset(self, task: Task) -> str:
        """Starts an episode; returns the first observation (the task prompt as text)."""

    @abc.abstractmethod
    async def astep(self, action: Action) -> StepResult:
        ...

    @abc.abstractmethod
    async def aevaluate(self) -> dict:
        """Final scoring of the episode: at least {"success": bool, "score": float}."""

    async def aclose(self) -> None:
        return None

    def tool_specs(self) -> list[dict]:
        """JSON-schema tool specs for the function-calling protocol (OpenAI/Qwen style)."""
        return []

    # -- synchronous wrappers ------------------------------------------------------------
    def reset(self, task: Task) -> str:
        return _run(self.areset(task))

    def step(self, action: Action) -> StepResult:
        return _run(self.astep(action))

    def evaluate(self) -> dict:
        return _run(self.aevaluate())

    def close(self) -> None:
        return _run(self.aclose())


def teacher_reply(task: "Task", protocol: str = "text") -> list:
    """The one reply of a one-turn toy family's weak teacher, stored with the task as
    ``task.data["teacher"]``: the family's registered SFT demonstration (``EnvSpec.demos``)."""
    return [task.data["teacher"]]


class OneTurnAnswerEnv(Env):
    """One turn: the first observation is ``observe(task)``; the reply (stripped) must equal
    ``task.data["answer"]`` (reward 1, else 0). The toy families (``kv_lookup``, the learning
    test's ``word_label``) differ only in what they show."""

    protocol = "text"

    def __init__(self):
        self.task = None
        self.solved = False

    @abc.abstractmethod
    def observe(self, task: Task) -> str:
        """The task's prompt."""

    async def areset(self, task: Task) -> str:
        self.task, self.solved = task, False
        return self.observe(task)

    async def astep(self, action) -> StepResult:
        self.solved = str(action).strip() == self.task.data["answer"]
        return StepResult("", float(self.solved), True, {})

    async def aevaluate(self) -> dict:
        return {"success": self.solved, "score": float(self.solved)}


class BlockingEnv(Env):
    """An Env whose engine is blocking code (SQL drivers, game engines).

    Subclasses implement ``_reset_sync``, ``_step_sync``, ``_evaluate_sync`` and
    ``_close_sync``; the async API runs them in a worker thread (so many episodes share one
    event loop) and the synchronous API calls them directly (no event loop per call).
    """

    @abc.abstractmethod
    def _reset_sync(self, task) -> str: ...

    @abc.abstractmethod
    def _step_sync(self, action: Action) -> StepResult: ...

    @abc.abstractmethod
    def _evaluate_sync(self) -> dict: ...

    @abc.abstractmethod
    def _close_sync(self) -> None: ...

    async def areset(self, task) -> str:
        return await asyncio.to_thread(self._reset_sync, task)

    async def astep(self, action: Action) -> StepResult:
        return await asyncio.to_thread(self._step_sync, action)

    async def aevaluate(self) -> dict:
        return await asyncio.to_thread(self._evaluate_sync)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._close_sync)

    def reset(self, task) -> str:
        return self._reset_sync(task)

    def step(self, action: Action) -> StepResult:
        return self._step_sync(action)

    def evaluate(self) -> dict:
        return self._evaluate_sync()

    def close(self) -> None:
        self._close_sync()


def _run(coro):
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    raise RuntimeError("the synchronous Env wrappers cannot be called from a running event loop; "
                       "await the a* methods instead")
