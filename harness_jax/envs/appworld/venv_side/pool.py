"""The AppWorld service's sandboxes, seen from the manager (runs in the manager's process; standard
library only, plus the project's shared bubblewrap module ``envs/bwrap.py`` loaded by path).

* ``Sandbox``: one bubblewrap sandbox (the SWE family's machinery: namespaces, no network, a
  read-only system, setpriv to an unprivileged uid, prlimit) running ``inside.py``'s zygote,
  driven over a SOCK_SEQPACKET control socket.
* ``WorkerSlot``: one episode at a time. Its sandbox sees ``/appworld/data`` (read-only: the base
  databases, the API docs and ONE task's ``specs.json`` + ``dbs/``, copied in by the manager for
  each episode), ``/appworld/experiments/outputs`` and ``/appworld/tmp`` (writable, emptied after
  every episode), and the Python installation. Each episode is a fresh child of the slot's
  zygote, serving AppWorld's environment server on a listening socket the manager made in a
  directory only root can enter; the child and everything it started are killed when the
  episode ends.
* ``Evaluator``: its own sandbox and uid; per evaluation a fresh child sees the task's ground
  truth, its start state and a copy of the episode's end state (regular files only, never
  through a link), runs AppWorld's evaluator and writes the result. Ground truth never enters a
  worker slot.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
INSIDE_PY = os.path.join(HERE, "inside.py")
CODE_INSIDE = "/opt/harness_jax/inside.py"
ROOT = "/appworld"
START_TIMEOUT_S = 180.0
# Of the host's /etc only the clock's zone and the dynamic loader's cache (without it every
# library lookup, e.g. ctypes.util.find_library, falls back to running the C compiler).
ETC_FILES = ("/etc/localtime", "/etc/ld.so.cache")


def _load_bwrap():
    name = "harness_jax_envs_bwrap"
    if name not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bwrap.py")
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


bwrap = _load_bwrap()


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class SandboxError(RuntimeError):
    """A sandbox could not start, answer or do what was asked (an infrastructure failure)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Limits of every sandboxed process (per process) and of one episode's files."""

    as_mb: int = 4096        # RLIMIT_AS
    nproc: int = 256         # RLIMIT_NPROC: processes + threads of the sandbox's uid
    fsize_mb: int = 64       # largest file a process may write
    nofile: int = 1024       # open files per process
    cpu_s: int = 3600        # CPU seconds of one episode's child (or one evaluation)
    disk_mb: int = 256       # an episode's writable files, checked after every cell

    def rlimits(self):
        return bwrap.Rlimits(as_mb=self.as_mb, nproc=self.nproc, fsize_mb=self.fsize_mb,
                             nofile=self.nofile, cpu_s=None)   # the children set cpu_s


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def tail_nofollow(path: str, n: int = 30) -> str:
    """The last lines of a file the sandbox could have replaced (never follows a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "(no log)"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "(no log)"
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - 16384), os.SEEK_SET)
        data = os.read(fd, 16384).decode(errors="replace")
    finally:
        os.close(fd)
    return "\n".join(data.splitlines()[-n:])


# ------------------------------------------------------------------------------------------------
# Files: a task into a root (trusted data tree), the end state out of a slot (untrusted)
# ------------------------------------------------------------------------------------------------
def tree_signature(data_dir: str) -> str:
    """Identifies a data tree's base databases and API docs (path, names, sizes, mtimes)."""
    h = hashlib.sha256(os.path.realpath(data_dir).encode())
    for sub in ("base_dbs", "api_docs"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(data_dir, sub), followlinks=True):
            dirnames.sort()
            for name in sorted(filenames):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{os.path.relpath(dirpath, data_dir)}/{name}|{st.st_size}|"
                         f"{st.st_mtime_ns}".encode())
    return h.hexdigest()[:20]


def _mkdir(path: str, mode: int = 0o755) -> None:
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)


def install(src: str, dst: str) -> None:
    """A trusted file or directory of a data tree into a root: hard links where the file is
    world-readable and on the same file system, else read-only copies (0444)."""
    if os.path.isdir(src):
        _mkdir(dst)
        for name in sorted(os.listdir(src)):
            install(os.path.join(src, name), os.path.join(dst, name))
        return
    real = os.path.realpath(src)
    if os.stat(real).st_mode & 0o004:
        try:
            os.link(real, dst)
            return
        except OSError:
            pass
    shutil.copyfile(real, dst)
    os.chmod(dst, 0o444)


