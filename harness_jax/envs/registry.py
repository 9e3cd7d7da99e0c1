"""Environments by name, task splits, and the sealed test split.

    env = registry.make("dbbench", engine="sqlite", protocol="text")
    tasks = registry.load_split("dbbench", "train", n=256, seed=0)

Splits: ``train`` (policy training), ``search`` (harness evolution / search), ``selection``
(choosing among harnesses or checkpoints) and ``test`` (final evaluation). Generated families
draw each split from its own seed stream, so splits never share a generator seed; file-backed
data is partitioned by the hash of each task's content (stable across runs and machines).

The test split is **sealed**: ``load_split(..., "test")`` (and every other loader of test data,
e.g. ``dbbench.load_tasks(..., split="test")``) raises ``SealedSplitError`` unless it runs
inside ``with sealed_test_access("why"):``, and even then it raises when the call comes from
training or evolution code: any frame of a module under ``TRAINING_MODULE_PREFIXES`` on the
call stack, or an active ``training_scope()`` (training loops enter it, so test data cannot be
reached from anything they call, including callbacks that try to unseal it themselves).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import inspect
from typing import Any, Callable, Iterator, Optional, Sequence

from harness_jax.envs.base import SPLITS, Env, Task

# Modules that train the policy or evolve harnesses: never allowed to load test data.
TRAINING_MODULE_PREFIXES: list = [
    "harness_jax.rl",
    "harness_jax.harness.evolution",
    "harness_jax.harness.evolve",
    "harness_jax.harness.router",
    "harness_jax.train",
]

_TEST_ACCESS: contextvars.ContextVar = contextvars.ContextVar("hj_test_access", default=None)
_TRAINING: contextvars.ContextVar = contextvars.ContextVar("hj_training_scope", default=None)


class SealedSplitError(PermissionError):
    """Test data was requested outside an evaluation entry point."""


def register_training_module(prefix: str) -> None:
    """Adds a module prefix whose code may never load the test split."""
    if prefix not in TRAINING_MODULE_PREFIXES:
        TRAINING_MODULE_PREFIXES.append(prefix)


def _training_frame() -> Optional[str]:
    frame = inspect.currentframe()
    try:
        while frame is not None:
            mod = frame.f_globals.get("__name__", "")
            for p in TRAINING_MODULE_PREFIXES:
                if mod == p or mod.startswith(p + "."):
                    return mod
            frame = frame.f_back
        return None
    finally:
        del frame


@contextlib.contextmanager
def training_scope(name: str = "training") -> Iterator[None]:
    """Marks a training/evolution run: test data cannot be loaded inside it, not even through
    ``sealed_test_access``."""
    token = _TRAINING.set(name)
    try:
        yield
    finally:
        _TRAINING.reset(token)


@contextlib.contextmanager
def sealed_test_access(purpose: str) -> Iterator[None]:
    """Unseals the test split for an evaluation entry point (``purpose`` is recorded in the
    error messages and ``current_test_access()``)."""
    if not isinstance(purpose, str) or not purpose.strip():
        raise ValueError("sealed_test_access(purpose): give a non-empty reason, e.g. "
                         "'final evaluation of run X'")
    _refuse_from_training(f"sealed_test_access({purpose!r})")
    token = _TEST_ACCESS.set(purpose)
    try:
        yield
    finally:
        _TEST_ACCESS.reset(token)


def current_test_access() -> Optional[str]:
    return _TEST_ACCESS.get()


def _refuse_from_training(what: str) -> None:
    scope = _TRAINING.get()
    if scope is not None:
        raise SealedSplitError(f"{what}: the test split is sealed inside training_scope("
                               f"{scope!r}); training and evolution use train/search/selection")
    mod = _training_frame()
    if mod is not None:
        raise SealedSplitError(f"{what}: called from training/evolution code ({mod}); the test "
                               "split is only for evaluation entry points")


def check_test_access(what: str) -> None:
    """Raises ``SealedSplitError`` unless test data may be loaded here and now."""
    _refuse_from_training(what)
    if _TEST_ACCESS.get() is None:
        raise SealedSplitError(
            f"{what}: the test split is sealed. Evaluation entry points load it inside "
            "`with harness_jax.envs.registry.sealed_test_access('<purpose>'):`; training, "
            "harness search and selection use the 'train', 'search' and 'selection' splits.")


def assert_no_test_tasks(tasks: Sequence[Task], where: str = "training") -> None:
    """Guard for training/evolution inputs: refuses any task marked ``split='test'``."""
    bad = [t.task_id for t in tasks if getattr(t, "split", None) == "test"]
    if bad:
        raise SealedSplitError(f"{where}: {len(bad)} test-split task(s) given (e.g. {bad[0]}); "
                               "the test split is for evaluation only")


# --------------------------------------------------------------------------------------------
# Split helpers
# --------------------------------------------------------------------------------------------
DEFAULT_FRACTIONS = {"train": 0.7, "search": 0.1, "selection": 0.1, "test": 0.1}


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")


def split_seed(split: str, seed: int, index: int = 0) -> int:
    """A seed owned by ``split``: different splits never draw the same generator seed."""
    check_split(split)
    h = hashlib.sha256(f"{split}|{int(seed)}|{int(index)}".encode()).digest()
    return int.from_bytes(h[:6], "big")


def hash_partition(key: str, fractions: Optional[dict] = None) -> str:
    """Assigns a task to a split from the hash of its identity (stable, uniform)."""
    fr = dict(DEFAULT_FRACTIONS if fractions is None else fractions)
    unknown = set(fr) - set(SPLITS)
    if unknown:
        raise ValueError(f"fractions: unknown split(s) {sorted(unknown)}; use {SPLITS}")
    total = sum(fr.values())
    if total <= 0 or any(v < 0 for v in fr.values()):
        raise ValueError(f"fractions={fr}: need non-negative values with a positive sum")
    u = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64
    acc = 0.0
    for s in SPLITS:
        acc += fr.get(s, 0.0) / total
        if u < acc:
            return s
    return [s for s in SPLITS if fr.get(s, 0.0) > 0][-1]


def partition_tasks(tasks: Sequence[Task], split: str, fractions: Optional[dict] = None,
                    ) -> list[Task]:
    """Keeps the tasks whose content hash falls into ``split``, re-marked with that split."""
    check_split(split)
    return [dataclasses.replace(t, split=split) for t in tasks
            if hash_partition(t.task_id, fractions) == split]


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EnvSpec:
    name: str
    make: Callable[..., Env]
    load_split: Callable[..., list]       # (split, **kw) -> list[Task]
    description: str = ""


_REGISTRY: dict = {}


def register(spec: EnvSpec) -> None:
    _REGISTRY[spec.name] = spec


def names() -> list:
    _ensure_builtins()
    return sorted(_REGISTRY)


def spec(name: str) -> EnvSpec:
    _ensure_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def make(name: str, **kw: Any) -> Env:
    """A new environment instance (one episode at a time)."""
    return spec(name).make(**kw)


def load_split(name: str, split: str, **kw: Any) -> list:
    """The tasks of ``split`` for environment ``name`` (see each family's loader for ``kw``).
    ``split="test"`` is sealed (module docstring)."""
    check_split(split)
    if split == "test":
        check_test_access(f"load_split({name!r}, 'test')")
    tasks = spec(name).load_split(split, **kw)
    for t in tasks:
        if t.split != split:
            raise RuntimeError(f"load_split({name!r}, {split!r}) produced a task marked "
                               f"{t.split!r}: loader bug")
    return tasks


# -- built-in families (imported lazily: textworld/alfworld are heavy) -----------------------
def _dbbench_make(**kw):
    from harness_jax.envs.dbbench import DBBenchEnv
    return DBBenchEnv(**kw)


def _dbbench_split(split: str, n: int = 100, seed: int = 0, path: Optional[str] = None,
                   fractions: Optional[dict] = None, categories: Optional[Sequence] = None):
    """From ``path`` (AgentBench jsonl, partitioned by content hash) or the generator
    (``n`` tasks from the split's own seed stream)."""
    from harness_jax.envs.dbbench import data as dbdata
    from harness_jax.envs.dbbench import generator
    if path is not None:
        tasks = dbdata.tasks_from_items(dbdata.read_items(path), split="train", source=path)
        return partition_tasks(tasks, split, fractions)
    items = generator.generate_items(n, seed=split_seed(split, seed), categories=categories)
    return dbdata.tasks_from_items(items, split=split, source=f"generated[{split}]")


def _alfworld_make(**kw):
    from harness_jax.envs.alfworld import ALFWorldEnv
    return ALFWorldEnv(**kw)


def _alfworld_split(split: str, **kw):
    from harness_jax.envs.alfworld import load_split as alf_split
    return alf_split(split, **kw)


def _textworld_make(**kw):
    from harness_jax.envs.textworld_env import TextWorldEnv
    return TextWorldEnv(**kw)


def _textworld_split(split: str, **kw):
    from harness_jax.envs.textworld_env import load_split as tw_split
    return tw_split(split, **kw)


_BUILTINS_DONE = False


def _ensure_builtins() -> None:
    global _BUILTINS_DONE
    if _BUILTINS_DONE:
        return
    _BUILTINS_DONE = True
    for s in (
        EnvSpec("dbbench", _dbbench_make, _dbbench_split,
                "AgentBench DB on SQLite or MariaDB; generated or file-backed tasks"),
        EnvSpec("alfworld", _alfworld_make, _alfworld_split,
                "ALFWorld text games on the real alfworld engine; generated game.tw-pddl"),
        EnvSpec("textworld", _textworld_make, _textworld_split,
                "TextWorld tw-make games (coin collector, cooking, custom quests)"),
    ):
        _REGISTRY.setdefault(s.name, s)
    from harness_jax.envs.webshop.family import SPEC as _WEBSHOP  # families register themselves
    _REGISTRY.setdefault(_WEBSHOP.name, _WEBSHOP)
