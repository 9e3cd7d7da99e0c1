"""Per-episode working copies and a bubblewrap sandbox for agent commands.

Each ``Workspace`` is a private directory holding the repository (seen as ``/testbed`` inside the
sandbox) and a scratch ``/tmp``; both belong to a fresh unprivileged uid. Every command runs in a
new ``bwrap`` (Debian's ``bubblewrap`` package; the command line comes from ``envs/bwrap.py``,
shared with the AppWorld service) with:

* new network, pid, ipc and uts namespaces: no network at all (only a loopback that is down), no
  view of the host's processes, and every process the command leaves behind dies with it;
* a read-only system (``/usr``, ``/etc``, the Python installation) and nothing else of the host:
  no home directories, no ``/work``, no other episode's files; writable only ``/testbed`` and
  ``/tmp``, which are this episode's own directories;
* ``setpriv`` to the episode's uid with every capability dropped and ``no_new_privs``;
* ``prlimit`` limits: address space, processes of that uid (a fork bomb hits the ceiling),
  file size, open files, CPU seconds, no core dumps;
* a host-side wall-clock limit that kills the whole sandbox, and an output cap (head and tail
  are kept); the working copy's disk use is measured after every command.

A shell's state survives between commands the way an interactive terminal's does: the working
directory and exported variables are saved on exit and restored by the next command. The
sandbox never runs host code on agent-written files: diffs are made inside it.

``bubblewrap`` is required (``apt-get install bubblewrap``; ``scripts/swe_sandbox.sh install``);
``bwrap_status()`` says whether it works here.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional
import posixpath

from harness_jax.envs import bwrap

TESTBED = "/testbed"
SANDBOX_TMP = "/tmp"
_UID_BASE = bwrap.SWE_UID_BASE + (os.getpid() % 2048) * 256
_UIDS = itertools.count()
_UID_LOCK = threading.Lock()

_SCRIPT = r"""
__hj_save() { __hj_rc=$?; pwd > /tmp/.hj_cwd 2>/dev/null; export -p > /tmp/.hj_env 2>/dev/null; exit $__hj_rc; }
if [ -f /tmp/.hj_env ]; then . /tmp/.hj_env >/dev/null 2>&1; fi
cd "$(cat /tmp/.hj_cwd 2>/dev/null)" 2>/dev/null || cd /testbed
trap __hj_save EXIT
eval "$1"
"""


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here (an infrastructure problem)."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandboxed command (``timeout_s``) and of one workspace."""

    timeout_s: float = 120.0          # default wall-clock limit per command
    max_timeout_s: float = 600.0      # the most a caller may ask for
    as_mb: int = 4096                 # RLIMIT_AS per process
    nproc: int = 128                  # RLIMIT_NPROC for the episode's uid
    fsize_mb: int = 64                # largest file a command may write
    nofile: int = 1024                # open files per process
    disk_mb: int = 256                # working copy + /tmp after a command
    max_output_bytes: int = 256_000   # output kept per command (head + tail)

    def __post_init__(self):
        for f in ("timeout_s", "max_timeout_s"):
            if getattr(self, f) <= 0:
                raise ValueError(f"SandboxLimits.{f} must be > 0")
        for f in ("as_mb", "nproc", "fsize_mb", "nofile", "disk_mb", "max_output_bytes"):
            if getattr(self, f) < 1:
                raise ValueError(f"SandboxLimits.{f} must be >= 1")
        if self.as_mb < 256:
            raise ValueError("SandboxLimits.as_mb must be >= 256 (Python and pytest need it)")


@dataclasses.dataclass
class CommandResult:
    output: str
    exit_code: Optional[int]
    timed_out: bool = False
    truncated: bool = False
    elapsed_s: float = 0.0
    disk_exceeded: bool = False


def _python_bin() -> str:
    return os.path.dirname(os.path.realpath(sys.executable))


def _bwrap_argv(testbed: str, tmp: str, uid: int, limits: SandboxLimits, cpu_s: int,
                extra_ro: tuple = ()) -> list[str]:
    rlimits = bwrap.Rlimits(as_mb=limits.as_mb, nproc=limits.nproc, fsize_mb=limits.fsize_mb,
                            nofile=limits.nofile, cpu_s=cpu_s)
    binds = ((testbed, TESTBED, True), (tmp, SANDBOX_TMP, True))
    return bwrap.bwrap_argv(uid, rlimits, binds=binds, chdir=TESTBED, etc=True, extra_ro=extra_ro)


