"""Host side of hook isolation: a reusable worker process with a wall-clock kill.

LLM-written hook code is treated as hostile. ``HookSandbox`` keeps one warm worker
(``sandbox_worker.py``) and talks JSON lines to it over pipes. Isolation layers (see the worker's
docstring): a fresh interpreter in isolated mode, a scrubbed environment, a network namespace when
``unshare --net`` works (otherwise the worker's audit hook refuses sockets), an unprivileged uid
when started as root, rlimits (address space, CPU, file size, open files, processes), an audit
hook refusing file/process/socket/introspection operations, and here a host-side wall-clock
timer: a call that does not answer in time gets the worker SIGKILLed and restarted. Any crash,
timeout, oversize or malformed reply is a failed call: the hook has no effect, and the failure is
counted in ``stats`` and logged.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Optional
import queue

log = logging.getLogger(__name__)

WORKER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_worker.py")


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits of the worker process (per worker, not per call, except ``timeout_s``)."""

    timeout_s: float = 1.0            # default wall-clock limit per call
    as_mb: int = 512                  # RLIMIT_AS
    cpu_s: int = 600                  # RLIMIT_CPU over the worker's life (backstop; it restarts)
    fsize_bytes: int = 0              # RLIMIT_FSIZE: no file may grow
    nofile: int = 16                  # RLIMIT_NOFILE
    max_reply_bytes: int = 1 << 20    # a larger reply kills the worker
    start_timeout_s: float = 10.0
    use_netns: Optional[bool] = None  # None: use a network namespace when available

    def __post_init__(self):
        if self.timeout_s <= 0:
            raise ValueError(f"SandboxConfig.timeout_s must be > 0, got {self.timeout_s}")
        if self.as_mb < 64:
            raise ValueError(f"SandboxConfig.as_mb must be >= 64 (the interpreter needs it), "
                             f"got {self.as_mb}")


@dataclasses.dataclass
class CallOutcome:
    ok: bool
    result: Any = None
    nb: Optional[dict] = None
    error: str = ""
    elapsed_s: float = 0.0
    timed_out: bool = False


@dataclasses.dataclass
class SandboxStats:
    calls: int = 0
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    crashes: int = 0
    restarts: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=1)
def netns_available() -> bool:
    """Whether ``unshare --net`` can start a process in a fresh network namespace here."""
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        r = subprocess.run([exe, "--net", "true"], capture_output=True, timeout=10)
        if r.returncode == 0:
            return True
        r = subprocess.run([exe, "--user", "--map-root-user", "--net", "true"],
                           capture_output=True, timeout=10)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def _netns_prefix() -> tuple[str, ...]:
    exe = shutil.which("unshare")
    if exe is None:
        return ()
    for prefix in ((exe, "--net"), (exe, "--user", "--map-root-user", "--net")):
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            continue
    return ()


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:24]


