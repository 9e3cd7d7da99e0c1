"""AppWorld tasks as the registry's ``Task``: generated data trees and real AppWorld data bundles.

A task record (``Task.data``) names an AppWorld task inside a ``data/`` tree the real runtime
loads: ``{"task_id", "data_dir", "scenario_id", "difficulty", "instruction", "source", ...}``
(generated tasks add ``template``, ``variant`` and ``apps``). The scenario id is AppWorld's
generator id (the task id before ``_``); SGC groups tasks by it.

Real bundle splits (``load_split(split, data_dir=...)``): ``train`` and ``search`` partition
AppWorld's ``train`` dataset by scenario hash (80/20, so a scenario's tasks stay together),
``selection`` is ``dev``, ``test`` is ``test_normal`` (or ``test_dataset="test_challenge"``),
and ``test`` is sealed like every other test loader.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Optional, Sequence

from harness_jax.envs.base import Task
from harness_jax.envs.splits import check_split

ENV_NAME = "appworld"
REAL_DATASETS = ("train", "dev", "test_normal", "test_challenge")


def scenario_of(task_id: str) -> str:
    """AppWorld's generator (scenario) id of a task id like ``82e2fac_1``."""
    return task_id.split(":")[0].split("_")[0]


def make_task(record: dict, split: str = "train") -> Task:
    """A ``Task`` from a record (validated; ``split='test'`` goes through the seal)."""
    for field in ("task_id", "data_dir"):
        if not isinstance(record.get(field), str) or not record[field]:
            raise ValueError(f"AppWorld task record: field {field!r} is required (a string); got "
                             f"{record.get(field)!r}")
    check_split(split)
    rec = dict(record)
    rec.setdefault("scenario_id", scenario_of(rec["task_id"]))
    return Task(env_name=ENV_NAME, data=rec, split=split,
                category=rec.get("template") or f"difficulty_{rec.get('difficulty')}")


def check_data_dir(data_dir: str) -> str:
    """Absolute path of an AppWorld ``data/`` tree; a clear error when it is not one."""
    d = os.path.abspath(os.path.expanduser(data_dir))
    missing = [x for x in ("base_dbs", "tasks", "api_docs") if not os.path.isdir(os.path.join(d, x))]
    if missing:
        raise FileNotFoundError(
            f"{d} is not an AppWorld data tree (missing {', '.join(missing)}/). Give the `data/` "
            "directory of AppWorld's release bundle (`appworld download data` on a machine with "
            "network access) or generate one with harness_jax.envs.appworld.generate_tasks(...)")
    return d


@functools.lru_cache(maxsize=64)
def read_index(data_dir: str) -> dict:
    """The generator's sidecar index (task id -> record with oracle/wrong cells), or {}."""
    path = os.path.join(data_dir, "harness_jax", "index.jsonl")
    if not os.path.isfile(path):
        return {}
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                out[rec["task_id"]] = rec
    return out


def _task_record(data_dir: str, task_id: str, source: str) -> dict:
    tdir = os.path.join(data_dir, "tasks", task_id)
    spec_path = os.path.join(tdir, "specs.json")
    if not os.path.isfile(spec_path):
        raise FileNotFoundError(f"AppWorld task {task_id!r}: {spec_path} does not exist")
    with open(spec_path) as f:
        specs = json.load(f)
    difficulty = None
    meta_path = os.path.join(tdir, "ground_truth", "metadata.json")
    if os.path.isfile(meta_path):
        with open(meta_path) as f:
            difficulty = json.load(f).get("difficulty")
    rec = {"task_id": task_id, "data_dir": data_dir, "scenario_id": scenario_of(task_id),
           "difficulty": difficulty, "instruction": specs.get("instruction", ""), "source": source}
    side = read_index(data_dir).get(task_id)
    if side:
        rec.update(template=side["template"], variant=side["variant"], apps=side["apps"])
    return rec


def dataset_ids(data_dir: str, dataset: str) -> list:
    path = os.path.join(data_dir, "datasets", dataset + ".txt")
    if not os.path.isfile(path):
        have = sorted(x[:-4] for x in os.listdir(os.path.join(data_dir, "datasets"))
                      if x.endswith(".txt")) if os.path.isdir(os.path.join(data_dir, "datasets")) else []
        raise FileNotFoundError(f"AppWorld dataset {dataset!r}: {path} does not exist "
                                f"(datasets here: {have})")
    with open(path) as f:
        return [ln.split(":")[0].strip() for ln in f if ln.strip()]


def load_tasks(data_dir: str, dataset: str = "train", split: str = "train",
               difficulty: Optional[int] = None, limit: Optional[int] = None) -> list:
    """Tasks of ``datasets/<dataset>.txt`` in an AppWorld data tree (real or generated).

    Test datasets (``test_*``) and ``split='test'`` are sealed (``registry.sealed_test_access``).
    """
    d = check_data_dir(data_dir)
    if dataset.startswith("test"):   # AppWorld's own test datasets are test data whatever split
        from harness_jax.envs import splits
        splits.check_test_access(f"appworld.load_tasks(dataset={dataset!r})")
    check_split(split)
    out = []
    for tid in dataset_ids(d, dataset):
        rec = _task_record(d, tid, f"{os.path.basename(os.path.dirname(d)) or d}:{dataset}")
        if difficulty is not None and rec["difficulty"] != difficulty:
            continue
        out.append(make_task(rec, split))
        if limit is not None and len(out) >= limit:
            break
    return out


def _scenario_bucket(scenario: str) -> float:
    return int.from_bytes(hashlib.sha256(f"appworld-split|{scenario}".encode()).digest()[:8],
                          "big") / 2.0 ** 64


def load_bundle_split(split: str, data_dir: str, test_dataset: str = "test_normal",
                      search_fraction: float = 0.2, difficulty: Optional[int] = None,
                      limit: Optional[int] = None) -> list:
    """A registry split of a real AppWorld data bundle (see the module docstring)."""
    check_split(split)
    if split == "test":
        if not test_dataset.startswith("test"):
            raise ValueError(f"test_dataset={test_dataset!r}: expected test_normal or "
                             "test_challenge")
        return load_tasks(data_dir, test_dataset, split="test", difficulty=difficulty,
                          limit=limit)
    if split == "selection":
        return load_tasks(data_dir, "dev", split="selection", difficulty=difficulty, limit=limit)
    tasks = load_tasks(data_dir, "train", split=split, difficulty=difficulty)
    want_search = split == "search"
    tasks = [t for t in tasks
             if (_scenario_bucket(t.data["scenario_id"]) < search_fraction) == want_search]
    return tasks[:limit] if limit is not None else tasks


def scenario_map(tasks: Sequence[Task]) -> dict:
    """task_id -> scenario id, for ``metrics.tgc_sgc``."""
    return {t.task_id: t.data.get("scenario_id", scenario_of(t.data["task_id"])) for t in tasks}
