"""Grading a patch the SWE-bench way, offline, in the sandbox.

``grade_report(instance, patch)``: a clean copy of the instance's buggy repository is built from
the corpus, the patch is applied with ``git apply``, the hidden tests come back (``test_patch``),
and ``FAIL_TO_PASS`` + ``PASS_TO_PASS`` run with pytest inside a fresh sandbox. Resolved iff
every one of them passes (``PASSED``/``XFAIL``; a test missing from the log fails).

As SWE-bench resets the files of ``test_patch`` before running tests, the parts of a patch that
touch test files or test configuration (``tests/``, ``test_*.py``, ``conftest.py``,
``pyproject.toml``, ``setup.cfg``, ``pytest.ini``, ``tox.ini``) are dropped before applying: a
patch cannot pass by editing the tests. A patch that does not apply is unresolved, not an error.
Instances that do not come from the corpus (real SWE-Gym/SWE-bench) need their Docker images:
see ``docker_runtime``.
"""
from __future__ import annotations

import time
from typing import Optional
import json

from harness_jax.envs.swe import repo, testing
from harness_jax.envs.swe.instances import InstanceError, is_generated, normalize_instance
from harness_jax.envs.swe.mutate import is_test_path
from harness_jax.envs.swe.sandbox import SandboxLimits, Workspace, require_sandbox

CONFIG_FILES = ("pyproject.toml", "setup.cfg", "pytest.ini", "tox.ini", "setup.py")
GRADE_TIMEOUT_S = 300.0


def is_protected(path: str) -> bool:
    return is_test_path(path) or path.rsplit("/", 1)[-1] in CONFIG_FILES


def filter_patch(patch: str) -> tuple[str, list[str]]:
    """``(patch without protected files, dropped paths)``."""
    kept, dropped = [], []
    for path, section in repo.split_patch(patch or ""):
        if path and is_protected(path):
            dropped.append(path)
        elif path:
            kept.append(section)
    return "".join(kept), dropped


def corpus_files(inst: dict) -> dict:
    """The correct project of a generated instance, checked against the instance's hash."""
    if not is_generated(inst):
        raise InstanceError(
            f"instance {inst.get('instance_id')!r}: field 'corpus' is missing, so this is not an "
            "instance generated from the project's corpus; real SWE-Gym/SWE-bench instances are "
            "graded in their Docker images (harness_jax.envs.swe.docker_runtime)")
    c = inst["corpus"]
    try:
        files = repo.project_files(c["project"])
    except repo.RepoError as e:
        raise InstanceError(f"instance {inst['instance_id']!r}.corpus.project: {e}") from e
    if c.get("files_hash") and repo.files_hash(files) != c["files_hash"]:
        raise InstanceError(
            f"instance {inst['instance_id']!r}.corpus.files_hash: the corpus project "
            f"{c['project']!r} changed since the instance was generated; regenerate it with "
            "swe.generate_instances")
    return files


def build_base(inst: dict, dest: str, verify: bool = True) -> str:
    """Writes the buggy repository the agent starts from (tests hidden) into ``dest`` and
    commits it; returns the commit id (checked against ``base_commit`` when ``verify``)."""
    files = corpus_files(inst)
    iid = inst["instance_id"]
    try:
        sha = repo.materialize(files, dest, patches=(
            (inst["patch"], True, f"instance {iid!r}.patch"),
            (inst.get("test_patch") or "", True, f"instance {iid!r}.test_patch")))
    except repo.RepoError as e:
        raise InstanceError(f"instance {iid!r}: {e}") from e
    if verify and sha != inst["base_commit"]:
        raise InstanceError(f"instance {iid!r}.base_commit: the rebuilt repository is {sha}, "
                            f"not {inst['base_commit']}; the instance does not match the corpus")
    return sha


