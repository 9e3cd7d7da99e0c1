"""Task splits and the sealed test split.

Splits: ``train`` (policy training), ``search`` (harness evolution / search), ``selection``
(choosing among harnesses or checkpoints) and ``test`` (final evaluation). Generated families
draw each split from its own seed stream (``split_seed``), so splits never share a generator
seed; file-backed data is partitioned by the hash of each task's identity (``hash_partition``),
stable across runs and machines.

The seal is enforced in ONE place: making a ``Task`` with ``split="test"`` (``base.Task`` calls
``check_test_access``). Every loader, generator, partition or ``dataclasses.replace`` that
produces test tasks goes through it, so no family repeats the check. Test tasks can be made
only inside ``with sealed_test_access("why"):`` (the evaluation entry points), and never inside
an active ``training_scope()``: training and evolution loops enter one, so nothing they call
(callbacks included) can reach test data, not even by opening the seal itself. Both are
context variables: they follow the code that entered them through threads started with
``contextvars.copy_context`` and through asyncio tasks, and nothing inspects the call stack.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
from typing import Iterator, Optional, Sequence

SPLITS = ("train", "search", "selection", "test")
DEFAULT_FRACTIONS = {"train": 0.7, "search": 0.1, "selection": 0.1, "test": 0.1}

_TEST_ACCESS: contextvars.ContextVar = contextvars.ContextVar("hj_test_access", default=None)
_TRAINING: contextvars.ContextVar = contextvars.ContextVar("hj_training_scope", default=None)


class SealedSplitError(PermissionError):
    """Test data was requested outside an evaluation entry point."""


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")


@contextlib.contextmanager
def training_scope(name: str = "training") -> Iterator[None]:
    """Marks a training/evolution run: test tasks cannot be made inside it, not even through
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
    _refuse_in_training(f"sealed_test_access({purpose!r})")
    token = _TEST_ACCESS.set(purpose)
    try:
        yield
    finally:
        _TEST_ACCESS.reset(token)


def current_test_access() -> Optional[str]:
    return _TEST_ACCESS.get()


def _refuse_in_training(what: str) -> None:
    scope = _TRAINING.get()
    if scope is not None:
        raise SealedSplitError(f"{what}: the test split is sealed inside training_scope("
                               f"{scope!r}); training and evolution use train/search/selection")


def check_test_access(what: str) -> None:
    """Raises ``SealedSplitError`` unless test tasks may be made here and now."""
    _refuse_in_training(what)
    if _TEST_ACCESS.get() is None:
        raise SealedSplitError(
            f"{what}: the test split is sealed. Evaluation entry points load it inside "
            "`with harness_jax.envs.registry.sealed_test_access('<purpose>'):`; training, "
            "harness search and selection use the 'train', 'search' and 'selection' splits.")


def assert_no_test_tasks(tasks: Sequence, where: str = "training") -> None:
    """Guard for training/evolution inputs: refuses any task marked ``split='test'``."""
    bad = [t.task_id for t in tasks if getattr(t, "split", None) == "test"]
    if bad:
        raise SealedSplitError(f"{where}: {len(bad)} test-split task(s) given (e.g. {bad[0]}); "
                               "the test split is for evaluation only")


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


def partition_tasks(tasks: Sequence, split: str, fractions: Optional[dict] = None) -> list:
    """Keeps the tasks whose identity hash falls into ``split``, re-marked with that split
    (re-marking makes a new ``Task``, so test tasks pass the seal)."""
    check_split(split)
    return [dataclasses.replace(t, split=split) for t in tasks
            if hash_partition(t.task_id, fractions) == split]
