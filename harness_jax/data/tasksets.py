"""Task sets as TFDS datasets (ArrayRecord): which families can be built, and reading them back.

A *task set* is one environment family's four splits (``train``, ``search``, ``selection``,
``test``) exactly as ``envs.registry.load_split(family, split, **kwargs)`` produces them
(generated from each split's own seed stream, or partitioned from the user's real files by
content hash), frozen into a versioned TFDS dataset::

    <data_dir>/<family>_tasks/<config name>/<version>/
        dataset_info.json features.json metadata.json
        <family>_tasks-<split>.array_record-0000i-of-0000n

Building (``launch/build_tasksets.py``, ``harness_jax.data.tfds_builder``) needs the ``tfds``
extra (tensorflow-datasets; no TensorFlow). Reading needs neither TensorFlow nor the builder:
``open_split`` returns a random-access source of ``Task`` objects on grain's
``ArrayRecordDataSource`` (records decoded with the dataset's own TFDS feature spec), which the
training loop's ``TaskStream`` consumes like a list. Records keep the registry's order
(``disable_shuffling``), so a stream over the built split equals a stream over
``registry.load_split`` for the same seed.

The test split stays sealed: ``open_split(..., "test")`` goes through
``registry.check_test_access`` (evaluation entry points only, never from training code), and
building it happens inside ``sealed_test_access``.

Adding a family: register its loader with the environment registry as usual, then one entry in
``_BUILTINS`` below (or, outside this package, one call)::

    tasksets.register(tasksets.TaskSetSpec("myfamily", version="1.0.0",
                                           default_kwargs={"n": 500, "seed": 0}))

Bump ``version`` whenever the records the family's loader produces for the same arguments change
(generator fixes, new fields): a dataset of an older version is then never read by mistake.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Callable, Optional

import grain

from harness_jax.envs.base import SPLITS, Task
from harness_jax.envs import registry


@dataclasses.dataclass(frozen=True)
class TaskSetSpec:
    family: str                           # environment registry name (``registry.names()``)
    version: str                          # dataset version "X.Y.Z"; bump when records change
    default_kwargs: dict = dataclasses.field(default_factory=dict)  # load_split kwargs when none given
    description: str = ""
    release_notes: dict = dataclasses.field(default_factory=dict)   # {version: what changed}
    load: Optional[Callable] = None       # (split, **kw) -> list[Task]; default registry.load_split

    def tasks(self, split: str, **kw) -> list[Task]:
        if self.load is not None:
            return list(self.load(split, **kw))
        return registry.load_split(self.family, split, **kw)


_SPECS: dict = {}


def register(spec: TaskSetSpec) -> None:
    if not re.fullmatch(r"\d+\.\d+\.\d+", spec.version):
        raise ValueError(f"TaskSetSpec({spec.family!r}).version={spec.version!r}: expected 'X.Y.Z'")
    _SPECS[spec.family] = spec


def families() -> list[str]:
    _ensure_builtins()
    return sorted(_SPECS)


def spec(family: str) -> TaskSetSpec:
    _ensure_builtins()
    if family not in _SPECS:
        raise KeyError(f"no task set registered for {family!r}; registered: {sorted(_SPECS)}. Add one with "
                       "harness_jax.data.tasksets.register(TaskSetSpec(family, version=...))")
    return _SPECS[family]


def _ensure_builtins() -> None:
    for spec in _BUILTINS:
        _SPECS.setdefault(spec.family, spec)


_BUILTINS = (
    TaskSetSpec("dbbench", version="1.0.0", default_kwargs={"n": 256, "seed": 0},
                description="AgentBench DB tasks: generated (n per split from the split's seed stream) or an "
                            "AgentBench jsonl (path=..., partitioned by content hash); self-contained",
                release_notes={"1.0.0": "generator of harness_jax.envs.dbbench.generator; AgentBench v0.2 items"}),
    TaskSetSpec("alfworld", version="1.0.0", default_kwargs={"n": 12, "seed": 0},
                description="ALFWorld games: generated records (PDDL problem, goal, expert walkthrough; "
                            "self-contained) or real games (data_dir=...; records reference the game files, "
                            "which must stay at that path)",
                release_notes={"1.0.0": "generator of harness_jax.envs.alfworld.generator"}),
    TaskSetSpec("webshop", version="1.0.0", default_kwargs={"n": 100, "seed": 0},
                description="WebShop goals on a generated catalog (records name the catalog's kind, size and "
                            "seed; the env regenerates it) or WebShop's own files (products=, attributes=)",
                release_notes={"1.0.0": "harness_jax.envs.webshop generator and goal partition"}),
    TaskSetSpec("swe", version="1.0.0", default_kwargs={"n": 20, "seed": 0},
                description="SWE-Gym-style instances in SWE-bench's schema, generated from the in-repository "
                            "corpus (self-contained: commits, patches, tests) or a SWE-bench/SWE-Gym file (path=)",
                release_notes={"1.0.0": "harness_jax.envs.swe generator (AST bug injection)"}),
    TaskSetSpec("appworld", version="1.0.0", default_kwargs={"n": 30, "seed": 0},
                description="AppWorld tasks: generated (records reference the generated data tree under the "
                            "builder's cache, which must be visible where the tasks run) or the real data bundle "
                            "(data_dir=...)",
                release_notes={"1.0.0": "harness_jax.envs.appworld generator templates"}),
)


# ------------------------------------------------------------------------------ naming
def dataset_name(family: str) -> str:
    return f"{family}_tasks"


def config_name(kwargs: dict, split_kwargs: Optional[dict] = None) -> str:
    """A readable builder-config name from the loader arguments (``{"n": 256, "seed": 0}`` ->
    ``n256-seed0``; ``split_kwargs={"test": {"n": 64}}`` adds ``test.n64``); path-like or long
    values are hashed."""
    items = sorted(kwargs.items()) + sorted((f"{s}.{k}", v) for s, kw in (split_kwargs or {}).items()
                                            for k, v in kw.items())
    if not items:
        return "default"
    parts = []
    for k, v in items:
        text = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list, tuple)) else str(v)
        if isinstance(v, str) and ("/" in v or len(v) > 24):
            text = hashlib.sha256(v.encode()).hexdigest()[:8]
        parts.append(f"{k}{text}")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts)).strip("_")
    if len(name) > 80:
        name = name[:71] + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


def dataset_dir(data_dir: str, family: str, config: str, version: Optional[str] = None) -> str:
    """``<data_dir>/<family>_tasks/<config>/<version>`` (the newest built version when None)."""
    base = os.path.join(os.path.expanduser(data_dir), dataset_name(family), config)
    if version is None:
        versions = [v for v in (os.listdir(base) if os.path.isdir(base) else [])
                    if re.fullmatch(r"\d+\.\d+\.\d+", v) and os.path.exists(os.path.join(base, v, "dataset_info.json"))]
        if not versions:
            raise FileNotFoundError(f"no built {dataset_name(family)}/{config} under {data_dir!r}; build it with "
                                    f"python launch/build_tasksets.py --family={family} --data_dir={data_dir}")
        version = max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    return os.path.join(base, version)


# ------------------------------------------------------------------------------ records
def to_record(task: Task, index: int) -> dict:
    """One TFDS example: the task's identity, category and its benchmark record as JSON."""
    return {"index": int(index), "task_id": task.task_id, "env_name": task.env_name,
            "category": task.category or "",
            "data": json.dumps(task.data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))}