def grade_report(instance: dict, patch_text: Optional[str],
                 limits: SandboxLimits = SandboxLimits(),
                 timeout_s: float = GRADE_TIMEOUT_S) -> dict:
    """Per-test outcomes and ``resolved`` for ``patch_text`` on ``instance``."""
    t0 = time.perf_counter()
    inst = normalize_instance(instance)
    files = corpus_files(inst)
    require_sandbox()
    kept, dropped = filter_patch(patch_text or "")
    report = {"instance_id": inst["instance_id"], "resolved": False, "patch_applied": False,
              "empty_patch": not (patch_text or "").strip(), "dropped_paths": dropped,
              "FAIL_TO_PASS": {}, "PASS_TO_PASS": {}, "error": None}
    ws = Workspace(limits, prefix="hj_swe_grade_")
    try:
        repo.write_tree(ws.testbed, files)
        try:
            repo.apply_patch(ws.testbed, inst["patch"], reverse=True,
                             what=f"instance {inst['instance_id']!r}.patch")
        except repo.RepoError as e:
            raise InstanceError(str(e)) from e
        try:
            repo.apply_patch(ws.testbed, kept, what="the submitted patch")
            report["patch_applied"] = True
        except repo.RepoError as e:
            report["error"] = str(e)
            report["elapsed_s"] = time.perf_counter() - t0
            return report
        ws.hand_over()
        tests = list(inst["FAIL_TO_PASS"]) + list(inst["PASS_TO_PASS"])
        res = ws.run(testing.pytest_command(tests, tb="line"), timeout_s=timeout_s)
        statuses, _ = testing.parse_log(res.output)
        for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            report[field] = {t: statuses.get(t, "MISSING") for t in inst[field]}
        ok = all(s in testing.PASS_STATUSES for f in ("FAIL_TO_PASS", "PASS_TO_PASS")
                 for s in report[f].values())
        report["resolved"] = bool(ok and not res.timed_out)
        if res.timed_out:
            report["error"] = f"tests timed out after {timeout_s:.0f}s"
        report["test_seconds"] = res.elapsed_s
    finally:
        ws.close()
    report["elapsed_s"] = time.perf_counter() - t0
    return report


def grade(instance: dict, patch_text: Optional[str], **kw) -> bool:
    """True iff ``patch_text`` makes every FAIL_TO_PASS test pass and keeps PASS_TO_PASS."""
    return bool(grade_report(instance, patch_text, **kw)["resolved"])


def load_predictions(path: str) -> list[dict]:
    """SWE-bench predictions: ``.jsonl`` or a ``.json`` list/dict of
    ``{"instance_id", "model_patch", "model_name_or_path"}``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".jsonl"):
        rows = [json.loads(l) for l in text.splitlines() if l.strip()]
    else:
        data = json.loads(text)
        rows = list(data.values()) if isinstance(data, dict) else data
    out = []
    for i, r in enumerate(rows):
        where = f"{path}[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("instance_id"), str):
            raise InstanceError(f"{where}.instance_id: missing (a prediction needs "
                                "instance_id and model_patch)")
        patch = r.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise InstanceError(f"{where} (instance {r['instance_id']!r}).model_patch: expected "
                                "a string (a git diff) or null")
        out.append(r)
    return out


def grade_predictions(instances: list, predictions: list, progress: bool = False) -> dict:
    """A SWE-bench-style report over ``predictions`` (instances without a prediction count as
    unresolved and are listed under ``missing_ids``)."""
    by_id = {i["instance_id"]: i for i in instances}
    report = {"total_instances": len(instances), "submitted_ids": [], "resolved_ids": [],
              "unresolved_ids": [], "empty_patch_ids": [], "error_ids": [], "missing_ids": [],
              "unknown_ids": [], "per_instance": {}}
    seen = set()
    for k, pred in enumerate(predictions):
        iid = pred["instance_id"]
        if iid not in by_id:
            report["unknown_ids"].append(iid)
            continue
        seen.add(iid)
        report["submitted_ids"].append(iid)
        patch = pred.get("model_patch") or ""
        if not patch.strip():
            report["empty_patch_ids"].append(iid)
        r = grade_report(by_id[iid], patch)
        report["per_instance"][iid] = {k2: r[k2] for k2 in ("resolved", "patch_applied",
                                                            "error", "elapsed_s")}
        (report["resolved_ids"] if r["resolved"] else report["unresolved_ids"]).append(iid)
        if r["error"] and not r["patch_applied"]:
            report["error_ids"].append(iid)
        if progress:
            print(f"[swe-grade] {k + 1}/{len(predictions)} {iid}: "
                  f"{'resolved' if r['resolved'] else 'unresolved'}", flush=True)
    report["missing_ids"] = sorted(set(by_id) - seen)
    report["resolved_instances"] = len(report["resolved_ids"])
    report["resolve_rate"] = (len(report["resolved_ids"]) / len(instances)) if instances else 0.0
    return report
