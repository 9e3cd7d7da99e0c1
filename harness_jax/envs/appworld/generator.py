"""Generated AppWorld task data: runs the builder inside the AppWorld venv and caches its trees.

The builder (``venv_side/build.py`` + the ``venv_side/scenario*.py`` templates) needs AppWorld's own models and
factories, which live only in AppWorld's virtual environment, so it runs there as a subprocess
of the venv's python (the same boundary the service uses). It writes a complete ``data/`` tree
(base DBs, API docs, tasks with ``specs.json`` and ``ground_truth/``), validating every task's
oracle through AppWorld's own environment and evaluator.

Trees are cached under ``$HARNESS_JAX_APPWORLD_DATA`` (default ``$HARNESS_JAX_APPWORLD_HOME/data``)
by the builder's source hash, seed, template list and world size. Scenario ``k`` of a seed does
not depend on how many scenarios are built, so a tree with more scenarios serves every shorter
request (its first tasks are exactly the shorter tree's tasks).
"""
from __future__ import annotations

import fcntl
import functools
import glob
import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
from typing import Optional, Sequence

from harness_jax.envs import splits
from harness_jax.envs.appworld import data as awdata
from harness_jax.envs.appworld.service import VENV_SIDE, runtime_paths

BUILD_PY = os.path.join(VENV_SIDE, "build.py")
TASKS_PER_SCENARIO = 3


def data_root() -> str:
    return os.path.abspath(os.path.expanduser(
        os.environ.get("HARNESS_JAX_APPWORLD_DATA", runtime_paths().data_cache)))


