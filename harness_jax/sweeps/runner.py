"""The sweep driver: expand, plan (skip finished, resume interrupted), run on a backend, report.

    from harness_jax.sweeps import runner
    sw = runner.prepare("experiments/configs/tiny_cpu_sweep.py", "seeds", "/tmp/sweep")
    result = runner.execute(sw, LocalBackend(max_parallel=2))   # what launch/sweep.py does

Re-running the same sweep on the same root skips ``done`` runs, resumes ``interrupted`` ones (the
launcher finds its checkpoint in the same workdir), re-attaches to cluster jobs still running,
and reports ``failed`` runs again with their log tails (``retry_failed=True`` starts them anew).
One failed run never stops the others.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shlex
import signal
import sys
import threading
import time
from typing import Callable, Iterator, Optional

from harness_jax.sweeps import rundir as rd
from harness_jax.sweeps.hyper import canonical
from harness_jax.sweeps.local import assert_not_running
from harness_jax.sweeps.spec import RunSpec, SweepError, config_diff, expand, split_config_arg
from harness_jax.provenance import repo_root


@dataclasses.dataclass
class Sweep:
    root: str                  # absolute sweep root
    name: str                  # sweep name (SWEEPS key)
    config_arg: str            # --config value as the launcher gets it (repo-relative when inside)
    launcher: str              # launcher script (repo-relative when inside)
    repo_root: str             # the launchers run with this as their working directory
    python: str                # interpreter for the launcher
    runs: list                 # [RunSpec]
    notes: list = dataclasses.field(default_factory=list)

    def run_dir(self, run: RunSpec) -> rd.RunDir:
        return rd.RunDir(os.path.join(self.root, run.name))

    def argv(self, run: RunSpec) -> list[str]:
        return run.argv(self.python, self.launcher, self.config_arg, self.run_dir(run).path)


def default_repo_root() -> str:
    return repo_root()


def _repo_relative(path: str, repo_root: str) -> str:
    a = os.path.abspath(path)
    rel = os.path.relpath(a, repo_root)
    return a if rel.startswith("..") else rel


def _find(path: str, repo_root: str, what: str) -> str:
    for cand in (path, os.path.join(repo_root, path)):
        if os.path.isfile(cand):
            return os.path.abspath(cand)
    raise SweepError(f"{what}={path!r}: no such file (looked in {os.getcwd()} and {repo_root})")


def prepare(config: str, sweep_name: str, root: str, launcher: str = "launch/train.py",
            python: str = sys.executable, repo_root: Optional[str] = None,
            base: Optional[dict] = None) -> Sweep:
    """Expands ``sweep_name`` of ``config`` (``path[:arg]``) into runs under ``root``, each with
    the ``base`` overrides under its own; resolves every run's config (bad overrides fail here).
    Writes nothing."""
    repo_root = os.path.abspath(repo_root or default_repo_root())
    path, arg = split_config_arg(config)
    cfg_abs = _find(path, repo_root, "--config")
    launcher_abs = _find(launcher, repo_root, "--launcher")
    abs_arg = cfg_abs + (f":{arg}" if arg is not None else "")
    runs = expand(abs_arg, sweep_name, repo_root, base=base)
    cmd_arg = _repo_relative(cfg_abs, repo_root) + (f":{arg}" if arg is not None else "")
    return Sweep(root=os.path.abspath(root), name=sweep_name, config_arg=cmd_arg,
                 launcher=_repo_relative(launcher_abs, repo_root), repo_root=repo_root,
                 python=python, runs=runs)


# ------------------------------------------------------------------------------ writing state
def write_manifest(sw: Sweep, backend_desc: dict) -> None:
    path = os.path.join(sw.root, rd.SWEEP_JSON)
    old = rd.read_json(path)
    if old is not None and (old.get("name") != sw.name or old.get("config") != sw.config_arg):
        raise SweepError(f"{sw.root} holds sweep {old.get('name')!r} of {old.get('config')!r}; give "
                         f"sweep {sw.name!r} of {sw.config_arg!r} its own --workdir")
    rd.write_json(path, {
        "name": sw.name, "config": sw.config_arg, "launcher": sw.launcher, "python": sw.python,
        "repo_root": sw.repo_root, "backend": backend_desc,
        "created": (old or {}).get("created", time.time()), "updated": time.time(),
        "code": rd.code_version(sw.repo_root),
        "runs": [{"name": r.name, "index": r.index, "overrides": r.overrides, "flags": list(r.flags)}
                 for r in sw.runs]})


def write_run(sw: Sweep, run: RunSpec) -> None:
    """spec.json + config.json (+ status pending) of a run; refuses a changed config for a run
    that already started (its checkpoint belongs to the old one)."""
    d = sw.run_dir(run)
    spec = {"sweep": sw.name, "name": run.name, "index": run.index, "overrides": run.overrides,
            "flags": list(run.flags), "config": sw.config_arg, "launcher": sw.launcher}
    old_spec, old_cfg, status = d.spec(), d.config(), d.status()
    if old_spec is not None and canonical(old_spec.get("overrides") or {}) != canonical(run.overrides):
        raise SweepError(f"{d.path} belongs to a run with overrides {old_spec.get('overrides')}, not "
                         f"{run.overrides}; use another --workdir")
    if old_cfg is not None:
        diff = config_diff(old_cfg, run.config)
        if diff:
            shown = ", ".join(diff[:8]) + (" ..." if len(diff) > 8 else "")
            if status["state"] == "done":
                sw.notes.append(f"{run.name}: done with a config that differs from today's at {shown}; kept")
                return
            if status.get("attempts"):
                raise SweepError(f"run {run.name} started with a config that differs from today's at "
                                 f"{shown}; resuming would mix the two. Use a new --workdir, or delete "
                                 f"{d.path} to start that run afresh")
    rd.write_json(d.file("spec.json"), spec)
    rd.write_json(d.file("config.json"), run.config)
    if not os.path.exists(d.file("status.json")):
        d.write_status({"state": "pending", "attempts": []})


@contextlib.contextmanager
def sweep_lock(root: str) -> Iterator[None]:
    """One driver per sweep root (released by the OS if the driver dies)."""
    os.makedirs(root, exist_ok=True)
    f = open(os.path.join(root, rd.LOCK), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise SweepError(f"another launch/sweep.py (pid {holder}) is driving {root}; wait for it or "
                         "stop it") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    try:
        yield
    finally:
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


# ------------------------------------------------------------------------------ reporting
def _fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class Reporter:
    """Progress lines on the console (stdout by default)."""

    def __init__(self, sweep_name: str, write: Callable[[str], None] = None, tail_lines: int = 15):
        self.sweep_name = sweep_name
        self._write = write or (lambda s: (sys.stdout.write(s + "\n"), sys.stdout.flush()))
        self.tail_lines = tail_lines

    def line(self, msg: str) -> None:
        self._write(f"[sweep {self.sweep_name} {time.strftime('%H:%M:%S')}] {msg}")

    def failed(self, name: str, status: dict) -> None:
        a = (status.get("attempts") or [{}])[-1]
        self.line(f"FAILED {name} (exit code {status.get('exit_code')}, {a.get('detail') or 'see log'}); "
                  f"log: {a.get('log', '')}")
        tail = "\n".join((status.get("log_tail") or "").splitlines()[-self.tail_lines:])
        for ln in tail.splitlines():
            self._write(f"    | {ln}")


# ------------------------------------------------------------------------------ the driver
def plan(sw: Sweep, backend, retry_failed: bool = False) -> tuple[list, list, dict]:
    """(runs to start, handles re-attached, {name: state before}) -- marks runs whose driver died
    as interrupted."""
    to_start, reattached, before = [], [], {}
    for run in sw.runs:
        d = sw.run_dir(run)
        st = d.status()
        before[run.name] = st["state"]
        if st["state"] == "done" or (st["state"] == "failed" and not retry_failed):
            continue
        if st["state"] == "running":
            last = st["attempts"][-1] if st.get("attempts") else {}
            handle = None
            if last.get("backend") == backend.name:
                handle = backend.reattach(d, last)
            elif last.get("backend") == "local":
                assert_not_running(d, last)
            else:
                raise SweepError(f"run {run.name} is a {last.get('backend')} job ({last.get('job_id')}); "
                                 f"re-run with --backend={last.get('backend')} to re-attach to it")
            if handle is not None:
                reattached.append((run, handle))
                continue
            last.update(ended=time.time(), outcome="interrupted",
                        detail="the driver that started it ended first")
            st.update(state="interrupted", log_tail=d.log_tail())
            d.write_status(st)
        to_start.append(run)
    return to_start, reattached, before


class _Signals:
    """SIGINT/SIGTERM to the driver: first = stop (local) or detach (cluster); second = kill."""

    def __init__(self):
        self.count = 0
        self._old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum, frame):
        self.count += 1

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def _classify(d: rd.RunDir, outcome, stop_sent: bool, started: float) -> str:
    if outcome.interrupted or stop_sent:
        return "interrupted"
    if outcome.exit_code == 0:
        s = d.summary()
        fresh = os.path.exists(os.path.join(d.path, "summary.json")) and \
            os.path.getmtime(os.path.join(d.path, "summary.json")) >= started - 1
        return "interrupted" if (s and fresh and s.get("preempted") is True) else "done"
    return "failed"


def execute(sw: Sweep, backend, retry_failed: bool = False, detach: bool = False,
            progress_every_s: float = 60.0, poll_s: float = 1.0,
            reporter: Optional[Reporter] = None) -> dict:
    """Runs the sweep to the end (or until interrupted / detached); returns
    ``{"states": {name: state}, "exit_code": 0 all done | 1 some failed | 3 unfinished}``."""
    rep = reporter or Reporter(sw.name)
    with sweep_lock(sw.root):
        write_manifest(sw, backend.describe())
        for run in sw.runs:
            write_run(sw, run)
        for n in sw.notes:
            rep.line(n)
        to_start, reattached, before = plan(sw, backend, retry_failed)
        _announce(sw, backend, rep, to_start, reattached, before, retry_failed)
        _drive(sw, backend, rep, list(to_start), {run.name: (run, h) for run, h in reattached},
               detach, progress_every_s, poll_s)
        states = {r.name: sw.run_dir(r).status()["state"] for r in sw.runs}
    return _summarize(sw, states, rep)


def _announce(sw: Sweep, backend, rep: Reporter, to_start, reattached, before, retry_failed) -> None:
    counts = {s: sum(1 for v in before.values() if v == s) for s in rd.STATES}
    rep.line(f"{len(sw.runs)} runs under {sw.root} ({backend.name}): {counts['done']} done (skipped), "
             f"{counts['failed']} failed{' (retrying)' if retry_failed else ' (not retried)'}, "
             f"{len(reattached)} re-attached, {len(to_start)} to start")
    for run in sw.runs:
        if before[run.name] == "failed" and not retry_failed:
            rep.failed(run.name, sw.run_dir(run).status())
    for run, h in reattached:
        rep.line(f"re-attached {run.name} ({backend.attempt_info(h)})")


def _drive(sw: Sweep, backend, rep: Reporter, queue: list, active: dict, detach: bool,
           progress_every_s: float, poll_s: float) -> None:
    """The polling loop: start queued runs up to the concurrency limit, collect outcomes, react
    to SIGINT/SIGTERM, print progress."""
    last_progress = time.time()
    with _Signals() as sig:
        while queue or active:
            if sig.count and _on_signal(sig.count, backend, rep, queue, active) == "leave":
                return
            while queue and len(active) < backend.max_parallel and not sig.count:
                run = queue.pop(0)
                active[run.name] = (run, _start(sw, backend, run, rep))
            if detach and not queue:
                rep.line(f"detached: {len(active)} job(s) running on {backend.name}; run the same "
                         "command again to follow them")
                return
            for name, (run, h) in list(active.items()):
                outcome = backend.poll(h)
                if outcome is not None:
                    del active[name]
                    _finish(sw, backend, run, h, outcome, rep)
            if time.time() - last_progress >= progress_every_s and (queue or active):
                last_progress = time.time()
                rep.line(_progress(sw, active, queue))
            if queue or active:
                time.sleep(poll_s)


def _on_signal(count: int, backend, rep: Reporter, queue: list, active: dict) -> str:
    """First signal: start nothing more and stop running launchers (local) or leave the jobs
    running (cluster); second: kill."""
    queue.clear()
    if backend.on_interrupt == "detach":
        rep.line(f"interrupted: {len(active)} job(s) keep running on {backend.name}; run the "
                 "same command again to re-attach")
        return "leave"
    for run, h in active.values():
        if count > 1:
            backend.kill(h)
        elif h.stop_sent is None:
            rep.line(f"stopping {run.name} (SIGTERM: the launcher checkpoints and exits)")
            backend.stop(h)
    return "wait"


def _start(sw: Sweep, backend, run: RunSpec, rep: Reporter):
    d = sw.run_dir(run)
    st = d.status()
    attempts = st.get("attempts") or []
    n = len(attempts) + 1
    argv = sw.argv(run)
    code = rd.code_version(sw.repo_root)
    prev = attempts[-1].get("code") if attempts else None
    key = ("commit", "diff_sha256")
    if prev and any(prev.get(k) != code.get(k) for k in key):
        rep.line(f"note: {run.name} resumes on other code than its attempt {n - 1} ran "
                 f"({prev.get('commit', '')[:10]}{'+dirty' if prev.get('dirty') else ''} -> "
                 f"{(code.get('commit') or '')[:10]}{'+dirty' if code.get('dirty') else ''}); both are recorded")
    h = backend.start(d, argv, n)
    attempts.append({"attempt": n, "backend": backend.name, "started": time.time(), "host": rd.host(),
                     "argv": argv, "code": code, "log": d.log_path, **backend.attempt_info(h)})
    st.update(state="running", attempts=attempts, exit_code=None)
    d.write_status(st)
    resumed = " (resuming)" if n > 1 else ""
    rep.line(f"started {run.name}{resumed}: attempt {n}, {backend.attempt_info(h)}")
    return h


def _finish(sw: Sweep, backend, run: RunSpec, h, outcome, rep: Reporter) -> None:
    d = sw.run_dir(run)
    if outcome.log is not None:
        with open(d.log_path, "a") as f:
            f.write(outcome.log if outcome.log.endswith("\n") else outcome.log + "\n")
    st = d.status()
    last = st["attempts"][-1] if st.get("attempts") else {"started": h.started}
    state = _classify(d, outcome, h.stop_sent is not None, float(last.get("started", h.started)))
    now = time.time()
    last.update(ended=now, exit_code=outcome.exit_code, outcome=state, detail=outcome.detail,
                duration_s=round(now - float(last.get("started", h.started)), 1))
    st.update(state=state, exit_code=outcome.exit_code, log_tail=d.log_tail())
    d.write_status(st)
    took = _fmt_s(now - float(last.get("started", h.started)))
    if state == "done":
        rep.line(f"done {run.name} in {took}")
    elif state == "interrupted":
        rep.line(f"interrupted {run.name} after {took} (exit code {outcome.exit_code}); the next run "
                 "of this sweep resumes it")
    else:
        rep.failed(run.name, st)


def _progress(sw: Sweep, active: dict, queue: list) -> str:
    states = [sw.run_dir(r).status()["state"] for r in sw.runs]
    now = time.time()
    running = ", ".join(f"{n} {_fmt_s(now - h.started)}" for n, (_, h) in sorted(active.items()))
    return (f"{states.count('done')}/{len(sw.runs)} done, {states.count('failed')} failed, "
            f"{len(active)} running [{running}], {len(queue)} queued")


def _summarize(sw: Sweep, states: dict, rep: Reporter) -> dict:
    width = max(len(n) for n in states)
    rep.line("summary:")
    for r in sw.runs:
        st = sw.run_dir(r).status()
        last = (st.get("attempts") or [{}])[-1]
        dur = last.get("duration_s")
        rep._write(f"    {r.name:<{width}}  {st['state']:<11} exit={st.get('exit_code')}  "
                   f"attempts={len(st.get('attempts') or [])}"
                   + (f"  last={_fmt_s(dur)}" if dur is not None else ""))
    vals = list(states.values())
    code = 0 if all(v == "done" for v in vals) else (1 if "failed" in vals else 3)
    rep.line(f"{vals.count('done')} done, {vals.count('failed')} failed, "
             f"{len(vals) - vals.count('done') - vals.count('failed')} unfinished")
    return {"states": states, "exit_code": code}


def dry_run(sw: Sweep, backend, retry_failed: bool = False, reporter: Optional[Reporter] = None) -> list:
    """What ``execute`` would do, written nowhere: per run its action (skip / start / resume /
    re-attach / report failure), its argv and, for cluster backends, the job spec."""
    rep = reporter or Reporter(sw.name)
    out = []
    for run in sw.runs:
        d = sw.run_dir(run)
        st = d.status()
        n = len(st.get("attempts") or []) + 1
        action = {"pending": "start", "interrupted": "resume", "running": "re-attach or resume",
                  "done": "skip (done)",
                  "failed": "start again" if retry_failed else "skip (failed; --retry_failed)"}[st["state"]]
        item = {"name": run.name, "state": st["state"], "action": action, "argv": sw.argv(run)}
        if hasattr(backend, "job_spec"):
            item["job_spec"] = backend.job_spec(d, sw.argv(run), n)
        out.append(item)
        rep.line(f"{run.name}: {st['state']} -> {action}")
        rep._write("    " + shlex.join(item["argv"]))
        if "job_spec" in item:
            import json
            rep._write("    job: " + json.dumps(item["job_spec"], sort_keys=True))
    return out
