"""The SWE corpus itself: every project's own test suite passes, and the projects install."""
import os
import subprocess
import sys

import pytest

from harness_jax.envs.swe import generate, repo


@pytest.mark.slow
def test_every_corpus_project_passes_its_tests():
    projects = repo.list_projects()
    assert len(projects) >= 10
    for p in projects:
        run = generate.baseline(p)        # raises with the log if any test fails
        assert len(run.passing) >= 20, p


@pytest.mark.slow
def test_corpus_projects_are_installable(tmp_path):
    for p in ("textkit", "todo_cli"):
        src = tmp_path / f"src_{p}"          # a copy: building writes build/ and egg-info
        repo.write_tree(str(src), repo.project_files(p))
        target = tmp_path / p
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                            "--no-build-isolation", "--no-index", "--target", str(target),
                            str(src)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        check = subprocess.run([sys.executable, "-c", f"import {p}; print({p}.__file__)"],
                               cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                               capture_output=True, text=True)
        assert str(target) in check.stdout, check.stderr
