"""Reading finished experiments back: run directories and sweep roots -> ``Run`` records.

A path given to the tables is one of

* a sweep root (``sweep.json``, written by ``launch/sweep.py``): its runs, in the sweep's order;
* a run directory: the ``--workdir`` of ``launch/train.py`` / ``launch/engineer.py`` (it holds
  ``summary.json``, ``metrics.jsonl``, ``engineer_summary.json``, ``eval_*.json`` or ``sweep/``);
* a directory of those (searched one level down).

Each run becomes a ``Run``: its state (a sweep's ``status.json``; otherwise ``done`` when the
launcher wrote a ``summary.json`` that does not say ``"preempted": true``, else ``incomplete``),
its resolved config (``sweep/config.json`` or the run's own ``config.json``), the overrides the
sweep set, the code version, and ``scalars``: one flat ``{name: float}`` of everything the run
reported, named

==============================  ==========================================================
``<tag>/<metric>``              the launcher's evaluations in ``summary.json`` (``final/success_rate``,
                                ``after_sft/pass@1``, ``final/per_category/INSERT``; Harness-R1:
                                ``final/delta_b``, ``final/baseline_success``)
``eval_<split>/<metric>``       ``launch/evaluate.py`` results (``eval_test/pass@3``)
``eval_<split>_rank1/<...>``    Rank-1 results, schema ``harness-s-rank1-v1`` (``.../h0/avg@3``,
                                ``.../rank1/avg@3``, ``.../gap/avg@3``, ``.../h0_rank1_share``)
``reference_rule/<metric>``     Harness-R1's rule-based reference (``engineer_summary.json``)
``table_<split>/<arm>/<m>``     Harness-R1 table of the run (``launch/evaluate_engineer.py``, schema
                                ``harness-r1-table-v1``): ``success`` (= success_after), ``delta``,
                                ``valid_frac``, ``success_before`` per arm (``default``, ``rule``,
                                ``sft``, ``grpo``, ...); ``.../ablation/full_delta``,
                                ``.../ablation/<hook>/delta|drop``; ``.../transfer/<target>/delta|...``
``last/<key>``, ``mean/<key>``  a ``metrics.jsonl`` key's last value and mean over the run
``early/<key>``, ``mid/<key>``, the key's mean over the first, middle and last third of the
``late/<key>``                  steps that logged it (training stages: ``late/rescue/success_rate``)
==============================  ==========================================================

Lists (per-task outcomes, per-packet rewards) are not scalars; ``Run.extras`` keeps the ones the
plots use (Rank-1 choices, Harness-R1 per-packet Delta_B).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
from typing import Any, Callable, Iterable, Optional

from harness_jax.sweeps import rundir as rd
from harness_jax.scoring import pass_at_k

RUN_MARKERS = ("summary.json", "metrics.jsonl", "engineer_summary.json", rd.META)


class TablesError(ValueError):
    """The tables cannot be made as asked; the message names the flag and the fix."""


@dataclasses.dataclass
class Run:
    name: str                      # unique among the runs read (sweep/run, or the directory name)
    path: str
    source: str                    # the sweep root or the path it was found under
    state: str                     # done | failed | interrupted | running | pending | incomplete
    config: dict                   # resolved config ({} when the run recorded none)
    overrides: dict                # the sweep's overrides ({} for a plain run)
    code: dict                     # code version of the last attempt ({} when unknown)
    scalars: dict                  # flat {name: float}
    detail: str = ""               # why a run is not done: exit code, log tail
    extras: dict = dataclasses.field(default_factory=dict)
    task_values: dict = dataclasses.field(default_factory=dict)   # scalar name -> per-task values
    _metrics: Optional[list] = None

    def metrics(self) -> list[dict]:
        """``metrics.jsonl`` records (read once)."""
        if self._metrics is None:
            self._metrics = rd.RunDir(self.path).metrics()
        return self._metrics

    @property
    def done(self) -> bool:
        return self.state == "done"


# ------------------------------------------------------------------------------ flattening
def flatten(obj: Any, prefix: str = "") -> dict:
    """Nested dicts -> ``{"a/b/c": float}``; numbers only (bools and lists are skipped, None and
    non-finite values are dropped: they are missing, not zero)."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and prefix:
        if math.isfinite(float(obj)):
            out[prefix] = float(obj)
    return out