class HookSandbox:
    """One warm worker process; thread-safe (calls are serialised by a lock)."""

    def __init__(self, config: SandboxConfig = SandboxConfig()):
        self.config = config
        self.stats = SandboxStats()
        self.isolation: dict = {}
        self._proc: Optional[subprocess.Popen] = None
        self._buf = b""
        self._known: set[str] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._scratch: Optional[str] = None
        self._oversize = False

    # -- lifecycle ---------------------------------------------------------------------------
    def _start(self) -> None:
        cfg = self.config
        if self._scratch is None or not os.path.isdir(self._scratch):
            self._scratch = tempfile.mkdtemp(prefix="hj_hook_scratch_")
            os.chmod(self._scratch, 0o755)
        use_netns = cfg.use_netns if cfg.use_netns is not None else netns_available()
        prefix = _netns_prefix() if use_netns else ()
        wcfg = {"scratch": self._scratch, "as_mb": cfg.as_mb, "cpu_s": cfg.cpu_s,
                "fsize_bytes": cfg.fsize_bytes, "nofile": cfg.nofile, "netns": bool(prefix)}
        cmd = [*prefix, sys.executable, "-I", "-S", "-B", WORKER_PATH, json.dumps(wcfg)]
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, close_fds=True,
                                      cwd=self._scratch, start_new_session=True)
        self._buf = b""
        self._known = set()
        line = self._read_line(cfg.start_timeout_s)
        if line is None:
            self._kill()
            raise RuntimeError("hook sandbox worker did not start (no hello within "
                               f"{cfg.start_timeout_s}s); check that {sys.executable} runs "
                               f"{WORKER_PATH}")
        hello = json.loads(line)
        self.isolation = {k: hello.get(k) for k in ("uid", "netns", "limits", "pid")}
        self.isolation["audit_hook"] = True

    def _kill(self) -> None:
        p = self._proc
        self._proc = None
        if p is None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                p.kill()
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("hook worker %s did not exit after SIGKILL", p.pid)
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            self._kill()
            if self._scratch and os.path.isdir(self._scratch):
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._kill()
            if self._scratch:
                shutil.rmtree(self._scratch, ignore_errors=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    @property
    def worker_pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    # -- I/O -----------------------------------------------------------------------------------
    def _read_line(self, timeout_s: float) -> Optional[bytes]:
        """One reply line, or None on timeout / EOF / oversize (the caller kills the worker)."""
        assert self._proc is not None and self._proc.stdout is not None
        self._oversize = False
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
            if len(self._buf) > self.config.max_reply_bytes:
                self._oversize = True
                return None
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def call(self, source: str, ctx: Any, nb: Optional[dict] = None, fn: str = "hook",
             timeout_s: Optional[float] = None) -> CallOutcome:
        """Runs ``fn(ctx, nb)`` from ``source`` in the worker. Never raises on hook failure."""
        timeout_s = self.config.timeout_s if timeout_s is None else float(timeout_s)
        try:  # serialised once here; the request embeds the JSON text as is
            payload_ctx = json.dumps(ctx, default=str, ensure_ascii=False)
            payload_nb = json.dumps(nb or {}, default=str, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"HookSandbox.call: ctx and nb must be JSON-serialisable ({e})") from e
        with self._lock:
            self.stats.calls += 1
            t0 = time.perf_counter()
            out = self._call_locked(source, payload_ctx, payload_nb, fn, timeout_s)
            out.elapsed_s = time.perf_counter() - t0
            if out.ok:
                self.stats.ok += 1
            else:
                self.stats.errors += 1
                log.info("hook call failed: %s", out.error)
            return out

    def _call_locked(self, source, ctx, nb, fn, timeout_s) -> CallOutcome:
        for attempt in range(2):
            if self._proc is None or self._proc.poll() is not None:
                if self._proc is not None:
                    self.stats.crashes += 1
                    self._kill()
                self.stats.restarts += int(self.stats.calls > 1 or attempt > 0)
                try:
                    self._start()
                except (OSError, RuntimeError, ValueError) as e:
                    self._kill()
                    self.stats.crashes += 1
                    return CallOutcome(False, error=f"worker start failed: {e}")
            key = source_key(source)
            rid = next(self._ids)
            head = {"id": rid, "key": key, "fn": fn}
            if key not in self._known:
                head["source"] = source
            req = json.dumps(head)[:-1] + ', "ctx": ' + ctx + ', "nb": ' + nb + "}\n"
            try:
                self._proc.stdin.write(req.encode("utf-8"))
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._kill()
                if attempt == 0:
                    continue  # the worker died between calls; restart once and retry
                return CallOutcome(False, error="worker pipe closed")
            line = self._read_line(timeout_s)
            if line is None:
                alive = self._proc is not None and self._proc.poll() is None
                self._kill()
                if self._oversize:
                    self.stats.crashes += 1
                    return CallOutcome(False, error="reply larger than "
                                                    f"{self.config.max_reply_bytes} bytes "
                                                    "(worker killed)")
                if alive:
                    self.stats.timeouts += 1
                    return CallOutcome(False, error=f"timeout after {timeout_s:.3f}s (worker "
                                                    "killed)", timed_out=True)
                self.stats.crashes += 1
                return CallOutcome(False, error="worker crashed (killed by a resource limit?)")
            try:
                rep = json.loads(line)
            except ValueError:
                self._kill()
                return CallOutcome(False, error="malformed reply from worker")
            if not isinstance(rep, dict) or rep.get("id") != rid:
                self._kill()  # out-of-band writes: do not trust this worker any more
                return CallOutcome(False, error="reply id mismatch (worker discarded)")
            if rep.get("ok"):
                self._known.add(key)
                nb_out = rep.get("nb")
                return CallOutcome(True, result=rep.get("result"),
                                   nb=nb_out if isinstance(nb_out, dict) else {})
            err = str(rep.get("error", "unknown error"))
            if err.startswith("UnknownKey") and attempt == 0:
                self._known.discard(key)
                continue
            if not err.startswith(("SyntaxError", "UnknownKey")):
                self._known.add(key)
            return CallOutcome(False, error=err)
        return CallOutcome(False, error="worker unavailable")


class HookSandboxPool:
    """Several warm workers behind the ``HookSandbox.call`` interface.

    A call takes whichever worker is free, so one hostile hook that runs into its timeout does not
    hold up the hooks of other episodes or overlays (head-of-line blocking with a single worker).
    Workers start lazily, on first use.
    """

    def __init__(self, size: int = 4, config: SandboxConfig = SandboxConfig()):
        if size < 1:
            raise ValueError(f"HookSandboxPool.size must be >= 1, got {size}")

        self.config = config
        self.workers = [HookSandbox(config) for _ in range(size)]
        self._free: "queue.Queue[HookSandbox]" = queue.Queue()
        for w in self.workers:
            self._free.put(w)

    def call(self, source: str, ctx: Any, nb: Optional[dict] = None, fn: str = "hook",
             timeout_s: Optional[float] = None) -> CallOutcome:
        w = self._free.get()
        try:
            return w.call(source, ctx, nb, fn=fn, timeout_s=timeout_s)
        finally:
            self._free.put(w)

    @property
    def stats(self) -> SandboxStats:
        total = SandboxStats()
        for w in self.workers:
            for k, v in w.stats.as_dict().items():
                setattr(total, k, getattr(total, k) + v)
        return total

    @property
    def isolation(self) -> dict:
        return next((w.isolation for w in self.workers if w.isolation), {})

    def close(self) -> None:
        for w in self.workers:
            w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_DEFAULT: Optional[HookSandboxPool] = None
_DEFAULT_LOCK = threading.Lock()
_DEFAULT_WORKERS: Optional[int] = None


def configure_default_sandbox(workers: int) -> None:
    """Sets the size of the shared pool before its first use (training runs pass
    ``config.harness.hook_workers``)."""
    global _DEFAULT_WORKERS
    _DEFAULT_WORKERS = int(workers)


def default_sandbox() -> HookSandboxPool:
    """The process-wide shared worker pool used by ``run_hook`` and overlays (workers:
    ``configure_default_sandbox``, else ``$HARNESS_JAX_HOOK_WORKERS`` (a deployment override),
    else 4)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            n = _DEFAULT_WORKERS or int(os.environ.get("HARNESS_JAX_HOOK_WORKERS", "4"))
            _DEFAULT = HookSandboxPool(size=max(1, n))
            import atexit

            atexit.register(_DEFAULT.close)
        return _DEFAULT
