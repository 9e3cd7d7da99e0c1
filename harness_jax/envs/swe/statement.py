"""Problem statements written from an observed failure, like a user's issue report.

The generator replays the first FAIL_TO_PASS test with ``probe.py`` on the buggy tree (where and
how it fails) and on the correct tree (what the same statement observes there). From that this
module writes: a title, a symptom, a reproducing snippet (the test's set-up lines and the failing
call, never the test's assertion text and never any line of the fix), and the expected vs actual
behaviour. Wording is drawn from several templates by the instance's own random stream.
"""
from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
import textwrap
from typing import Optional

from harness_jax.envs.swe.testing import PYTEST_ENV

PROBE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")

_OPENERS = (
    "I ran into a problem with `{subj}` in {repo}.",
    "Hi! It looks like `{subj}` misbehaves in {repo}.",
    "While using {repo} I noticed that `{subj}` does not do what I expect.",
    "There seems to be a bug in {repo} around `{subj}`.",
    "Something is off with `{subj}` in {repo}.",
)
_REPRO = ("To reproduce:", "Minimal example:", "Steps to reproduce:", "Here is a small script:")
_CLOSERS = ("", "Could you take a look?", "Thanks for looking into it!",
            "Happy to provide more details if needed.", "")
_TITLES = {
    "wrong": ("`{subj}` returns a wrong result", "Wrong result from `{subj}`",
              "Incorrect output of `{subj}`", "`{subj}` gives {actual_short} instead of "
              "{expected_short}"),
    "raises": ("`{subj}` raises {exc}", "Unexpected {exc} in `{subj}`",
               "{exc} when calling `{subj}`"),
    "no_raise": ("`{subj}` does not raise {exc} for invalid input",
                 "`{subj}` silently accepts bad input (expected {exc})",
                 "No {exc} from `{subj}`"),
    "generic": ("`{subj}` is broken", "Regression in `{subj}`", "Bug in `{subj}`"),
}


def run_probe(repo_dir: str, spec: dict, timeout_s: float = 20.0) -> dict:
    """Runs ``probe.py`` in ``repo_dir`` (a trusted corpus tree)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": repo_dir, **PYTEST_ENV}
    try:
        r = subprocess.run([sys.executable, PROBE_PATH, json.dumps(spec)], cwd=repo_dir, env=env,
                           capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"status": "timeout"}
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        return {"status": "probe_error", "stderr": r.stderr[-500:]}
    return json.loads(lines[-1])


def split_nodeid(nodeid: str) -> dict:
    """``tests/t.py::Cls::test_x[a-b]`` -> ``{"file", "class", "function"}``."""
    parts = nodeid.split("::")
    func = parts[-1].split("[", 1)[0]
    return {"file": parts[0], "class": parts[1] if len(parts) > 2 else None, "function": func}


def _find_def(tree: ast.Module, function: str, cls: Optional[str]):
    body = tree.body
    if cls:
        body = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls),
                    [])
    return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == function), None)


def _seg(source: str, node) -> str:
    return textwrap.dedent(ast.get_source_segment(source, node, padded=True) or "")


def _calls(code: str) -> list:
    try:
        tree = ast.parse(textwrap.dedent(code).strip())
    except SyntaxError:
        return []
    return [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _subject(focus: str, imported: set, helpers: dict) -> str:
    """The project API a failing expression exercises: the first call of an imported name
    (looking inside test helpers it calls), else the first call, else the expression."""
    calls = _calls(focus)
    for c in calls:
        if c.split(".")[0] in imported:
            return c
    for c in calls:
        for inner in _calls(helpers.get(c, "")):
            if inner.split(".")[0] in imported:
                return inner
    for c in calls:
        if c not in dir(__builtins__) and c not in ("print", "repr"):
            return c
    return focus.strip().split("\n")[0][:40]


def _module_defs(source: str, tree: ast.Module) -> dict:
    """Top-level helpers of a test module (functions that are not tests, constants)."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith(
                ("test_", "Test")):
            out[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            for t in node.targets:
                out[t.id] = ast.get_source_segment(source, node)
    return out


def _imported_names(tree: ast.Module) -> set:
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            out |= {a.asname or a.name for a in node.names}
    return out


def _imports(source: str, tree: ast.Module, used: set) -> list:
    out = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names]
            if any(n in used for n in names) and not any(n == "pytest" for n in names):
                out.append(ast.get_source_segment(source, node))
    return out


def _used_names(code: str) -> set:
    try:
        return {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _short(text: str, n: int = 40) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n - 3] + "..."


