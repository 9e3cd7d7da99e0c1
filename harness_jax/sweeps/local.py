"""Local backend: each run is a child process of the sweep driver, at most ``max_parallel`` at once.

Children run in their own session (a Ctrl-C in the terminal reaches only the driver, which
forwards SIGTERM so every launcher checkpoints and exits cleanly) and, on Linux, get SIGTERM
when the driver dies (``PR_SET_PDEATHSIG``), so a killed driver leaves no orphan writing into a
run directory that the next driver would resume.
"""
from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from harness_jax.sweeps.rundir import RunDir, host
from harness_jax.sweeps.spec import SweepError


def _pdeathsig() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclasses.dataclass
class LocalHandle:
    run: RunDir
    proc: subprocess.Popen
    log: object
    slot: int
    started: float
    stop_sent: Optional[float] = None


@dataclasses.dataclass
class Outcome:
    exit_code: Optional[int]              # None: no exit code (killed, lost, stopped job)
    interrupted: bool = False             # the backend knows the run was stopped, not finished
    detail: str = ""                      # backend's own words (e.g. Ray job status)
    log: Optional[str] = None             # log text the driver should append (cluster backends)


class LocalBackend:
    """Runs launcher processes on this machine; ``env`` values may use ``{slot}`` (0 ..
    max_parallel-1), e.g. ``CUDA_VISIBLE_DEVICES={slot}`` for one GPU per run."""

    name = "local"
    on_interrupt = "stop"                 # the driver stops children when it is interrupted

    def __init__(self, max_parallel: int = 1, env: Optional[dict] = None, cwd: str = ".",
                 kill_after_s: float = 600.0):
        if int(max_parallel) < 1:
            raise SweepError(f"--max_parallel={max_parallel}: the local backend needs >= 1")
        self.max_parallel = int(max_parallel)
        self.env = dict(env or {})
        self.cwd = cwd
        self.kill_after_s = float(kill_after_s)
        self._free = list(range(self.max_parallel))

    def describe(self) -> dict:
        return {"backend": self.name, "max_parallel": self.max_parallel, "env": self.env}

    def start(self, run: RunDir, argv: list[str], attempt: int) -> LocalHandle:
        slot = self._free.pop(0)
        env = dict(os.environ)
        env.update({k: str(v).format(slot=slot) for k, v in self.env.items()})
        env["HARNESS_JAX_SWEEP_SLOT"] = str(slot)
        os.makedirs(run.meta, exist_ok=True)
        log = open(run.log_path, "ab", buffering=0)
        log.write(f"\n===== attempt {attempt} (local, slot {slot}) {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                  f"{' '.join(argv)}\n".encode())
        proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_pdeathsig)
        return LocalHandle(run=run, proc=proc, log=log, slot=slot, started=time.time())

    def attempt_info(self, h: LocalHandle) -> dict:
        return {"pid": h.proc.pid, "slot": h.slot}

    def poll(self, h: LocalHandle) -> Optional[Outcome]:
        rc = h.proc.poll()
        if rc is None:
            if h.stop_sent is not None and time.time() - h.stop_sent > self.kill_after_s:
                self._signal(h, signal.SIGKILL)
            return None
        h.log.close()
        self._free.append(h.slot)
        self._free.sort()
        return Outcome(exit_code=rc)

    def stop(self, h: LocalHandle) -> None:
        """Asks the launcher to checkpoint and exit (SIGTERM); SIGKILL after ``kill_after_s``."""
        if h.stop_sent is None:
            h.stop_sent = time.time()
            self._signal(h, signal.SIGTERM)

    def kill(self, h: LocalHandle) -> None:
        self._signal(h, signal.SIGKILL)

    @staticmethod
    def _signal(h: LocalHandle, sig: int) -> None:
        try:
            os.killpg(h.proc.pid, sig)
        except ProcessLookupError:
            pass

    def reattach(self, run: RunDir, attempt: dict) -> None:
        """A run recorded as running by an earlier driver: its process died with that driver
        (PDEATHSIG), so nothing is re-attached; refuses when it is still alive on this host."""
        assert_not_running(run, attempt)
        return None


def assert_not_running(run: RunDir, attempt: dict) -> None:
    """Raises when ``attempt``'s launcher process still runs on this host."""
    pid = attempt.get("pid")
    if pid and attempt.get("host") == host() and _alive(int(pid)) and run.path in _cmdline(int(pid)):
        raise SweepError(f"run {run.name} is still running as pid {pid} (started by an earlier "
                         f"driver); wait for it or stop it (kill {pid}) before re-running the sweep")