def sandbox_env() -> dict:
    return {"PATH": f"{_python_bin()}:/usr/local/bin:/usr/bin:/bin", "HOME": SANDBOX_TMP,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb", "PAGER": "cat",
            "GIT_PAGER": "cat", "GIT_CONFIG_NOSYSTEM": "1", "PIP_NO_INDEX": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTHONUNBUFFERED": "1", "USER": "agent"}


@functools.lru_cache(maxsize=1)
def bwrap_status() -> tuple[bool, str]:
    """``(works, reason)``: whether a sandboxed command can run here."""
    problem = bwrap.host_problem("the SWE sandbox")
    if problem:
        return False, problem
    ws = None
    try:
        ws = Workspace(SandboxLimits(timeout_s=30))
        r = ws.run("id -u && echo sandbox-ok")
        if "sandbox-ok" not in r.output:
            return False, f"bwrap did not run a command: {r.output.strip()[:400]}"
    except (OSError, SandboxUnavailable) as e:
        return False, f"bwrap failed: {e}"
    finally:
        if ws is not None:
            ws.close()
    return True, "ok"


def require_sandbox() -> None:
    ok, reason = bwrap_status()
    if not ok:
        raise SandboxUnavailable(reason)


def _next_uid() -> int:
    with _UID_LOCK:
        return _UID_BASE + next(_UIDS) % 256


def _chown_tree(root: str, uid: int) -> None:
    os.lchown(root, uid, uid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


class Workspace:
    """A private working copy plus ``/tmp`` for one episode (or one grading run)."""

    def __init__(self, limits: SandboxLimits = SandboxLimits(), prefix: str = "hj_swe_ep_"):
        self.limits = limits
        self.root = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.root, 0o700)
        self.testbed = os.path.join(self.root, "testbed")
        self.tmp = os.path.join(self.root, "tmp")
        os.makedirs(self.testbed)
        os.makedirs(self.tmp)
        self.uid = _next_uid()
        self._proc: Optional[subprocess.Popen] = None
        self.closed = False

    def hand_over(self) -> None:
        """Gives the working copy and /tmp to the episode's uid (after the host wrote them)."""
        _chown_tree(self.testbed, self.uid)
        _chown_tree(self.tmp, self.uid)

    def host_path(self, sandbox_path: str) -> Optional[str]:
        """The host path of ``/testbed/...`` or ``/tmp/...`` (None for anything else)."""
        p = posixpath.normpath(sandbox_path)
        for inner, outer in ((TESTBED, self.testbed), (SANDBOX_TMP, self.tmp)):
            if p == inner or p.startswith(inner + "/"):
                return outer + p[len(inner):]
        return None

    def run(self, command: str, timeout_s: Optional[float] = None) -> CommandResult:
        """Runs ``command`` with bash in the sandbox. Never raises for what the command does;
        raises ``SandboxUnavailable`` when the sandbox itself cannot start."""
        if self.closed:
            raise RuntimeError("Workspace.run after close()")
        lim = self.limits
        timeout = min(float(timeout_s or lim.timeout_s), lim.max_timeout_s)
        argv = _bwrap_argv(self.testbed, self.tmp, self.uid, lim, int(timeout) + 5)
        argv += ["/bin/bash", "--noprofile", "--norc", "-c", _SCRIPT, "bash", command]
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=sandbox_env(),
                                    start_new_session=True, close_fds=True)
        except OSError as e:
            raise SandboxUnavailable(f"cannot start bwrap: {e}") from e
        self._proc = proc
        head = bytearray()
        tail = bytearray()
        half = lim.max_output_bytes // 2
        truncated = False
        timed_out = False
        fd = proc.stdout.fileno()
        deadline = t0 + timeout
        exited_at = None
        while True:
            now = time.perf_counter()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 1.0:
                break
            if now >= deadline:
                timed_out = exited_at is None
                break
            ready, _, _ = select.select([fd], [], [], min(0.2, max(0.0, deadline - now)))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if len(head) < half:
                take = half - len(head)
                head += chunk[:take]
                chunk = chunk[take:]
            if chunk:
                tail += chunk
                if len(tail) > half:
                    del tail[:len(tail) - half]
                    truncated = True
        self._kill(proc)
        proc.stdout.close()
        self._proc = None
        text = head.decode("utf-8", "replace")
        if truncated:
            text += "\n[... output truncated ...]\n"
        text += tail.decode("utf-8", "replace")
        code = proc.returncode if not timed_out else None
        if code is not None and code < 0:
            code = 128 - code
        disk = bwrap.tree_size(self.root) > lim.disk_mb * 1024 * 1024
        return CommandResult(text, code, timed_out, truncated, time.perf_counter() - t0, disk)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._proc is not None:
            self._kill(self._proc)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
