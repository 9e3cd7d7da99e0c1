"""Running pytest and reading its per-test outcomes from the log, as SWE-bench's harness does.

Outcomes come from pytest's ``-rA`` short summary (``PASSED nodeid``, ``FAILED nodeid - msg``,
``ERROR ...``, ``SKIPPED``, ``XFAIL``, ``XPASS``). A test counts as passing when its status is
``PASSED`` or ``XFAIL`` (SWE-bench's rule); one that is missing from the log (not collected,
crashed run) counts as failing.

``run_local`` runs our own trusted corpus code (generation); agent-influenced code is run through
``sandbox.Sandbox`` instead, with the same command line (``pytest_command``).
"""
from __future__ import annotations

import dataclasses
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from typing import Optional, Sequence

PASS_STATUSES = ("PASSED", "XFAIL")
_STATUS_RE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(.*)$")

PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1",
              "PYTHONHASHSEED": "0", "COLUMNS": "240", "PYTHONUNBUFFERED": "1",
              "LC_ALL": "C.UTF-8", "NO_COLOR": "1"}


@dataclasses.dataclass
class TestRun:
    statuses: dict            # nodeid -> status
    messages: dict            # nodeid -> short failure message
    output: str
    returncode: Optional[int]
    timed_out: bool = False
    elapsed_s: float = 0.0

    def passed(self, nodeid: str) -> bool:
        return self.statuses.get(nodeid) in PASS_STATUSES

    @property
    def passing(self) -> list:
        return [t for t, s in self.statuses.items() if s in PASS_STATUSES]

    @property
    def failing(self) -> list:
        return [t for t, s in self.statuses.items() if s not in PASS_STATUSES + ("SKIPPED",)]


def _split_nodeid(rest: str) -> tuple[str, str]:
    """``nodeid[ - message]``; a parametrize id may itself contain ' - '."""
    sep = rest.find(" - ")
    bracket = rest.find("[")
    if bracket != -1 and (sep == -1 or bracket < sep):
        close = rest.find("]", bracket)
        # ids may hold nested brackets: take the last ']' before ' - ' that follows it
        while close != -1:
            nxt = rest.find(" - ", close)
            nb = rest.find("]", close + 1)
            if nb == -1 or (nxt != -1 and nb > nxt):
                break
            close = nb
        if close != -1:
            node = rest[:close + 1]
            tail = rest[close + 1:]
            return node.strip(), tail[3:].strip() if tail.startswith(" - ") else ""
    if sep == -1:
        return rest.strip(), ""
    return rest[:sep].strip(), rest[sep + 3:].strip()


def parse_log(text: str) -> tuple[dict, dict]:
    """``(statuses, messages)`` from a pytest ``-rA`` log."""
    statuses: dict = {}
    messages: dict = {}
    in_summary = False
    for line in text.splitlines():
        if "short test summary info" in line:
            in_summary = True
            continue
        if not in_summary:
            continue
        m = _STATUS_RE.match(line)
        if not m:
            continue
        status, rest = m.groups()
        if status == "SKIPPED" and rest.startswith("["):
            continue   # "SKIPPED [1] path:line: reason" names no node id
        node, msg = _split_nodeid(rest)
        if "::" not in node and not node.endswith(".py"):
            continue
        statuses[node] = status
        if msg:
            messages[node] = msg
    return statuses, messages


def pytest_args(tests: Optional[Sequence[str]] = None, tb: str = "short") -> list:
    return [*(["-m", "pytest"]), "-rA", f"--tb={tb}", "-p", "no:cacheprovider", "--color=no",
            "-o", "console_output_style=classic", *(list(tests) if tests else [])]


def pytest_command(tests: Optional[Sequence[str]] = None, python: str = "python3",
                   tb: str = "short") -> str:
    """The shell command line that runs ``tests`` (all when None) from the repository root."""
    return " ".join(shlex.quote(a) for a in [python, *pytest_args(tests, tb)])


def _limits(as_mb: int, cpu_s: int):
    def apply():
        mb = 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (as_mb * mb, as_mb * mb))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run_local(repo_dir: str, tests: Optional[Sequence[str]] = None, timeout_s: float = 60.0,
              as_mb: int = 2048, tb: str = "short") -> TestRun:
    """Runs pytest on a trusted tree in a subprocess (own session, rlimits, wall-clock kill)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": repo_dir, **PYTEST_ENV}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *pytest_args(tests, tb)], cwd=repo_dir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=_limits(as_mb, int(timeout_s) + 5))
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        timed_out = True
    text = out.decode("utf-8", "replace")
    statuses, messages = parse_log(text)
    return TestRun(statuses, messages, text, proc.returncode, timed_out,
                   time.perf_counter() - t0)


def failure_excerpt(output: str, nodeid: str, max_lines: int = 12) -> str:
    """The ``E ...`` lines of ``nodeid``'s failure section in a ``--tb=short`` log."""
    name = nodeid.split("::")[-1]
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("_") and f" {name} " in line:
            block = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("_____") or nxt.startswith("====="):
                    break
                if nxt.startswith("E "):
                    block.append(nxt[1:].strip())
            return "\n".join(block[:max_lines])
    return ""
