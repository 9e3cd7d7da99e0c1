"""Which code produced an artifact: the git commit of the checkout, whether it was dirty, and a
hash of the difference (recorded by sweeps in every run directory and by task-set builds)."""
from __future__ import annotations

import hashlib
import os
import subprocess
from typing import Optional

import harness_jax


def repo_root() -> str:
    """The checkout harness_jax is imported from (the directory holding ``harness_jax/``)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(harness_jax.__file__)))


def _git(repo: str, *args: str) -> Optional[str]:
    try:
        r = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def code_version(repo: Optional[str] = None) -> dict:
    """``{"commit", "dirty", "branch", "diff_sha256", "changed_files"}`` of ``repo`` (default: this
    checkout). ``dirty``: tracked changes or untracked, non-ignored files; ``diff_sha256`` (of the
    diff to HEAD and the untracked files' contents) tells two dirty trees apart."""
    repo = repo or repo_root()
    head = _git(repo, "rev-parse", "HEAD")
    if head is None:
        return {"commit": None, "dirty": None, "repo": os.path.abspath(repo),
                "error": "not a git checkout (or git is missing): the code version is unknown"}
    status = _git(repo, "status", "--porcelain") or ""
    diff = _git(repo, "diff", "HEAD", "--no-ext-diff") or ""
    untracked = [ln[3:] for ln in status.splitlines() if ln.startswith("??")]
    h = hashlib.sha256(diff.encode())
    for u in sorted(untracked):
        h.update(b"\0" + u.encode())
        p = os.path.join(repo, u)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    branch = (_git(repo, "rev-parse", "--abbrev-ref", "HEAD") or "").strip() or None
    return {"commit": head.strip(), "dirty": bool(status.strip()), "branch": branch,
            "diff_sha256": h.hexdigest() if status.strip() else None,
            "changed_files": len(status.splitlines())}