def install_task(data_dir: str, task_id: str, dst: str, ground_truth: bool) -> None:
    """One task's files: ``specs.json`` and ``dbs/`` (and ``ground_truth/`` for the evaluator)."""
    src = os.path.join(data_dir, "tasks", task_id)
    _mkdir(dst)
    names = ["specs.json", "dbs"] + (["ground_truth"] if ground_truth else [])
    for name in names:
        if os.path.exists(os.path.join(src, name)):
            install(os.path.join(src, name), os.path.join(dst, name))


def copy_untrusted(base: str, parts: Sequence[str], dst: str, max_bytes: int) -> int:
    """Copies the regular files of ``base/parts...`` (written by an agent's process) into
    ``dst``: every path component is opened without following links, other file types are
    skipped, and more than ``max_bytes`` in all is an error. Returns the bytes copied."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        total = 0
        for name in sorted(os.listdir(fd)):
            try:
                ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                continue                     # a link, or gone
            try:
                st = os.fstat(ffd)
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += st.st_size
                if total > max_bytes:
                    raise ValueError(f"the episode's end state is larger than {max_bytes} bytes")
                with open(os.path.join(dst, name), "wb") as out:
                    while chunk := os.read(ffd, 1 << 20):
                        out.write(chunk)
            finally:
                os.close(ffd)
        return total
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# One sandbox running inside.py's zygote
# ------------------------------------------------------------------------------------------------
class _Launcher:
    """Starts every sandbox from one thread that lives as long as the manager: bwrap's
    ``--die-with-parent`` fires when the *thread* that started it exits."""

    def __init__(self):
        self.lock = threading.Lock()
        self.jobs: list = []
        self.cv = threading.Condition(self.lock)
        self.thread: Optional[threading.Thread] = None

    def popen(self, argv: list, **kw) -> subprocess.Popen:
        box: dict = {}
        done = threading.Event()
        with self.cv:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="sandbox-launcher",
                                               daemon=True)
                self.thread.start()
            self.jobs.append((argv, kw, box, done))
            self.cv.notify()
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["proc"]

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.jobs:
                    self.cv.wait()
                argv, kw, box, done = self.jobs.pop(0)
            try:
                box["proc"] = subprocess.Popen(argv, **kw)
            except OSError as e:
                box["error"] = e
            done.set()


_LAUNCHER = _Launcher()


def sandbox_env(home: str) -> dict:
    return {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": home, "TMPDIR": home, "IPYTHONDIR": f"{home}/.ipython",
            "APPWORLD_ROOT": ROOT, "APPWORLD_CACHE": f"{home}/.appworld", "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
            "USER": "agent", "TERM": "dumb"}


class Sandbox:
    """A bubblewrap sandbox running ``inside.py zygote`` as ``uid`` (see the module docstring)."""

    def __init__(self, name: str, role: str, uid: int, limits: Limits, binds: Sequence,
                 home: str, log_path: str):
        self.name, self.role, self.uid, self.limits = name, role, uid, limits
        self.binds, self.home, self.log_path = list(binds), home, log_path
        self.lock = threading.Lock()
        self.proc: Optional[subprocess.Popen] = None
        self.ctl: Optional[socket.socket] = None
        self.info: dict = {}
        self._pidns: Optional[str] = None

    def argv(self, control_fd: int) -> list:
        binds = [(INSIDE_PY, CODE_INSIDE, False)] + self.binds
        return bwrap.bwrap_argv(self.uid, self.limits.rlimits(), binds=binds, chdir=ROOT,
                                etc=False, etc_files=ETC_FILES) + [
            sys.executable, "-s", "-B", CODE_INSIDE, "zygote", "--role", self.role,
            "--control-fd", str(control_fd)]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        problem = bwrap.host_problem("the AppWorld sandbox")
        if problem:
            raise SandboxError(problem)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        t0 = now()
        with open(self.log_path, "ab") as log:
            self.proc = _LAUNCHER.popen(
                self.argv(theirs.fileno()), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=sandbox_env(self.home), pass_fds=[theirs.fileno()], start_new_session=True)
        theirs.close()
        mine.settimeout(timeout_s)
        try:
            msg = mine.recv(1 << 16)
        except OSError:
            msg = b""
        if not msg:
            mine.close()
            self.stop()
            raise SandboxError(f"the {self.name} sandbox did not start within {timeout_s:.0f} s "
                               f"(bwrap or the zygote failed); log {self.log_path}:\n"
                               + tail_nofollow(self.log_path))
        self.info = dict(json.loads(msg), start_s=round(now() - t0, 3))
        self.ctl = mine

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ctl is not None

    def call(self, req: dict, fds: Sequence[int] = (), timeout_s: float = 30.0) -> dict:
        """One request to the zygote; a dead or silent zygote stops the sandbox."""
        with self.lock:
            if not self.alive():
                raise SandboxError(f"the {self.name} sandbox is not running")
            try:
                self.ctl.settimeout(timeout_s)
                socket.send_fds(self.ctl, [json.dumps(req).encode()], list(fds))
                data = self.ctl.recv(1 << 16)
            except OSError as e:
                data, err = b"", e
            else:
                err = None
            if not data:
                self._stop_locked()
                raise SandboxError(f"the {self.name} sandbox's zygote did not answer "
                                   f"{req.get('op')} ({err!r}); log {self.log_path}:\n"
                                   + tail_nofollow(self.log_path))
        reply = json.loads(data)
        if "error" in reply:
            raise SandboxError(f"{self.name} zygote: {reply['error']}")
        return reply

    def host_pid(self, ns_pid: int) -> Optional[int]:
        """The host pid of the sandbox's process ``ns_pid`` (None if gone)."""
        if self._pidns is None:
            self._pidns = self._find_pidns()
        if self._pidns is None:
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != self._pidns:
                    continue
                with open(f"/proc/{entry}/status") as f:
                    nspid = next(ln for ln in f if ln.startswith("NSpid:")).split()
            except (OSError, StopIteration):
                continue
            if len(nspid) >= 3 and int(nspid[-1]) == ns_pid:
                return int(entry)
        return None

    def _find_pidns(self) -> Optional[str]:
        if not self.alive():
            return None
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                kids = f.read().split()
            return os.readlink(f"/proc/{kids[0]}/ns/pid") if kids else None
        except OSError:
            return None

    def stop(self) -> None:
        with self.lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        if self.proc is not None:
            if self.proc.poll() is None:
                try:   # bwrap's namespace dies with it (--die-with-parent, pid namespace)
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._pidns = None