def curve_scalars(records: list[dict]) -> dict:
    """``last/``, ``mean/``, ``early/``, ``mid/``, ``late/`` of every numeric metrics.jsonl key."""
    series: dict = {}
    for r in records:
        for k, v in r.items():
            if k in ("step", "time") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if math.isfinite(v):
                series.setdefault(k, []).append(float(v))
    out = {}
    for k, vals in series.items():
        out[f"last/{k}"] = vals[-1]
        out[f"mean/{k}"] = sum(vals) / len(vals)
        n = len(vals)
        for i, stage in enumerate(("early", "mid", "late")):
            part = vals[i * n // 3:(i + 1) * n // 3]
            if part:
                out[f"{stage}/{k}"] = sum(part) / len(part)
    return out


def run_scalars(path: str, metrics: list[dict]) -> tuple[dict, dict]:
    """(scalars, extras) of one run directory (module docstring)."""
    scalars, extras = {}, {}
    summary = rd.RunDir(path).summary() or {}
    for e in summary.get("eval") or []:
        if isinstance(e, dict) and e.get("tag"):
            scalars.update(flatten({k: v for k, v in e.items() if k not in ("tag", "details")}, e["tag"]))
    eng = _read(os.path.join(path, "engineer_summary.json")) or {}
    ref = eng.get("reference_rule")
    if isinstance(ref, dict):
        scalars.update(flatten(ref, "reference_rule"))
        if ref.get("per_packet"):
            extras["reference_rule/per_packet_delta_b"] = [x for x in ref["per_packet"] if x is not None]
    for f in sorted(glob.glob(os.path.join(path, "eval_*.json"))):
        name = os.path.splitext(os.path.basename(f))[0]
        res = _read(f)
        if not isinstance(res, dict):
            continue
        skip = ("per_task", "details")
        scalars.update(flatten({k: v for k, v in res.items() if k not in skip and k != "choices"}, name))
        if isinstance(res.get("per_task"), list) and res.get("format") == RANK1_FORMAT:
            extras.update({f"{name}/{m}": v for m, v in rank1_task_values(res).items()})
        if isinstance(res.get("choices"), dict):
            extras[f"{name}/choices"] = {sid: dict(c) for sid, c in res["choices"].items()}
            extras[f"{name}/base"] = next(iter(res["choices"]), None)
    for f in sorted(glob.glob(os.path.join(path, "table_*.json"))):
        res = _read(f)
        if isinstance(res, dict) and res.get("schema") == R1_TABLE_SCHEMA:
            scalars.update(r1_table_scalars(res, os.path.splitext(os.path.basename(f))[0]))
    scalars.update(curve_scalars(metrics))
    return scalars, extras


RANK1_FORMAT = "harness-s-rank1-v1"          # harness_jax.harness_s.rank1.FORMAT (not imported: layers)


def rank1_task_values(res: dict) -> dict:
    """Per-task values of a Rank-1 results file, for the task level of the bootstrap:
    ``{"h0/avg@k": [...], "rank1/pass@k": [...], "gap/avg@k": [...], ...}`` over the tasks with at
    least one scored attempt under both (infrastructure errors are not scored, as in the file)."""
    k = int(res.get("k") or 1)
    per: dict = {}
    for t in res["per_task"]:
        sides = {s: [a for a in t.get(s) or [] if a is not None] for s in ("h0", "rank1")}
        if not all(sides.values()):
            continue
        vals = {}
        for s, att in sides.items():
            for kk in sorted({1, k}):
                if len(att) >= kk:
                    vals[f"{s}/avg@{kk}"] = sum(att[:kk]) / kk
                    vals[f"{s}/pass@{kk}"] = pass_at_k(len(att), sum(att), kk)
            vals[f"{s}/success_rate"] = sum(att) / len(att)
        for m in [m for m in vals if m.startswith("h0/")]:
            if "rank1/" + m[3:] in vals:
                vals["gap/" + m[3:]] = vals["rank1/" + m[3:]] - vals[m]
        for m, v in vals.items():
            per.setdefault(m, []).append(float(v))
    return {f"task_values/{m}": v for m, v in per.items()}


R1_TABLE_SCHEMA = "harness-r1-table-v1"      # harness_jax.harness_r1.evaluate.SCHEMA (not imported: layers)


def r1_table_scalars(table: dict, name: str) -> dict:
    """Scalars of a ``harness-r1-table-v1`` table (module docstring); a table merged over several
    benchmarks keys its arms ``<benchmark>/<arm>``."""
    out = {}
    several = len({r.get("benchmark") for r in table.get("rows") or []}) > 1
    for r in table.get("rows") or []:
        arm = f"{r['benchmark']}/{r['arm']}" if several else r["arm"]
        out.update(flatten({"success": r.get("success_after"), "success_before": r.get("success_before"),
                            "delta": r.get("delta"), "valid_frac": r.get("valid_frac")}, f"{name}/{arm}"))
    abl = table.get("ablation")
    for a in ([abl] if isinstance(abl, dict) else []):
        out.update(flatten({"full_delta": a.get("full_delta"), **(a.get("hooks") or {})}, f"{name}/ablation"))
    for t in table.get("transfer") or []:
        out.update(flatten({k: t.get(k) for k in ("delta", "heldout_before", "heldout_after", "packet_success")},
                           f"{name}/transfer/{t.get('target')}"))
    return out


def _read(path: str) -> Any:
    try:
        return rd.read_json(path)
    except (OSError, json.JSONDecodeError):
        return None


# ------------------------------------------------------------------------------ finding runs
def _is_run(path: str) -> bool:
    return os.path.isdir(path) and any(os.path.exists(os.path.join(path, m)) for m in RUN_MARKERS)


def _is_sweep(path: str) -> bool:
    return os.path.isfile(os.path.join(path, rd.SWEEP_JSON))


def find_runs(paths: Iterable[str], flag: str = "--runs") -> list[tuple[str, str, Optional[dict]]]:
    """``[(run path, source, sweep run entry or None)]`` for sweep roots, run directories and
    directories of them; a path that is none of these is an error naming ``flag``."""
    out = []
    for p in paths:
        p = os.path.abspath(os.path.expanduser(p))
        if not os.path.exists(p):
            raise TablesError(f"{flag}={p}: no such directory; give a sweep root (launch/sweep.py "
                              "--workdir), a run's --workdir, or a directory of them")
        if _is_sweep(p):
            out += [(os.path.join(p, r["name"]), p, r) for r in rd.read_json(os.path.join(p, rd.SWEEP_JSON))["runs"]]
        elif _is_run(p):
            out.append((p, os.path.dirname(p), None))
        else:
            found = []
            for c in sorted(os.listdir(p)) if os.path.isdir(p) else []:
                c = os.path.join(p, c)
                if _is_sweep(c):
                    found += find_runs([c], flag)
                elif _is_run(c):
                    found.append((c, p, None))
            if not found:
                raise TablesError(f"{flag}={p}: no runs there (no sweep.json, summary.json, metrics.jsonl, "
                                  "engineer_summary.json or sweep/ in it or its sub-directories); point "
                                  "it at a sweep root or a run's --workdir")
            out += found
    return out


def load_runs(paths: Iterable[str], flag: str = "--runs",
              progress: Optional[Callable[[Iterable], Iterable]] = None) -> list[Run]:
    """Every run under ``paths`` as a ``Run`` (failed and unfinished ones included, with their
    state and log tail: the tables list them rather than dropping them)."""
    found = find_runs(paths, flag)
    if not found:
        raise TablesError(f"{flag}: no runs found")
    wrap = progress or (lambda it: it)
    runs, names = [], set()
    for path, source, entry in wrap(found):
        runs.append(_load_run(path, source, entry, names))
    return runs


def _load_run(path: str, source: str, entry: Optional[dict], names: set) -> Run:
    d = rd.RunDir(path)
    in_sweep = entry is not None or os.path.isdir(d.meta)
    status = d.status() if in_sweep else None
    summary = d.summary()
    if status is not None:
        state = status.get("state", "pending")
    elif summary is not None and summary.get("preempted") is not True:
        state = "done"
    else:
        state = "incomplete"
    spec = d.spec() if in_sweep else None
    config = (d.config() if in_sweep else None) or _read(os.path.join(path, "config.json")) or {}
    overrides = (spec or {}).get("overrides") or (entry or {}).get("overrides") or {}
    attempts = (status or {}).get("attempts") or []
    code = (attempts[-1].get("code") if attempts else None) or {}
    detail = ""
    if state != "done":
        if status is not None:
            last = attempts[-1] if attempts else {}
            detail = (f"exit code {status.get('exit_code')}; {last.get('detail') or ''}".strip("; ") + "\n"
                      + "\n".join((status.get("log_tail") or d.log_tail()).splitlines()[-8:]))
        else:
            detail = ("summary.json says preempted" if summary else "no summary.json: the launcher did not finish")
    metrics = d.metrics() if state == "done" else []
    scalars, extras = run_scalars(path, metrics) if state == "done" else ({}, {})
    name = os.path.basename(os.path.normpath(path))
    if name in names:
        name = f"{os.path.basename(os.path.normpath(source))}/{name}"
    k = 2
    base = name
    while name in names:
        name, k = f"{base}#{k}", k + 1
    names.add(name)
    task_values = {}
    for k in [k for k in extras if "/task_values/" in k]:
        prefix, _, m = k.partition("/task_values/")
        task_values[f"{prefix}/{m}"] = extras.pop(k)
    return Run(name=name, path=path, source=source, state=state, config=config, overrides=overrides,
               code=code, scalars=scalars, detail=detail.strip(), extras=extras, task_values=task_values,
               _metrics=metrics)


def config_get(config: dict, path: str, default: Any = None) -> Any:
    """A dotted path of a JSON config (``"harness_s.router.name"``)."""
    node = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node