def build_snippet(test_source: str, nodeid: str, failure: dict) -> tuple[str, str, str]:
    """``(code, focus_expression, style)``: the reproducing script for ``failure``."""
    where = split_nodeid(nodeid)
    tree = ast.parse(test_source)
    fn = _find_def(tree, where["function"], where["class"])
    if fn is None:
        raise ValueError(f"{nodeid}: test function not found")
    body = list(fn.body)
    idx = failure.get("index", len(body) - 1)
    lines = []
    if "tmp_path" in [a.arg for a in fn.args.args]:
        lines += ["import pathlib", "import tempfile",
                  "tmp_path = pathlib.Path(tempfile.mkdtemp())"]
    for name, value in (failure.get("params") or {}).items():
        lines.append(f"{name} = {value}")
    for stmt in body[:idx]:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        lines.append(_seg(test_source, stmt).rstrip())
    stmt = body[idx]
    kind = failure.get("kind")
    style = "wrong"
    if isinstance(stmt, ast.Assert):
        target = stmt.test.left if isinstance(stmt.test, ast.Compare) else stmt.test
        focus = ast.get_source_segment(test_source, target)
        lines.append(f"print(repr({focus}))")
        if kind == "exception":
            style = "raises"
    elif isinstance(stmt, ast.With) and stmt.items and kind in (
            "no_raise", "wrong_exception", "raises_match", "exception"):
        inner = [_seg(test_source, s).rstrip() for s in stmt.body]
        if inner and isinstance(stmt.body[-1], ast.Expr):
            inner[-1] = f"print(repr({inner[-1]}))"
        lines += inner
        focus = "\n".join(_seg(test_source, s) for s in stmt.body)
        style = "no_raise" if kind in ("no_raise", "raises_match") else "raises"
    else:
        seg = _seg(test_source, stmt).rstrip()
        focus = seg
        if isinstance(stmt, ast.Expr):
            lines.append(f"print(repr({seg}))")
        else:
            lines.append(seg)
        style = "raises" if kind == "exception" else "wrong"
    code = "\n".join(lines)
    defs = _module_defs(test_source, tree)
    helpers: list = []
    pending = _used_names(code)
    while True:
        new = [n for n in sorted(pending) if n in defs and defs[n] not in helpers]
        if not new:
            break
        for n in new:
            helpers.append(defs[n])
        pending = _used_names("\n".join(helpers))
    used = _used_names(code + "\n" + "\n".join(helpers))
    imports = _imports(test_source, tree, used)
    head = imports + ([""] if imports else [])
    for h in helpers:
        head += [h, ""]
    return "\n".join(head + [code]), focus, style


def _describe_raise(exc: dict) -> str:
    return f"{exc['type']}: {exc['message']}" if exc.get("message") else exc["type"]


def write_statement(repo: str, test_source: str, nodeid: str, failure: dict,
                    expected: dict, rng: random.Random, n_failing: int = 1) -> str:
    """The issue text for one instance (see the module docstring)."""
    code, focus, style = build_snippet(test_source, nodeid, failure)
    tree = ast.parse(test_source)
    subj = _subject(focus, _imported_names(tree), _module_defs(test_source, tree))
    kind = failure.get("kind")
    if kind in ("assert", "assert_expr"):
        actual = failure.get("left", failure.get("value"))
        exp = expected.get("left", expected.get("value", failure.get("right")))
        behaviour = (f"it prints\n```\n{actual}\n```\nbut I expected\n```\n{exp}\n```")
        act_short, exp_short = _short(actual, 24), _short(exp, 24)
    elif kind == "exception":
        raised = _describe_raise(failure["raised"])
        if expected.get("kind") in ("assert",):
            exp = f"it should give `{_short(expected.get('left'), 120)}`"
        elif expected.get("kind") == "value":
            exp = f"it should give `{_short(expected.get('value'), 120)}`"
        else:
            exp = "it should run without an error"
        behaviour = (f"it fails with\n```\nTraceback (most recent call last):\n  ...\n{raised}\n"
                     f"```\n{exp[0].upper() + exp[1:]}.")
        act_short, exp_short = failure["raised"]["type"], "a result"
    elif kind in ("no_raise", "raises_match"):
        want = failure.get("expected_type") or (expected.get("raised") or {}).get("type", "an error")
        exp_raise = expected.get("raised")
        exp_text = _describe_raise(exp_raise) if exp_raise else want
        if kind == "no_raise":
            got = f"it returns `{_short(failure.get('value'), 120)}` without complaint"
        else:
            got = f"it raises `{_describe_raise(failure['raised'])}` with a different message"
        behaviour = f"{got}. I expected it to raise `{exp_text}`."
        style = "no_raise"
        act_short, exp_short = "no error", want
    elif kind == "wrong_exception":
        raised = _describe_raise(failure["raised"])
        want = failure.get("expected_type", "another exception")
        behaviour = (f"it fails with `{raised}`, but for this input it should raise `{want}` "
                     "(the documented error).")
        style = "raises"
        act_short, exp_short = failure["raised"]["type"], want
    else:
        behaviour = "the result is not what the documentation promises."
        style = "generic"
        act_short = exp_short = "?"
    exc = (failure.get("raised") or {}).get("type") or failure.get("expected_type") or "an error"
    fmt = dict(subj=subj, repo=repo, actual_short=act_short, expected_short=exp_short, exc=exc)
    title = rng.choice(_TITLES[style]).format(**fmt)
    parts = [title, "", rng.choice(_OPENERS).format(**fmt), "",
             rng.choice(_REPRO), "```python", code, "```", "", "When I run this, " + behaviour]
    if n_failing > 1 and rng.random() < 0.5:
        parts += ["", "Other calls of the same functionality seem to be affected too."]
    closer = rng.choice(_CLOSERS)
    if closer:
        parts += ["", closer]
    return "\n".join(parts).strip() + "\n"


def leaks_patch(statement: str, patch: str) -> bool:
    """True if a changed code line of ``patch`` appears verbatim in ``statement``."""
    for line in patch.splitlines():
        if line.startswith(("+++", "---")) or not line.startswith(("+", "-")):
            continue
        code = line[1:].strip()
        if len(code) >= 12 and code in statement:
            return True
    return False
