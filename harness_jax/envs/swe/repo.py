"""The project corpus and git repositories built from it, deterministically.

A corpus project is a directory under ``third_party/swe_corpus`` (or ``$HARNESS_JAX_SWE_CORPUS``).
Repositories are plain git repositories with a single commit written with a fixed author,
committer and date, so the same tree always has the same commit id: an instance's
``environment_setup_commit`` is the id of the correct project and its ``base_commit`` the id of
the buggy tree the agent starts from.

All git commands here run on trees this module wrote itself (never on a tree an agent touched),
with hooks, system/global configuration and external diff drivers turned off.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Optional

CORPUS_ENV = "HARNESS_JAX_SWE_CORPUS"
REPO_OWNER = "harness-jax"
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".git", "build", "dist"}
GIT_DATE = "2025-01-01T00:00:00+0000"
GIT_NAME = "harness_jax"
GIT_EMAIL = "swe-corpus@harness-jax.invalid"


class RepoError(RuntimeError):
    """A repository could not be built (missing corpus project, patch that does not apply)."""


def corpus_dir() -> str:
    env = os.environ.get(CORPUS_ENV)
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "..", "third_party", "swe_corpus"))


def list_projects() -> list[str]:
    root = corpus_dir()
    if not os.path.isdir(root):
        raise RepoError(f"SWE corpus not found at {root}; set ${CORPUS_ENV} to the directory "
                        "holding the projects (the repository's third_party/swe_corpus)")
    return sorted(d for d in os.listdir(root)
                  if os.path.isfile(os.path.join(root, d, "pyproject.toml")))


@functools.lru_cache(maxsize=64)
def _project_files_cached(root: str, name: str, stamp: float) -> tuple:
    base = os.path.join(root, name)
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            with open(full, encoding="utf-8") as f:
                out.append((os.path.relpath(full, base).replace(os.sep, "/"), f.read()))
    return tuple(out)


def project_files(name: str) -> dict:
    """``{relative path: text}`` of corpus project ``name``."""
    root = corpus_dir()
    if name not in list_projects():
        raise RepoError(f"unknown corpus project {name!r}; available: {list_projects()}")
    stamp = max(os.path.getmtime(os.path.join(dp, f))
                for dp, _, fs in os.walk(os.path.join(root, name)) for f in fs)
    return dict(_project_files_cached(root, name, stamp))


def files_hash(files: dict) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()[:16]


def repo_name(project: str) -> str:
    return f"{REPO_OWNER}/{project}"


# ----------------------------------------------------------------------------------------
# git
# ----------------------------------------------------------------------------------------
def git_env(home: Optional[str] = None) -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C.UTF-8",
            "HOME": home or tempfile.gettempdir(), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": GIT_NAME,
            "GIT_AUTHOR_EMAIL": GIT_EMAIL, "GIT_AUTHOR_DATE": GIT_DATE,
            "GIT_COMMITTER_NAME": GIT_NAME, "GIT_COMMITTER_EMAIL": GIT_EMAIL,
            "GIT_COMMITTER_DATE": GIT_DATE, "GIT_TERMINAL_PROMPT": "0"}


GIT_SAFE_FLAGS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                  "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false",
                  "-c", "commit.gpgsign=false", "-c", "safe.directory=*")


def git(args: list, cwd: str, input_text: Optional[str] = None, check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess:
    if shutil.which("git") is None:
        raise RepoError("git is not installed; the SWE environment needs it (apt-get install git)")
    r = subprocess.run(["git", *GIT_SAFE_FLAGS, *args], cwd=cwd, env=git_env(),
                       input=input_text, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed in {cwd}: {r.stderr.strip()[:500]}")
    return r


def write_tree(dest: str, files: dict) -> None:
    for path, text in files.items():
        full = os.path.join(dest, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(full, 0o644)


def commit_all(dest: str, message: str = "Initial commit") -> str:
    """``git init`` + commit of everything in ``dest``; returns the (deterministic) commit id."""
    if not os.path.isdir(os.path.join(dest, ".git")):
        git(["init", "-q"], dest)
    git(["add", "-A"], dest)
    git(["commit", "-q", "--allow-empty", "-m", message], dest)
    return git(["rev-parse", "HEAD"], dest).stdout.strip()


def apply_patch(dest: str, patch: str, reverse: bool = False, what: str = "patch") -> None:
    """``git apply`` of ``patch`` in ``dest`` (refuses paths outside the tree, like git)."""
    if not patch.strip():
        return
    args = ["apply", "--whitespace=nowarn"] + (["-R"] if reverse else []) + ["-"]
    r = git(args, dest, input_text=patch if patch.endswith("\n") else patch + "\n",
            check=False)
    if r.returncode != 0:
        raise RepoError(f"{what} does not apply: {r.stderr.strip()[:500]}")


def unified_patch(old_files: dict, new_files: dict) -> str:
    """A git-style patch turning ``old_files`` into ``new_files`` (text files, mode 100644)."""
    out = []
    for path in sorted(set(old_files) | set(new_files)):
        old, new = old_files.get(path), new_files.get(path)
        if old == new:
            continue
        a = [] if old is None else old.splitlines(keepends=True)
        b = [] if new is None else new.splitlines(keepends=True)
        out.append(f"diff --git a/{path} b/{path}\n")
        if old is None:
            out.append("new file mode 100644\n")
        elif new is None:
            out.append("deleted file mode 100644\n")
        head_a = "/dev/null" if old is None else f"a/{path}"
        head_b = "/dev/null" if new is None else f"b/{path}"
        body = list(difflib.unified_diff(a, b, head_a, head_b, n=3))
        for line in body:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def patch_paths(patch: str) -> list[str]:
    """The files a git-style patch touches (``b/`` side, or ``a/`` for deletions)."""
    paths = []
    for line in patch.splitlines():
        if line.startswith("diff --git "):
            parts = line.split(" b/", 1)
            if len(parts) == 2:
                paths.append(parts[1].strip())
    return paths


def split_patch(patch: str) -> list[tuple[str, str]]:
    """``[(path, section text)]``: a patch cut at its ``diff --git`` headers."""
    sections: list[tuple[str, str]] = []
    cur: list[str] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git ") and cur:
            sections.append(("".join(cur)))
            cur = []
        cur.append(line)
    if cur:
        sections.append("".join(cur))
    out = []
    for sec in sections:
        paths = patch_paths(sec)
        out.append((paths[0] if paths else "", sec))
    return out


def materialize(files: dict, dest: str, patches: tuple = (), message: str = "Initial commit",
                ) -> str:
    """Writes ``files`` to ``dest``, applies ``patches`` (``(text, reverse, what)`` triples)
    and commits; returns the commit id."""
    os.makedirs(dest, exist_ok=True)
    write_tree(dest, files)
    for text, reverse, what in patches:
        apply_patch(dest, text, reverse=reverse, what=what)
    return commit_all(dest, message)
