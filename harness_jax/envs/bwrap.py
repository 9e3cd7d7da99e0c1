"""Bubblewrap sandboxes, shared by the SWE family (``envs/swe/sandbox.py``: one sandbox per agent
command) and the AppWorld service (``envs/appworld/venv_side/pool.py``: one long-lived sandbox per
worker slot, one for the evaluator).

A sandbox built by ``bwrap_argv`` has:

* new network, pid, ipc and uts namespaces (and a cgroup one where allowed): no network at all
  (only a loopback that is down), no view of the host's processes, and everything in it dies with
  the process that started it (``--die-with-parent``);
* a file system of its own: the host's ``/usr`` read-only (``/etc`` only when asked), the Python
  installation read-only, then exactly the binds the caller lists; nothing else of the host (no
  home directories, no ``/work``, no host ``/tmp``);
* ``setpriv`` to an unprivileged uid/gid with every capability dropped and ``no_new_privs``;
* ``prlimit`` limits: address space, processes of that uid (a fork bomb hits the ceiling), file
  size, open files, CPU seconds (optional), no core dumps.

Standard library only and no ``harness_jax`` import: the AppWorld service loads this file by path
inside AppWorld's own virtual environment.

Unprivileged uid ranges (a sandbox's uid is its owner's alone; ranges do not overlap):
SWE workspaces ``SWE_UID_BASE`` + 0..524287, AppWorld services ``APPWORLD_UID_BASE`` + 0..65535.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from typing import Optional, Sequence

SETPRIV = "/usr/bin/setpriv"
PRLIMIT = "/usr/bin/prlimit"
SWE_UID_BASE = 200_000
APPWORLD_UID_BASE = 800_000
NAMESPACES = ("--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid",
              "--unshare-net", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox")


@dataclasses.dataclass(frozen=True)
class Rlimits:
    """Resource limits of every process in a sandbox (``prlimit`` before the command)."""

    as_mb: int                     # RLIMIT_AS per process
    nproc: int                     # RLIMIT_NPROC: processes and threads of the sandbox's uid
    fsize_mb: int                  # largest file a process may write
    nofile: int                    # open files per process
    cpu_s: Optional[int] = None    # RLIMIT_CPU per process (None: no CPU-time limit)

    def prlimit_argv(self) -> list:
        argv = [PRLIMIT, f"--as={self.as_mb * 1024 * 1024}", f"--nproc={self.nproc}",
                f"--fsize={self.fsize_mb * 1024 * 1024}", f"--nofile={self.nofile}", "--core=0"]
        if self.cpu_s is not None:
            argv.append(f"--cpu={self.cpu_s}")
        return argv + ["--"]


def python_roots() -> list:
    """The running interpreter's installation (and virtual environment) outside /usr and /etc:
    what a sandbox must bind read-only to run this same Python."""
    roots: list = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        p = os.path.realpath(p)
        if not p.startswith(("/usr/", "/etc/")) and p not in roots and os.path.isdir(p):
            if not any(p.startswith(r + "/") for r in roots):
                roots.append(p)
    return roots


def bwrap_argv(uid: int, rlimits: Rlimits, binds: Sequence = (), chdir: str = "/", etc: bool = True,
               etc_files: Sequence[str] = (), extra_ro: Sequence[str] = ()) -> list:
    """The command prefix that runs a command in a fresh sandbox as ``uid``.

    ``binds``: ``(host_path, inside_path, writable)`` triples, mounted after the system;
    ``etc``: bind the host's whole ``/etc`` read-only (otherwise only ``etc_files`` of it);
    ``extra_ro``: more host paths bound read-only at the same place. Append the command."""
    argv = [shutil.which("bwrap") or "bwrap", *NAMESPACES, "--ro-bind", "/usr", "/usr"]
    made = {"/usr", "/etc"} if etc else {"/usr"}      # directories already there
    if etc:
        argv += ["--ro-bind", "/etc", "/etc"]
    else:
        for f in etc_files:
            if os.path.exists(f):
                argv += _ancestors(f, made) + ["--ro-bind", f, f]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.path.join("/", link)
        if os.path.islink(target):
            argv += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            argv += ["--ro-bind", target, target]
    for root in python_roots() + list(extra_ro):
        argv += _ancestors(root, made) + ["--ro-bind", root, root]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for host, inside, writable in binds:
        argv += _ancestors(inside, made) + ["--bind" if writable else "--ro-bind", host, inside]
    argv += ["--chdir", chdir, "--", SETPRIV, f"--reuid={uid}", f"--regid={uid}",
             "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    return argv + rlimits.prlimit_argv()


def _ancestors(path: str, made: set) -> list:
    """``--dir`` for every ancestor of ``path`` not in ``made``, traversable by the sandbox's
    uid (bwrap would make them 0700 as root)."""
    argv = []
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        anc = "/" + "/".join(parts[:i])
        if anc not in made:
            argv += ["--perms", "0755", "--dir", anc]
            made.add(anc)
    return argv


def host_problem(who: str) -> Optional[str]:
    """Why ``who`` (e.g. "the SWE sandbox") cannot sandbox here, or None when it can try."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return f"{who} needs Linux"
    if shutil.which("bwrap") is None:
        return ("bubblewrap is not installed: `apt-get install bubblewrap` (or "
                "`bash scripts/swe_sandbox.sh install`)")
    if os.geteuid() != 0:
        return (f"{who} switches to its own unprivileged uid, which needs root (CAP_SETUID); "
                "run it as root or inside a container")
    for tool in (SETPRIV, PRLIMIT):
        if not os.path.exists(tool):
            return f"{tool} is missing (Debian package util-linux)"
    return None


def tree_size(root: str) -> int:
    """Bytes of the regular files under ``root`` (symbolic links are not followed)."""
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