def builder_hash() -> str:
    """Hash of the builder's sources: ``build.py`` and every ``scenario*.py`` module it imports."""
    h = hashlib.sha256()
    names = ["build.py"] + sorted(os.path.basename(p)
                                  for p in glob.glob(os.path.join(VENV_SIDE, "scenario*.py")))
    for name in names:
        with open(os.path.join(VENV_SIDE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def _venv_python() -> str:
    p = runtime_paths()
    p.require_installed()
    return p.venv_python


@functools.lru_cache(maxsize=4)
def _templates_cached(key: str) -> tuple:
    path = os.path.join(data_root(), f"templates-{key}.json")
    if os.path.isfile(path):
        with open(path) as f:
            return tuple(json.load(f))
    out = subprocess.run([_venv_python(), BUILD_PY, "--out", tempfile.gettempdir(),
                          "--list-templates"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"listing AppWorld templates failed:\n{out.stderr[-3000:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("[")]
    templates = json.loads(lines[-1])
    os.makedirs(data_root(), exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(templates, f)
    os.replace(tmp, path)
    return tuple(templates)


def list_templates() -> list:
    """The builder's scenario templates: ``[{name, apps, difficulty, wrong_kind}, ...]``."""
    return [dict(t) for t in _templates_cached(builder_hash())]


def _tree_key(seed: int, templates: Sequence[str], people: int, validate: bool) -> str:
    blob = json.dumps({"builder": builder_hash(), "seed": int(seed), "templates": list(templates),
                       "people": int(people), "validate": bool(validate)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _built_scenarios(tree: str) -> int:
    try:
        with open(os.path.join(tree, "data", "harness_jax", "build.json")) as f:
            return int(json.load(f)["scenarios"])
    except (OSError, ValueError, KeyError):
        return -1


def build_tree(seed: int, n_scenarios: int, templates: Optional[Sequence[str]] = None,
               people: int = 20, validate: bool = True, root: Optional[str] = None,
               verbose: bool = False) -> str:
    """The ``data/`` directory of a generated tree with at least ``n_scenarios`` scenarios
    (built once, then cached; concurrent callers wait on a lock)."""
    if n_scenarios < 1:
        raise ValueError(f"n_scenarios={n_scenarios}: need at least 1")
    names = list(templates) if templates else [t["name"] for t in list_templates()]
    known = {t["name"] for t in list_templates()}
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"templates: unknown {bad}; known: {sorted(known)}")
    root = root or data_root()
    os.makedirs(root, exist_ok=True)
    key = _tree_key(seed, names, people, validate)

    def existing() -> Optional[str]:
        trees = [(n, t) for t in glob.glob(os.path.join(root, f"gen-{key}-s*"))
                 if (n := _built_scenarios(t)) >= n_scenarios]
        return os.path.join(min(trees)[1], "data") if trees else None

    found = existing()
    if found:
        return found
    with open(os.path.join(root, f"gen-{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = existing()
        if found:
            return found
        final = os.path.join(root, f"gen-{key}-s{n_scenarios}")
        tmp = tempfile.mkdtemp(prefix=f"gen-{key}-", dir=root)
        cmd = [_venv_python(), BUILD_PY, "--out", tmp, "--seed", str(seed),
               "--scenarios", str(n_scenarios), "--templates", ",".join(names),
               "--people", str(people)] + ([] if validate else ["--no-validate"])
        t0 = time.perf_counter()
        log_path = os.path.join(root, f"gen-{key}-s{n_scenarios}.log")
        with open(log_path, "w") as logf:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=logf, text=True,
                               timeout=4 * 3600)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            with open(log_path) as f:
                tail = f.read()[-4000:]
            raise RuntimeError(f"the AppWorld data builder failed (exit {p.returncode}) after "
                               f"{time.perf_counter() - t0:.0f} s; log {log_path}:\n{tail}")
        os.rename(tmp, final)
        if verbose:
            print(f"built AppWorld tree {final} in {time.perf_counter() - t0:.0f} s")
        return os.path.join(final, "data")


def generate_tasks(n: int = 30, seed: int = 0, split: str = "train",
                   templates: Optional[Sequence[str]] = None, difficulty: Optional[int] = None,
                   people: int = 20, validate: bool = True, root: Optional[str] = None) -> list:
    """``n`` generated tasks (three per scenario, as AppWorld groups them) as registry ``Task``s,
    backed by a data tree the real runtime loads. Deterministic in ``seed``.

    ``templates`` restricts the scenario templates (default: all), ``difficulty`` (1-3) keeps
    templates of that level. ``split='test'`` is sealed."""
    if n < 1:
        raise ValueError(f"n={n}: need at least one task")
    splits.check_split(split)
    if split == "test":   # refuse before building a data tree (Task would refuse after)
        splits.check_test_access("appworld.generate_tasks(split='test')")
    names = list(templates) if templates else [t["name"] for t in list_templates()]
    if difficulty is not None:
        if difficulty not in (1, 2, 3):
            raise ValueError(f"difficulty={difficulty}: AppWorld's levels are 1, 2, 3")
        levels = {t["name"]: t["difficulty"] for t in list_templates()}
        names = [x for x in names if levels.get(x) == difficulty]
        if not names:
            raise ValueError(f"no template of difficulty {difficulty} among {templates}")
    d = build_tree(seed, math.ceil(n / TASKS_PER_SCENARIO), names, people, validate, root)
    index = awdata.read_index(d)
    ids = list(index)[:n]
    return [awdata.make_task(awdata._task_record(d, tid, f"generated:seed{seed}"), split)
            for tid in ids]


def _index_record(task) -> dict:
    rec = awdata.read_index(task.data["data_dir"]).get(task.data["task_id"])
    if rec is None:
        raise ValueError(f"task {task.data['task_id']!r} has no scripted solution: only tasks "
                         "generated by harness_jax.envs.appworld.generate_tasks carry one (real "
                         "AppWorld tasks keep theirs in ground_truth/ in 'full' mode)")
    return rec


def oracle_cells(task) -> list:
    """The scripted oracle solution of a generated task, as code cells for ``env.step``."""
    return list(_index_record(task)["oracle"])


def wrong_cells(task) -> tuple:
    """A plausible wrong solution of a generated task: ``(kind, cells)`` with kind one of
    wrong_recipient, wrong_amount, wrong_filter, wrong_project, wrong_item, wrong_position,
    wrong_scope, wrong_action, wrong_answer, first_page_only, missing_step."""
    rec = _index_record(task)
    return rec["wrong_kind"], list(rec["wrong"])