def _empty_dir(path: str) -> None:
    """Removes what is inside ``path`` but keeps the directory itself (it may be the source of
    a sandbox's bind mount); never follows a link."""
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def _reset_dir(path: str, uid: int) -> None:
    """An empty directory owned by ``uid`` (mode 0700)."""
    os.makedirs(path, exist_ok=True)
    _empty_dir(path)
    os.chown(path, uid, uid)
    os.chmod(path, 0o700)


class WorkerSlot:
    """Where one episode at a time runs (see the module docstring)."""

    def __init__(self, index: int, state_dir: str, uid: int, limits: Limits):
        self.index, self.uid, self.limits = index, uid, limits
        self.dir = os.path.join(state_dir, "slots", str(index))
        self.data = os.path.join(self.dir, "data")
        self.outputs = os.path.join(self.dir, "rw", "outputs")
        self.tmp = os.path.join(self.dir, "rw", "tmp")
        self.sock = os.path.join(self.dir, "sock", "worker.sock")   # root-only directory
        self.sandbox: Optional[Sandbox] = None
        self.tree_sig: Optional[str] = None
        self.child_ns: Optional[int] = None
        self.child_pid: Optional[int] = None
        self.state = "cold"          # cold | warming | idle | busy | freeing (SlotPool's)
        self.episode: Optional[str] = None
        self.episodes_served = 0

    def describe(self) -> dict:
        return {"id": self.index, "pid": self.child_pid, "uid": self.uid, "state": self.state,
                "sandbox_pid": self.sandbox.proc.pid if self.started() else None,
                "episode": self.episode, "episodes_served": self.episodes_served}

    def started(self) -> bool:
        return self.sandbox is not None and self.sandbox.alive()

    def start(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        for d in (self.data, os.path.dirname(self.sock)):
            _mkdir(d, 0o755 if d == self.data else 0o700)
        self.tree_sig = None
        self._reset_rw()
        binds = [(self.data, f"{ROOT}/data", False), (self.outputs, f"{ROOT}/experiments/outputs",
                                                      True), (self.tmp, f"{ROOT}/tmp", True)]
        self.sandbox = Sandbox(f"worker {self.index}", "worker", self.uid, self.limits, binds,
                               f"{ROOT}/tmp", os.path.join(self.dir, "sandbox.log"))
        self.sandbox.start()

    def _reset_rw(self) -> None:
        for d in (self.outputs, self.tmp):
            _reset_dir(d, self.uid)

    def prepare(self, data_dir: str, task_id: str) -> None:
        """The episode's files: the tree's base databases and API docs (kept while the tree
        is the same) and this task's ``specs.json`` and ``dbs/``; nothing else."""
        sig = tree_signature(data_dir)
        if sig != self.tree_sig:
            self.tree_sig = None
            _empty_dir(self.data)
            for sub in ("base_dbs", "api_docs"):
                install(os.path.join(data_dir, sub), os.path.join(self.data, sub))
            self.sandbox.call({"op": "preload", "root": ROOT}, timeout_s=120)
            self.tree_sig = sig
        tasks = os.path.join(self.data, "tasks")
        shutil.rmtree(tasks, ignore_errors=True)
        _mkdir(tasks)
        install_task(data_dir, task_id, os.path.join(tasks, task_id), ground_truth=False)

    def spawn(self, timeout_s: float, ready) -> None:
        """A fresh child serving AppWorld's environment server on a new listening socket;
        ``ready(sock_path, deadline)`` waits until it answers."""
        try:
            os.remove(self.sock)
        except FileNotFoundError:
            pass
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            lsock.bind(self.sock)
            lsock.listen(16)
            reply = self.sandbox.call({"op": "spawn_worker", "log": f"{ROOT}/tmp/.worker.log",
                                       "cpu_s": self.limits.cpu_s}, fds=[lsock.fileno()])
        finally:
            lsock.close()     # the child holds the only other copy: its death refuses calls
        self.child_ns = int(reply["pid"])
        self.child_pid = self.sandbox.host_pid(self.child_ns)
        ready(self.sock, now() + timeout_s)

    def kill_children(self) -> bool:
        """Kills the episode's processes (the zygote's ``reap``); stops the whole sandbox when
        the zygote does not answer. True when the sandbox is still usable."""
        if not self.started():
            return False
        try:
            ok = bool(self.sandbox.call({"op": "reap"}, timeout_s=20).get("ok"))
        except SandboxError:
            ok = False
        if not ok:
            self.stop()
        return ok

    def end(self) -> bool:
        """Ends the episode: kills its processes and empties its files."""
        ok = self.kill_children()
        self.child_ns = self.child_pid = None
        shutil.rmtree(os.path.join(self.data, "tasks"), ignore_errors=True)
        if ok:
            self._reset_rw()
        return ok

    def stop(self) -> None:
        if self.sandbox is not None:
            self.sandbox.stop()
        self.child_ns = self.child_pid = None

    def disk_used(self) -> int:
        return bwrap.tree_size(os.path.join(self.dir, "rw"))

    def log_tail(self) -> str:
        return tail_nofollow(os.path.join(self.tmp, ".worker.log"))


class EvaluationError(RuntimeError):
    """AppWorld's evaluator failed on an episode (or did not finish in time)."""


class Evaluator:
    """AppWorld's evaluator in its own sandbox (see the module docstring)."""

    def __init__(self, state_dir: str, uid: int, limits: Limits):
        self.uid, self.limits = uid, limits
        self.dir = os.path.join(state_dir, "evaluator")
        self.roots = os.path.join(self.dir, "roots")
        self.results = os.path.join(self.dir, "results")
        self.scratch = os.path.join(self.dir, "scratch")
        self.lock = threading.Lock()
        self.trees: set = set()
        self.preloaded: Optional[str] = None
        self.sandbox: Optional[Sandbox] = None

    def start(self) -> None:
        with self.lock:
            if self.sandbox is not None and self.sandbox.alive():
                return
            shutil.rmtree(self.dir, ignore_errors=True)
            _mkdir(self.roots)
            for d in (self.results, self.scratch):
                _reset_dir(d, self.uid)
            self.trees, self.preloaded = set(), None
            binds = [(self.roots, ROOT, False), (self.results, "/results", True),
                     (self.scratch, "/scratch", True)]
            self.sandbox = Sandbox("evaluator", "evaluator", self.uid, self.limits, binds,
                                   "/scratch", os.path.join(self.dir, "sandbox.log"))
            self.sandbox.start()

    def _tree(self, data_dir: str) -> str:
        """The tree's base databases and API docs, installed once under ``_trees/<sig>``; the
        evaluator's zygote holds the API docs of the latest tree (AppWorld parses them in every
        ``Task.load``, though evaluation never reads them)."""
        sig = tree_signature(data_dir)
        with self.lock:
            if sig not in self.trees:
                dst = os.path.join(self.roots, "_trees", sig, "data")
                shutil.rmtree(os.path.dirname(dst), ignore_errors=True)
                _mkdir(dst)
                for sub in ("base_dbs", "api_docs"):
                    install(os.path.join(data_dir, sub), os.path.join(dst, sub))
                self.trees.add(sig)
            if sig != self.preloaded:
                self.sandbox.call({"op": "preload", "root": f"{ROOT}/_trees/{sig}"},
                                  timeout_s=120)
                self.preloaded = sig
        return sig

    def evaluate(self, data_dir: str, task_id: str, experiment: str, copy_end_state,
                 timeout_s: float) -> dict:
        """Evaluates one episode: ``copy_end_state(dst_dir)`` puts the episode's ``dbs`` there.
        Returns ``{"tracker", "eval_s", "prepare_s"}``; raises ``EvaluationError``."""
        t0 = now()
        if self.sandbox is None or not self.sandbox.alive():
            self.start()
        sig = self._tree(data_dir)
        eid = secrets.token_hex(8)
        root = os.path.join(self.roots, eid)
        result = os.path.join(self.results, f"{eid}.json")
        try:
            _mkdir(os.path.join(root, "data", "tasks"))
            for sub in ("base_dbs", "api_docs"):
                os.symlink(f"../../_trees/{sig}/data/{sub}", os.path.join(root, "data", sub))
            install_task(data_dir, task_id, os.path.join(root, "data", "tasks", task_id),
                         ground_truth=True)
            end = os.path.join(root, "experiments", "outputs", experiment, "tasks", task_id, "dbs")
            os.makedirs(end)
            copy_end_state(end)
            for dirpath, dirnames, filenames in os.walk(os.path.join(root, "experiments")):
                os.chmod(dirpath, 0o755)
                for name in filenames:
                    os.chmod(os.path.join(dirpath, name), 0o444)
            prepare_s = now() - t0
            reply = self.sandbox.call({"op": "spawn_evaluator", "root": f"{ROOT}/{eid}",
                                       "task_id": task_id, "experiment": experiment,
                                       "result": f"/results/{eid}.json",
                                       "log": f"/scratch/{eid}.log", "cpu_s": self.limits.cpu_s})
            out = self._wait(result, self.sandbox.host_pid(int(reply["pid"])), timeout_s, eid)
        finally:
            shutil.rmtree(root, ignore_errors=True)
            for p in (result, os.path.join(self.scratch, f"{eid}.log")):
                try:
                    os.remove(p)
                except FileNotFoundError:
                    pass
        if "tracker" not in out:
            raise EvaluationError(f"AppWorld's evaluator failed on task {task_id!r}: "
                                  f"{out.get('error')}\n{out.get('traceback', '')}")
        return dict(out, prepare_s=round(prepare_s, 4))

    def _wait(self, result: str, pid: Optional[int], timeout_s: float, eid: str) -> dict:
        deadline = now() + timeout_s
        while True:
            if os.path.exists(result):
                fd = os.open(result, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd) as f:
                    return json.load(f)
            dead = pid is not None and not pid_alive(pid)
            if dead and not os.path.exists(result):
                log = tail_nofollow(os.path.join(self.scratch, f"{eid}.log"))
                raise EvaluationError(f"AppWorld's evaluator process died; log:\n{log}")
            if now() > deadline:
                if pid is not None:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                raise EvaluationError(f"AppWorld's evaluator did not finish within "
                                      f"{timeout_s:.0f} s")
            time.sleep(0.005)

    def stop(self) -> None:
        if self.sandbox is not None:
            self.sandbox.stop()


class Busy(RuntimeError):
    """Every worker slot holds an episode; the message names each holder."""


class SlotPool:
    """Hands out worker slots (one episode each), starting sandboxes on demand."""

    def __init__(self, state_dir: str, max_workers: int, uid_base: int, limits: Limits):
        self.slots = [WorkerSlot(i + 1, state_dir, uid_base + 1 + i, limits)
                      for i in range(max_workers)]
        self.cv = threading.Condition()
        self.waiting = 0
        self.stopping = False
        self.started = 0            # sandboxes started (a counter)

    def prewarm(self, n: int) -> None:
        """Starts up to ``n`` slots' sandboxes in the background."""
        for slot in self.slots[:n]:
            with self.cv:
                if slot.state != "cold":
                    continue
                slot.state = "warming"
            threading.Thread(target=self._warm, args=(slot,), daemon=True).start()

    def _warm(self, slot: WorkerSlot) -> None:
        try:
            slot.start()
            ok = True
        except SandboxError as e:
            print(f"prewarming worker slot {slot.index} failed: {e}", file=sys.stderr, flush=True)
            ok = False
        with self.cv:
            self.started += ok
            slot.state = "idle" if ok else "cold"
            self.cv.notify_all()

    def acquire(self, timeout_s: float, holders) -> WorkerSlot:
        """A slot marked busy, its sandbox running. ``holders()`` describes the episodes that
        hold the slots, for the error when none frees up within ``timeout_s``."""
        deadline = now() + timeout_s
        cold = None
        with self.cv:
            self.waiting += 1
            try:
                while True:
                    if self.stopping:
                        raise SandboxError("the service is shutting down")
                    idle = [s for s in self.slots if s.state == "idle"]
                    if idle:
                        idle[0].state = "busy"
                        return idle[0]
                    # start a cold slot unless one warming up or being freed will serve
                    pending = sum(s.state in ("warming", "freeing") for s in self.slots)
                    cold = next((s for s in self.slots if s.state == "cold"), None)
                    if cold is not None and pending < self.waiting:
                        cold.state = "busy"
                        break
                    left = deadline - now()
                    if left <= 0:
                        raise Busy(self._busy_message(timeout_s, holders()))
                    self.cv.wait(timeout=min(left, 0.5))
            finally:
                self.waiting -= 1
        try:
            cold.start()
        except BaseException:
            with self.cv:
                cold.state = "cold"
                self.cv.notify_all()
            raise
        with self.cv:
            self.started += 1
        return cold

    def _busy_message(self, waited: float, holders: list) -> str:
        lines = "; ".join(holders) or "(no episode holds them: slots are starting)"
        return (f"all {len(self.slots)} AppWorld workers are busy (waited {waited:.0f} s): "
                f"{lines}. Close those episodes (or end those processes; a closed connection or "
                "an exited client frees its episode within seconds), raise "
                "HARNESS_JAX_APPWORLD_WORKERS, or wait longer (acquire_timeout_s)")

    def freeing(self, slot: WorkerSlot) -> None:
        """The slot's episode is ending (``release`` follows shortly)."""
        with self.cv:
            slot.state = "freeing"

    def release(self, slot: WorkerSlot) -> None:
        with self.cv:
            slot.episode = None
            if not slot.started() or self.stopping:
                slot.stop()
            slot.state = "idle" if slot.started() else "cold"
            self.cv.notify_all()

    def health_check(self) -> int:
        """Marks idle slots whose sandbox died as cold; returns how many."""
        n = 0
        with self.cv:
            for s in self.slots:
                if s.state == "idle" and not s.started():
                    s.stop()
                    s.state = "cold"
                    n += 1
        return n

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        for s in self.slots:
            s.stop()
