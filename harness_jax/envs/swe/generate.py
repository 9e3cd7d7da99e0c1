"""Generating SWE-bench-schema instances from the corpus by bug injection.

For a seed and a split, the candidate mutation sites of every corpus project are ordered by a
random stream of that (seed, split) and tried in turn. A candidate is kept only if, after the
mutation, pytest (actually run) shows some tests failing that passed on the correct project
(``FAIL_TO_PASS``) while others still pass (``PASS_TO_PASS``); a run that times out is rejected.
Kept instances hide their ``FAIL_TO_PASS`` test functions from the repository (they come back
through ``test_patch`` at grading, as in SWE-bench) and get a problem statement written from the
failure (``statement``).

Splits are decided per *function* (``project:path:function`` hashed by the registry's
``hash_partition``), so the sealed test split holds bugs in functions that no training instance
touches. Each candidate's outcome is cached on disk by the project's content hash and the site
(``$HARNESS_JAX_SWE_CACHE``, default ``~/.cache/harness_jax/swe``), so generating the same or an
overlapping set again costs milliseconds per instance.
"""
from __future__ import annotations

import ast
import atexit
import hashlib
import json
import logging
import os
import random
import shutil
import tempfile
import threading
import time
from typing import Optional, Sequence

from harness_jax.envs.swe import mutate, repo, statement, testing
from harness_jax.envs.swe.instances import normalize_instance
from harness_jax.envs import registry, splits

log = logging.getLogger(__name__)

GENERATOR_VERSION = "1"
CACHE_ENV = "HARNESS_JAX_SWE_CACHE"
CREATED_AT = "2025-01-01T00:00:00Z"
_LOCK = threading.RLock()
_SCRATCH: dict = {}
_BASELINE: dict = {}
_SETUP_COMMIT: dict = {}


def cache_dir() -> Optional[str]:
    d = os.environ.get(CACHE_ENV)
    if d == "":
        return None
    return d or os.path.join(os.path.expanduser("~"), ".cache", "harness_jax", "swe")


def function_split(project: str, site: mutate.Site, fractions: Optional[dict] = None) -> str:
    return registry.hash_partition(f"{project}:{site.path}:{site.function}", fractions)


# ------------------------------------------------------------------------------------------
# per-project state: a scratch copy of the correct project and its baseline test run
# ------------------------------------------------------------------------------------------
def _cleanup():
    for d in list(_SCRATCH.values()):
        shutil.rmtree(d[0], ignore_errors=True)
    _SCRATCH.clear()


atexit.register(_cleanup)


def _scratch(project: str, files: dict) -> str:
    key = (project, repo.files_hash(files))
    if key not in _SCRATCH:
        d = tempfile.mkdtemp(prefix=f"hj_swe_gen_{project}_")
        repo.write_tree(d, files)
        _SCRATCH[key] = (d,)
    return _SCRATCH[key][0]


def baseline(project: str, files: Optional[dict] = None) -> testing.TestRun:
    """The correct project's test run (every test must pass)."""
    files = files or repo.project_files(project)
    key = (project, repo.files_hash(files))
    with _LOCK:
        if key not in _BASELINE:
            run = testing.run_local(_scratch(project, files))
            bad = [t for t, s in run.statuses.items() if s not in testing.PASS_STATUSES]
            if run.timed_out or not run.statuses or bad:
                raise repo.RepoError(f"corpus project {project!r}: its own tests do not all pass "
                                     f"({bad[:5] or 'no tests ran'}):\n{run.output[-2000:]}")
            _BASELINE[key] = run
        return _BASELINE[key]


def setup_commit(project: str, files: dict) -> str:
    key = (project, repo.files_hash(files))
    with _LOCK:
        if key not in _SETUP_COMMIT:
            d = tempfile.mkdtemp(prefix="hj_swe_commit_")
            try:
                _SETUP_COMMIT[key] = repo.materialize(files, d)
            finally:
                shutil.rmtree(d, ignore_errors=True)
        return _SETUP_COMMIT[key]


