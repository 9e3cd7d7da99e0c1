"""The Harness-S main job as one resumable pipeline (what ``launch/main.py`` runs).

    from harness_jax.jobs import harness_s_main as main_job
    job = main_job.load_job("experiments/configs/harness_s/main_job.py")
    summary = main_job.run(job, main_job.Options(workdir="/tmp/hs", seeds=(0, 1, 2)))

Phases, in order, each printing a start line, a done line with its wall time, and skipping itself
when its result is already there:

1. ``warm_start``: the SFT warm start (``job.warm_start()``'s config, ``num_steps=0``) in
   ``<workdir>/sft``. Cached by its key (``sft_warmstart.sft_key_fields`` of the resolved config:
   what can change the warm start): a finished warm start (``hf_final/`` and an unpreempted
   ``summary.json``) whose key is this config's is reused -- ``<workdir>/sft`` or the directory
   ``Options.warm_start`` names (e.g. one built by hand with ``launch/train.py``); a finished one
   with another key is refused (never overwritten). An interrupted one resumes.
2. ``evolve``: the frozen sibling pool (``evolve_run.evolve_main`` with ``job.evolve()``'s config
   and the warm start's policy) in ``<workdir>/evolve``, cached by the warm start's key plus the
   evolution config (``phase.json``); an interrupted evolution replays its finished rollouts.
   Skipped when no arm needs a pool.
3. ``arms``: every arm (``job.arms()``: name -> ``get_config(pool)``) for every seed, in
   ``<workdir>/runs/<arm>-s<seed>``, from the warm start (``model.init_from``, ``sft.enabled=False``),
   with ``Options.steps`` and ``Options.overrides`` applied to each; a finished run (summary with
   every step, not preempted) is skipped, an interrupted one resumes from its checkpoint; a run
   directory holding a run of another config (``main_job_arm.json``) is refused. A run
   stopped by SIGTERM stops the job (re-run the command to continue).
4. ``report``: ``eval.report.generate`` over ``<workdir>/runs`` into ``<workdir>/report``
   (tables, plots, ``report.html``; runs of different arms never share a row, seeds of one arm
   are pooled), plus ``paired.md``/``paired.json``: each arm's final held-out success minus GRPO
   only's (the first arm), paired by (seed, task) on the same evaluation random numbers, with a
   95% bootstrap interval over tasks (``evaluation.compare_results``), and each arm against its
   own start.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import time
from typing import Any, Callable, Optional, Sequence

import ml_collections

from harness_jax.sweeps import rundir

PHASES = ("warm_start", "evolve", "arms", "report")


class Stopped(Exception):
    """A run of the job stopped on SIGTERM after its checkpoint: re-running the command resumes it."""


@dataclasses.dataclass(frozen=True)
class Job:
    """What the pipeline trains: ``warm_start()`` / ``evolve()`` return configs, ``arms()`` maps
    an arm name to ``get_config(pool)``; the first arm run is the baseline of the paired table;
    ``pool_arms``: the arms that need the evolved pool."""

    warm_start: Callable[[], Any]
    evolve: Callable[[], Any]
    arms: Callable[[], dict]
    pool_arms: tuple = ()
    default_arms: tuple = ()         # the arms run when Options.arms is empty (() = all)
    path: str = ""


@dataclasses.dataclass(frozen=True)
class Options:
    workdir: str = "/tmp/hs"
    seeds: tuple = (0, 1, 2)
    arms: tuple = ()                 # () = every arm of the job
    steps: Optional[int] = None      # GRPO steps of every arm (None = the arm's config)
    overrides: tuple = ()            # ((dotted config path, value), ...) applied to every arm
    warm_start: str = ""             # an existing finished SFT workdir to reuse ("" = <workdir>/sft)


def load_job(path: str) -> Job:
    """The job module at ``path`` (``experiments/configs/harness_s/main_job.py``): its ``JOB``."""
    spec = importlib.util.spec_from_file_location("harness_jax_main_job_" + hashlib.sha1(path.encode()).hexdigest()[:8],
                                                  path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"--job={path}: no such Python file")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    job = getattr(mod, "JOB", None)
    if not isinstance(job, Job):
        raise ValueError(f"--job={path}: the module must define JOB = main_job.Job(...)")
    return dataclasses.replace(job, path=path)


# ------------------------------------------------------------------------------------ helpers
def set_path(c, path: str, value) -> None:
    """``c.<path> = value`` for a dotted path (type-checked by the ConfigDict)."""
    *parts, last = path.split(".")
    node = c
    for p in parts:
        node = node[p]
    node[last] = tuple(value) if isinstance(node[last], tuple) and isinstance(value, list) else value


def merge_json(c, d: dict) -> None:
    """Overlays a run's ``config.json`` onto the config ``c`` (fields the JSON lacks keep ``c``'s
    values: fields added to the code since the run was made)."""
    for k, v in d.items():
        if k not in c:
            continue
        cur = c[k]
        if isinstance(cur, ml_collections.ConfigDict) and isinstance(v, dict):
            if cur.is_type_safe:
                merge_json(cur, v)
            else:
                with cur.unlocked():
                    for kk in list(cur.keys()):
                        del cur[kk]
                    cur.update(v)
        else:
            c[k] = tuple(v) if isinstance(cur, tuple) and isinstance(v, list) else v


def warm_start_key(config) -> str:
    """The warm start's key: what of ``config`` can change it (``sft_warmstart.sft_key_fields``,
    a harness file by its content, so checkouts in other directories agree)."""
    from harness_jax.train import sft_warmstart, spec
    fields = sft_warmstart.sft_key_fields(spec.resolve(config, num_devices=1))
    h = fields["harness"]["spec"]
    if isinstance(h, str) and os.path.isfile(h):   # a harness file: its content, not where the checkout is
        with open(h, "rb") as f:
            fields["harness"]["spec"] = "sha256:" + hashlib.sha256(f.read()).hexdigest()
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:16]


def finished_run(workdir: str, steps: Optional[int] = None) -> bool:
    """A training workdir whose ``summary.json`` says it ran to the end (``steps`` of them)."""
    path = os.path.join(workdir, "summary.json")
    if not os.path.exists(path):
        return False
    with open(path) as f:
        s = json.load(f)
    return not s.get("preempted") and (steps is None or int(s.get("step", -1)) == int(steps))


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


_write = rundir.write_json        # atomic: an interrupted job never leaves half a marker


class Progress:
    """Per-phase progress lines with wall times (``print`` by default)."""

    def __init__(self, out: Callable[[str], None] = print):
        self.out = out
        self.times: dict = {}

    def phase(self, name: str, what: str):
        prog = self

        class _Phase:
            def __enter__(self):
                self.t0 = time.perf_counter()
                prog.out(f"[main] phase {PHASES.index(name.split(':')[0]) + 1}/{len(PHASES)} {name}: {what}")
                self.note = "done"
                return self

            def __exit__(self, *exc):
                dt = time.perf_counter() - self.t0
                prog.times[name] = dt
                prog.out(f"[main] phase {name}: {self.note if exc[0] is None else 'FAILED'} in {dt:.1f}s")
                return False
        return _Phase()


# ------------------------------------------------------------------------------------ phases
def warm_start_phase(job: Job, opts: Options, prog: Progress) -> tuple[str, str]:
    """``(warm start workdir, key)``: reused when finished with this key, else trained/resumed."""
    from harness_jax.train import run as train_run
    cfg = job.warm_start()
    cfg.num_steps = 0
    cfg.eval.at_start = False
    key = warm_start_key(cfg)
    d = os.path.abspath(os.path.expanduser(opts.warm_start or os.path.join(opts.workdir, "sft")))
    with prog.phase("warm_start", f"SFT warm start {key} in {d}") as ph:
        done = finished_run(d) and os.path.exists(os.path.join(d, "hf_final", "config.json"))
        if done:
            have = _read(os.path.join(d, "warm_start.json"))["key"] if os.path.exists(
                os.path.join(d, "warm_start.json")) else existing_key(cfg, d)
            if have != key:
                raise ValueError(f"{d} holds a finished warm start of another config (key {have}, this job's "
                                 f"{key}); pass another --workdir or --warm_start, or remove it")
            ph.note = "cached (finished warm start with this key)"
        elif opts.warm_start:
            raise ValueError(f"--warm_start={opts.warm_start}: not a finished warm start (no hf_final/ or an "
                             "unfinished summary.json); leave --warm_start empty to train one under --workdir")
        else:
            summary = train_run.train(cfg, d)
            if summary.get("preempted"):
                raise Stopped("warm start stopped (SIGTERM): re-run the command to resume it")
        if not opts.warm_start:       # never write into a warm start the job was only pointed at
            _write(os.path.join(d, "warm_start.json"), {"key": key})
    return d, key


def existing_key(cfg, d: str) -> str:
    """The key of the finished warm start in ``d`` from its ``config.json`` over ``cfg``."""
    c = ml_collections.ConfigDict(cfg.to_dict())
    merge_json(c, _read(os.path.join(d, "config.json")))
    return warm_start_key(c)


def evolve_phase(job: Job, opts: Options, sft_dir: str, sft_key: str, prog: Progress) -> str:
    """The frozen pool file (cached by the warm start's key and the evolution config)."""
    from harness_jax.harness_s import evolve_run
    cfg = job.evolve()
    cfg.model.init_from = sft_dir
    cfg.sft.enabled = False
    hs = cfg.harness_s
    key = hashlib.sha256(json.dumps([sft_key, hs.evolve.to_dict(), hs.validation.to_dict(), hs.llm.to_dict(),
                                     cfg.env.to_dict()], sort_keys=True, default=str).encode()).hexdigest()[:16]
    d = os.path.join(opts.workdir, "evolve")
    marker = os.path.join(d, "phase.json")
    with prog.phase("evolve", f"sibling pool {key} in {d}") as ph:
        done = _read(marker) if os.path.exists(marker) else {}
        if done.get("key") == key and os.path.exists(done.get("pool", "")):
            ph.note = "cached (pool of this warm start and evolution config)"
            return done["pool"]
        summary = evolve_run.evolve_main(cfg, d, checkpoint=sft_dir)
        _write(marker, {"key": key, "pool": summary["pool"]})
        return summary["pool"]


def arm_config(job_arms: dict, arm: str, seed: int, pool: str, sft_dir: str, opts: Options):
    c = job_arms[arm](pool)
    c.seed = int(seed)
    c.model.init_from = sft_dir
    c.sft.enabled = False
    if opts.steps is not None:
        c.num_steps = int(opts.steps)
    for path, value in opts.overrides:
        set_path(c, path, value)
    return c


def arms_phase(job: Job, opts: Options, names: Sequence[str], sft_dir: str, pool: str, prog: Progress) -> dict:
    from harness_jax.train import run as train_run
    arms = job.arms()
    runs = {}
    total = len(names) * len(opts.seeds)
    i = 0
    for seed in opts.seeds:                 # seed-major: an interrupted job leaves whole seeds done
        for arm in names:
            i += 1
            c = arm_config(arms, arm, seed, pool if arm in job.pool_arms else "", sft_dir, opts)
            d = os.path.join(opts.workdir, "runs", f"{arm}-s{seed}")
            runs[(arm, seed)] = d
            key = hashlib.sha256(c.to_json_best_effort(sort_keys=True).encode()).hexdigest()[:16]
            marker = os.path.join(d, "main_job_arm.json")
            with prog.phase(f"arms:{arm}-s{seed}", f"run {i}/{total}, {c.num_steps} GRPO steps in {d}") as ph:
                if os.path.exists(marker) and _read(marker)["key"] != key:
                    raise ValueError(f"{d} holds a run of another config (the arm's config, --steps or --set changed); "
                                     "use another --workdir, or remove the run directory to retrain it")
                if finished_run(d, c.num_steps):
                    ph.note = "cached (finished run)"
                    continue
                _write(marker, {"key": key})
                summary = train_run.train(c, d)
                if summary.get("preempted"):
                    raise Stopped(f"{d} stopped (SIGTERM) after step {summary.get('step')}: re-run the "
                                            "command to resume it")
    return runs


def paired_rows(runs: dict, names: Sequence[str], seeds: Sequence[int]) -> list[dict]:
    """Each arm's final held-out success against the first arm's and against its own start,
    paired by (seed, task) (``evaluation.compare_results`` over tasks prefixed by the seed)."""
    from harness_jax.train import evaluation

    def pooled(arm, tag):
        res = None
        for s in seeds:
            r = _tagged(runs[(arm, s)], tag)
            if r is None:
                return None
            rows = [dict(row, task_id=f"s{s}/{row['task_id']}") for row in r["per_task"]]
            res = dict(r, per_task=rows) if res is None else dict(res, per_task=res["per_task"] + rows)
        return res

    out = []
    base = names[0]
    for arm in names:
        final = pooled(arm, "final")
        for against, ref in ((f"{base} (final)", pooled(base, "final") if arm != base else None),
                             (f"{arm} (start)", pooled(arm, "start"))):
            if final is None or ref is None:
                continue
            cmp = evaluation.compare_results(final, ref)
            for metric, r in cmp.items():
                if isinstance(r, dict):
                    out.append({"arm": arm, "against": against, "metric": metric, "seeds": len(seeds), **r})
    return out


def _tagged(workdir: str, tag: str) -> Optional[dict]:
    """The run's first evaluation tagged ``tag`` ("start": the first evaluation at step 0)."""
    s = _read(os.path.join(workdir, "summary.json"))
    for e in s.get("eval") or []:
        if (e.get("tag") == tag or (tag == "start" and int(e.get("step", -1)) == 0)) and "per_task" in e:
            return e
    return None


def paired_markdown(rows: list[dict]) -> str:
    lines = ["| arm | against | metric | seeds x tasks | arm's | baseline's | difference [95% CI] |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['against']} | {r['metric']} | {r['n_tasks']} | {r['a']:.3f} | {r['b']:.3f} | "
                     f"{r['diff']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]{' *' if r['significant'] else ''} |")
    return "\n".join(lines) + "\n\n(* the interval excludes 0; paired by (seed, task) on the same evaluation random numbers)\n"


def report_phase(opts: Options, runs: dict, names: Sequence[str], prog: Progress) -> dict:
    from harness_jax.eval import report
    out = os.path.join(opts.workdir, "report")
    with prog.phase("report", f"tables, plots and report.html in {out}"):
        res = report.generate(sorted(set(runs.values())), out, title="Harness-S main job: arms against GRPO only",
                              command="python3 launch/main.py")
        rows = paired_rows(runs, names, opts.seeds)
        _write(os.path.join(out, "paired.json"), rows)
        md = paired_markdown(rows)
        with open(os.path.join(out, "paired.md"), "w") as f:
            f.write(md)
    return {"markdown": res["markdown"] + "\n\n## Paired held-out differences\n\n" + md, "paired": rows,
            "files": res["files"], "labels": dict(res["grouping"].labels)}


def run(job: Job, opts: Options, out: Callable[[str], None] = print) -> dict:
    """The four phases (module docstring); returns ``{"warm_start", "pool", "runs", "report",
    "times"}`` and writes it to ``<workdir>/main_job.json``."""
    prog = Progress(out)
    names = list(opts.arms) or list(job.default_arms) or list(job.arms())
    unknown = [a for a in names if a not in job.arms()]
    if unknown:
        raise ValueError(f"--arms: unknown arm(s) {unknown}; the job has {list(job.arms())}")
    os.makedirs(opts.workdir, exist_ok=True)
    t0 = time.perf_counter()
    sft_dir, key = warm_start_phase(job, opts, prog)
    pool = ""
    if any(a in job.pool_arms for a in names):
        pool = evolve_phase(job, opts, sft_dir, key, prog)
    else:
        with prog.phase("evolve", "no arm needs a pool") as ph:
            ph.note = "skipped"
    runs = arms_phase(job, opts, names, sft_dir, pool, prog)
    rep = report_phase(opts, runs, names, prog)
    total = time.perf_counter() - t0
    out(rep["markdown"])
    out(f"[main] done in {total:.1f}s; report: {rep['files']['html']}")
    summary = {"warm_start": sft_dir, "pool": pool, "runs": {f"{a}-s{s}": d for (a, s), d in runs.items()},
               "report": rep["files"], "row_labels": rep["labels"], "paired": rep["paired"], "times": prog.times,
               "total_s": total}
    _write(os.path.join(opts.workdir, "main_job.json"), summary)
    return summary
