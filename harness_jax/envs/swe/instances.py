"""SWE-bench's instance schema: validation, loading real SWE-Gym / SWE-bench files, Tasks.

Fields (SWE-bench / SWE-Gym): ``instance_id``, ``repo``, ``base_commit``, ``patch``,
``test_patch``, ``problem_statement``, ``hints_text``, ``created_at``, ``version``,
``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``environment_setup_commit``. Hugging Face exports store
``FAIL_TO_PASS`` / ``PASS_TO_PASS`` as JSON-encoded strings; ``normalize_instance`` decodes them.
Instances generated here add ``split``, ``corpus`` (the project and its content hash) and
``mutation`` (the injected bug, for analysis only; agents never see it).
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional

from harness_jax.envs.base import SPLITS, Task

ENV_NAME = "swe"
REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "patch", "problem_statement",
                   "FAIL_TO_PASS", "PASS_TO_PASS")
OPTIONAL_FIELDS = ("test_patch", "hints_text", "created_at", "version",
                   "environment_setup_commit")
_STR_FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement",
               "hints_text", "created_at", "version", "environment_setup_commit")


class InstanceError(ValueError):
    """A malformed instance; the message names the instance and the field."""


def _name(inst, where: str) -> str:
    iid = inst.get("instance_id") if isinstance(inst, dict) else None
    return f"{where} (instance {iid!r})" if isinstance(iid, str) and iid else where


def normalize_instance(inst: dict, where: str = "instance") -> dict:
    """A validated copy with ``FAIL_TO_PASS`` / ``PASS_TO_PASS`` as lists of strings."""
    if not isinstance(inst, dict):
        raise InstanceError(f"{where}: expected a JSON object, got {type(inst).__name__}")
    who = _name(inst, where)
    out = dict(inst)
    for f in REQUIRED_FIELDS:
        if f not in out:
            raise InstanceError(f"{who}: missing field {f!r} (SWE-bench schema: "
                                f"{', '.join(REQUIRED_FIELDS)})")
    for f in _STR_FIELDS:
        if f in out and out[f] is not None and not isinstance(out[f], str):
            raise InstanceError(f"{who}.{f}: expected a string, got {type(out[f]).__name__}")
    for f in ("instance_id", "repo", "base_commit", "problem_statement"):
        if not out[f].strip():
            raise InstanceError(f"{who}.{f}: empty")
    for f in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        v = out[f]
        if isinstance(v, str):
            try:
                v = json.loads(v)
            except json.JSONDecodeError as e:
                raise InstanceError(f"{who}.{f}: a string that is not a JSON list ({e.msg}); "
                                    "give a list of test ids") from e
        if not isinstance(v, list) or not all(isinstance(t, str) and t for t in v):
            raise InstanceError(f"{who}.{f}: expected a list of non-empty test id strings")
        out[f] = v
    if not out["FAIL_TO_PASS"]:
        raise InstanceError(f"{who}.FAIL_TO_PASS: empty; an instance needs at least one test "
                            "that the fix makes pass")
    if "patch" in out and out["patch"] and "diff --git" not in out["patch"]:
        raise InstanceError(f"{who}.patch: not a git diff (no 'diff --git' header)")
    split = out.get("split")
    if split is not None and split not in SPLITS:
        raise InstanceError(f"{who}.split: {split!r} is not one of {SPLITS}")
    for f in OPTIONAL_FIELDS:
        out.setdefault(f, "")
    return out


def is_generated(inst: dict) -> bool:
    """True for instances built from the project's own corpus (gradable offline)."""
    return isinstance(inst.get("corpus"), dict) and "project" in inst["corpus"]


def load_instances(path: str) -> list[dict]:
    """Reads SWE-bench / SWE-Gym instances from ``.jsonl`` (one per line), a ``.json`` list, or
    a ``.json`` object ``{"instances": [...]}``; every instance is validated."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"instance file {path!r} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    items: list
    if path.endswith(".jsonl"):
        items = []
        for i, line in enumerate(text.splitlines()):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise InstanceError(f"{path}:{i + 1}: not valid JSON ({e.msg})") from e
        where = [f"{path}:{i + 1}" for i in range(len(items))]
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InstanceError(f"{path}: not valid JSON ({e.msg} at char {e.pos})") from e
        items = data.get("instances") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise InstanceError(f"{path}: expected a list of instances (or "
                                "{'instances': [...]})")
        where = [f"{path}[{i}]" for i in range(len(items))]
    return [normalize_instance(x, w) for x, w in zip(items, where)]


def save_instances(instances: Iterable[dict], path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for inst in instances:
            f.write(json.dumps(inst, sort_keys=True) + "\n")


def make_task(inst: dict, split: Optional[str] = None) -> Task:
    """A ``Task`` for ``inst`` (split: the instance's own, else ``train``). Test tasks go
    through the registry's seal."""
    inst = normalize_instance(inst)
    split = split or inst.get("split") or "train"
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    category = (inst.get("mutation") or {}).get("kind") or inst["repo"]
    return Task(env_name=ENV_NAME, data=inst, split=split, category=category)