def from_record(ex: dict, split: str) -> Task:
    def text(v):
        return v.decode("utf-8") if isinstance(v, bytes) else str(v)
    t = Task(env_name=text(ex["env_name"]), data=json.loads(text(ex["data"])), split=split,
             category=text(ex["category"]) or None)
    if t.task_id != text(ex["task_id"]):
        raise ValueError(f"task set record {int(ex['index'])}: stored task_id {text(ex['task_id'])} but its data "
                         f"hashes to {t.task_id}; the dataset is corrupt or was written by other code")
    return t


# ------------------------------------------------------------------------------ reading
class TaskSetSource:
    """Random-access ``Task``s of one built split, read through grain's ``ArrayRecordDataSource``
    (``len``, ``[i]``; what ``TaskStream`` and grain's ``MapDataset.source`` take)."""

    def __init__(self, directory: str, split: str):
        import tensorflow_datasets as tfds   # its readers import no TensorFlow

        registry.check_split(split)
        if split == "test":
            registry.check_test_access(f"tasksets.open_split({directory!r}, 'test')")
        if not os.path.exists(os.path.join(directory, "dataset_info.json")):
            raise FileNotFoundError(f"{directory!r} is not a built task set (no dataset_info.json)")
        info = tfds.builder_from_directory(directory).info
        if info.file_format is None or info.file_format.value != "array_record":
            raise ValueError(f"{directory!r} is stored as {info.file_format}; task sets are read from "
                             "ArrayRecord (rebuild with launch/build_tasksets.py)")
        if split not in info.splits:
            raise KeyError(f"{directory!r} has splits {sorted(info.splits)}, not {split!r}; rebuild with that split")
        meta_path = os.path.join(directory, "metadata.json")
        self.metadata = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        self.directory = directory
        self.split = split
        self.version = str(info.version)
        self.family = self.metadata.get("family")
        self._features = info.features
        files = [os.fspath(p) for p in info.splits[split].filepaths]
        missing = [p for p in files if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"{directory!r}: missing shard(s) {missing}; the dataset is incomplete")
        self._source = grain.sources.ArrayRecordDataSource(files)
        n = info.splits[split].num_examples
        if len(self._source) != n:
            raise ValueError(f"{directory!r} split {split!r}: dataset_info says {n} records, the files hold "
                             f"{len(self._source)}; the dataset is incomplete")

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, i: int) -> Task:
        ex = self._features.deserialize_example_np(self._source[int(i)])
        return from_record(ex, self.split)

    def __repr__(self) -> str:
        return (f"TaskSetSource({self.family}, split={self.split}, version={self.version}, "
                f"n={len(self)}, dir={self.directory})")


def open_split(data_dir: str, family: str, split: str, config: str = "default",
               version: Optional[str] = None) -> TaskSetSource:
    """The built ``split`` of ``family``'s task set ``config`` (newest version unless given).
    ``split="test"`` is sealed like ``registry.load_split``."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: expected one of {SPLITS}")
    return TaskSetSource(dataset_dir(data_dir, family, config, version), split)


def load_split(data_dir: str, family: str, split: str, config: str = "default",
               version: Optional[str] = None) -> list[Task]:
    """``open_split`` materialised as a list (small sets, evaluation)."""
    src = open_split(data_dir, family, split, config, version)
    return [src[i] for i in range(len(src))]


def splits_of(data_dir: str, family: str, config: str = "default",
              version: Optional[str] = None) -> dict[str, int]:
    """``{split: number of tasks}`` of a built task set (reads dataset_info.json only)."""
    return split_sizes(dataset_dir(data_dir, family, config, version))


def split_sizes(directory: str) -> dict[str, int]:
    with open(os.path.join(directory, "dataset_info.json")) as f:
        info = json.load(f)
    return {s["name"]: int(sum(int(x) for x in s.get("shardLengths", []))) for s in info.get("splits", [])}