# ------------------------------------------------------------------------------------------
# hiding FAIL_TO_PASS tests
# ------------------------------------------------------------------------------------------
def remove_tests(source: str, names: set) -> str:
    """``source`` without the test functions (``name`` or ``Class::name``) in ``names``."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    cut = []

    def span(node):
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        return first, node.end_lineno

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            cut.append(span(node))
        elif isinstance(node, ast.ClassDef):
            inner = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and f"{node.name}::{n.name}" in names]
            if inner and len(inner) == len(node.body):
                cut.append(span(node))
            else:
                cut += [span(n) for n in inner]
    for first, last in sorted(cut, reverse=True):
        del lines[first - 1:last]
    text = "".join(lines)
    while "\n\n\n\n" in text:
        text = text.replace("\n\n\n\n", "\n\n\n")
    return text.rstrip("\n") + "\n"


def _hidden_test_files(files: dict, f2p: Sequence[str]) -> dict:
    by_file: dict = {}
    for nodeid in f2p:
        where = statement.split_nodeid(nodeid)
        name = f"{where['class']}::{where['function']}" if where["class"] else where["function"]
        by_file.setdefault(where["file"], set()).add(name)
    return {path: remove_tests(files[path], names) for path, names in by_file.items()}


# ------------------------------------------------------------------------------------------
# one candidate
# ------------------------------------------------------------------------------------------
def _cache_path(project: str, files: dict, site: mutate.Site) -> Optional[str]:
    root = cache_dir()
    if root is None:
        return None
    h = hashlib.sha256(site.key.encode()).hexdigest()[:20]
    return os.path.join(root, f"v{GENERATOR_VERSION}", f"{project}-{repo.files_hash(files)}",
                        f"{h}.json")


def _instance_id(project: str, site: mutate.Site, files: dict) -> str:
    h = hashlib.sha256(f"{repo.files_hash(files)}|{site.key}".encode()).hexdigest()[:8]
    return f"{repo.REPO_OWNER.replace('-', '_')}__{project}.{site.kind}__{h}"


def try_candidate(project: str, site: mutate.Site, files: Optional[dict] = None,
                  timeout_s: float = 60.0, use_cache: bool = True) -> dict:
    """``{"instance": {...}}`` or ``{"rejected": reason}`` for one mutation site."""
    files = files or repo.project_files(project)
    path = _cache_path(project, files, site) if use_cache else None
    if path and os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    result = _validate(project, site, files, timeout_s)
    if path and not result.get("transient"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(tmp, path)
    return result


def _validate(project: str, site: mutate.Site, files: dict, timeout_s: float) -> dict:
    with _LOCK:
        base = baseline(project, files)
        original = files[site.path]
        try:
            mutated = mutate.apply_site(original, site)
        except mutate.MutationError as e:
            return {"rejected": f"mutation: {e}"}
        scratch = _scratch(project, files)
        target = os.path.join(scratch, site.path)
        with open(target, "w", encoding="utf-8") as f:
            f.write(mutated)
        try:
            run = testing.run_local(scratch, timeout_s=timeout_s)
            if run.timed_out:
                return {"rejected": "timeout", "transient": True}
            f2p = [t for t in base.passing if not run.passed(t)]
            p2p = [t for t in base.passing if run.passed(t)]
            if not f2p:
                return {"rejected": "no test fails"}
            if not p2p:
                return {"rejected": "every test fails"}
            seed_rng = random.Random(site.key)
            first = f2p[0]
            where = statement.split_nodeid(first)
            failure = statement.run_probe(scratch, where)
        finally:
            with open(target, "w", encoding="utf-8") as f:
                f.write(original)
        if failure.get("status") != "failed":
            return {"rejected": f"probe: {failure.get('status')}"}
        spec = dict(where, param_index=failure.get("param_index"), stop_at=failure["index"])
        expected = statement.run_probe(scratch, spec)
    fix_patch = repo.unified_patch({site.path: mutated}, {site.path: original})
    hidden = _hidden_test_files(files, f2p)
    test_patch = repo.unified_patch(hidden, {p: files[p] for p in hidden})
    text = statement.write_statement(repo.repo_name(project), files[where["file"]], first,
                                     failure, expected, seed_rng, n_failing=len(f2p))
    if statement.leaks_patch(text, fix_patch):
        return {"rejected": "statement would quote the fix"}
    buggy = dict(files)
    buggy[site.path] = mutated
    buggy.update(hidden)
    d = tempfile.mkdtemp(prefix="hj_swe_commit_")
    try:
        base_commit = repo.materialize(buggy, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    inst = {
        "instance_id": _instance_id(project, site, files),
        "repo": repo.repo_name(project),
        "base_commit": base_commit,
        "environment_setup_commit": setup_commit(project, files),
        "patch": fix_patch,
        "test_patch": test_patch,
        "problem_statement": text,
        "hints_text": "",
        "created_at": CREATED_AT,
        "version": "1.0",
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "corpus": {"project": project, "files_hash": repo.files_hash(files),
                   "generator": GENERATOR_VERSION},
        "mutation": site.to_dict(),
    }
    return {"instance": inst}


# ------------------------------------------------------------------------------------------
# many
# ------------------------------------------------------------------------------------------
def candidate_order(seed: int, split: str, projects: Optional[Sequence[str]] = None,
                    kinds: Optional[Sequence[str]] = None, fractions: Optional[dict] = None,
                    ) -> list[tuple[str, mutate.Site]]:
    """Every candidate of ``split``, in the order stream ``(seed, split)`` tries them:
    projects interleaved round-robin, sites shuffled within each project."""
    rng = random.Random(f"swe|{int(seed)}|{split}")
    per_project = []
    for project in sorted(projects or repo.list_projects()):
        files = repo.project_files(project)
        sites = [s for s in mutate.iter_project_sites(files)
                 if (kinds is None or s.kind in kinds)
                 and function_split(project, s, fractions) == split]
        rng.shuffle(sites)
        per_project.append([(project, s) for s in sites])
    rng.shuffle(per_project)
    order = []
    i = 0
    while any(i < len(p) for p in per_project):
        for p in per_project:
            if i < len(p):
                order.append(p[i])
        i += 1
    return order


def generate_instances(n: int, seed: int = 0, split: str = "train",
                       projects: Optional[Sequence[str]] = None,
                       kinds: Optional[Sequence[str]] = None, fractions: Optional[dict] = None,
                       timeout_s: float = 60.0, use_cache: bool = True,
                       progress: bool = False) -> list[dict]:
    """``n`` instances (dicts in SWE-bench's schema) of ``split`` from stream ``seed``."""
    splits.check_split(split)
    if split == "test":   # raw instance dicts are test data too, not only Task objects
        splits.check_test_access("swe.generate_instances(split='test')")
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    unknown = set(kinds or ()) - set(mutate.KINDS)
    if unknown:
        raise ValueError(f"kinds: unknown mutation kind(s) {sorted(unknown)}; use {mutate.KINDS}")
    out: list[dict] = []
    tried = 0
    t0 = time.perf_counter()
    for project, site in candidate_order(seed, split, projects, kinds, fractions):
        if len(out) >= n:
            break
        tried += 1
        res = try_candidate(project, site, timeout_s=timeout_s, use_cache=use_cache)
        if "instance" in res:
            inst = dict(res["instance"], split=split)
            out.append(normalize_instance(inst))
            if progress:
                print(f"[swe] {len(out)}/{n} instances ({tried} candidates, "
                      f"{time.perf_counter() - t0:.1f}s)", flush=True)
    if len(out) < n:
        raise RuntimeError(f"generate_instances: only {len(out)} of {n} instances could be made "
                           f"for split {split!r} from {tried} candidates; allow more projects or "
                           "mutation kinds")
    return out
