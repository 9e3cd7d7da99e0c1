"""Paper-style tables from run directories: rows = methods / arms, columns = benchmark x metric,
mean ± std over seeds with n, bootstrap 95% intervals (over seeds, and over tasks too where the
runs kept per-task outcomes: Rank-1 results), missing cells said, never dropped.

    from harness_jax.eval import runs as runs_lib, tables
    rs = runs_lib.load_runs(["/tmp/sweep"])
    built = tables.build(rs, tables.specs_for("auto", rs))          # [Table]
    print(tables.to_markdown(built, rs))

Rows (``harness_jax.eval.rows``): runs share a row only when their resolved configs are equal
except at the seed paths (``seed`` and a sweep's seed axis), unless the user pools over named paths
or over configs; the label names what tells the rows apart (the config's ``name``, the swept
paths, then the config paths that split the rest). The benchmark is ``env.name`` of the run's own
config. A cell pools the runs of one row and benchmark (their seeds): ``n`` finished runs that
report the metric out of the runs that belong there. A cell with no value is shown as ``—`` with
the reason (no run, the runs failed, the metric is absent). A cell says what it pools besides
seeds (the paths asked for, configs, different code versions, a repeated seed; ``strict``:
configs and code versions refused).
Failed and unfinished runs are listed with their state and log tail by the renderers.

Table kinds (``specs_for``): ``main`` (Harness-S main table: Pass@k / Avg@k of the deployment
evaluation, ``eval_test`` when present, otherwise the launcher's final evaluation), ``router``
(Rank-1 statistics: share of tasks with H0 at Rank-1, Rank-1 vs H0, and rescue success by
training stage), ``harness_r1`` (rows are arms: target success and Delta_B per benchmark under
each arm of ``launch/evaluate_engineer.py``'s ``table_<split>.json`` with the equal-weight mean
over benchmarks, its hook ablation and transfer across targets; and the same from the training
run's own held-out evaluations: the target alone, the rule-based reference, the engineer after
SFT and after GRPO), and
``auto`` (the ones the runs have data for).
"""
from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import json
import re
from typing import Optional, Sequence

import numpy as np

from harness_jax.eval import rows as rows_lib
from harness_jax.eval.rows import benchmark_of
from harness_jax.eval.runs import Run, TablesError
from harness_jax.sweeps.spec import config_diff

MISSING = "—"
BOOTSTRAP_SAMPLES = 2000


@dataclasses.dataclass(frozen=True)
class Arm:
    """A row inside each row group that reads one metric (Harness-R1: an engineer)."""
    label: str
    metric: str


@dataclasses.dataclass
class TableSpec:
    title: str
    metrics: list                    # columns (per benchmark); with arms: [the value's name]
    arms: list = dataclasses.field(default_factory=list)
    mean_column: bool = False        # the equal-weight mean over benchmarks
    percent: bool = False            # values are rates: shown x100

    def source(self, arm: Optional[Arm], metric: str) -> str:
        return arm.metric if arm is not None else metric


@dataclasses.dataclass
class Cell:
    row: str
    benchmark: str
    column: str
    metric: str                      # the scalar it reads
    values: list = dataclasses.field(default_factory=list)
    runs: list = dataclasses.field(default_factory=list)
    expected: int = 0                # runs of this row and benchmark, whatever their state
    missing: list = dataclasses.field(default_factory=list)    # why runs gave no value
    notes: list = dataclasses.field(default_factory=list)      # mixing of configs / code versions
    task_values: list = dataclasses.field(default_factory=list)  # per run: its per-task values or None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> Optional[float]:
        return float(np.mean(self.values)) if self.values else None

    @property
    def std(self) -> Optional[float]:
        return float(np.std(self.values, ddof=1)) if len(self.values) > 1 else None

    @property
    def ci_over(self) -> str:
        """What the bootstrap resamples: ``seeds+tasks`` when every run has per-task values."""
        return "seeds+tasks" if self.task_values and all(t for t in self.task_values) else "seeds"

    @property
    def ci95(self) -> Optional[tuple]:
        if self.ci_over == "seeds+tasks":
            return bootstrap_ci_tasks(self.task_values)
        return bootstrap_ci(self.values)

    def to_dict(self) -> dict:
        ci = self.ci95
        return {"row": self.row, "benchmark": self.benchmark, "column": self.column, "metric": self.metric,
                "mean": self.mean, "std": self.std, "n": self.n, "expected": self.expected,
                "ci95": list(ci) if ci else None, "ci95_over": self.ci_over, "values": self.values, "runs": self.runs,
                "missing": self.missing, "notes": self.notes}


@dataclasses.dataclass
class Table:
    spec: TableSpec
    rows: list                       # row labels in order
    benchmarks: list
    cells: dict                      # (row, benchmark, column) -> Cell

    def columns(self) -> list:
        """[(benchmark, column)] in order (the mean column last, benchmark ``"mean"``)."""
        cols = [(b, m) for b in self.benchmarks for m in self.spec.metrics]
        if self.spec.mean_column and len(self.benchmarks) > 1:
            cols += [("mean", m) for m in self.spec.metrics]
        return cols

    def to_dict(self) -> dict:
        return {"title": self.spec.title, "rows": self.rows, "benchmarks": self.benchmarks,
                "metrics": self.spec.metrics, "percent": self.spec.percent,
                "cells": [c.to_dict() for c in self.cells.values()]}


def bootstrap_ci(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> Optional[tuple]:
    """Percentile bootstrap 95% interval of the mean over seeds (None for fewer than 2 values)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        return None
    idx = np.random.default_rng(seed).integers(0, v.size, size=(samples, v.size))
    means = v[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def bootstrap_ci_tasks(per_run: Sequence[Sequence[float]], samples: int = BOOTSTRAP_SAMPLES,
                       seed: int = 0) -> Optional[tuple]:
    """Two-stage percentile bootstrap 95% interval: resample the runs (seeds), then each drawn
    run's tasks; the statistic is the mean over drawn runs of their task means."""
    rng = np.random.default_rng(seed)
    task_means = []
    for vals in per_run:
        v = np.asarray(vals, dtype=np.float64)
        if v.size == 0:
            return None
        task_means.append(v[rng.integers(0, v.size, size=(samples, v.size))].mean(axis=1))
    tm = np.stack(task_means)                                       # [runs, samples]
    if tm.shape[0] * max(len(v) for v in per_run) < 2:
        return None
    pick = rng.integers(0, tm.shape[0], size=(samples, tm.shape[0]))  # [samples, runs]
    means = tm[pick, np.arange(samples)[:, None]].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


# ------------------------------------------------------------------------------ table kinds
R1_SUCCESS_ARMS = [Arm("no patch (target alone)", "final/baseline_success"),
                   Arm("rule-based engineer", "reference_rule/success_after"),
                   Arm("SFT engineer", "after_sft/success_rate"),
                   Arm("SFT+GRPO engineer", "final/success_rate")]
R1_DELTA_ARMS = [Arm("rule-based engineer", "reference_rule/delta_b"),
                 Arm("SFT engineer", "after_sft/delta_b"),
                 Arm("SFT+GRPO engineer", "final/delta_b")]
R1_VALID_ARMS = [Arm("rule-based engineer", "reference_rule/valid_frac"),
                 Arm("SFT engineer", "after_sft/valid_frac"),
                 Arm("SFT+GRPO engineer", "final/valid_frac")]
R1_TABLE_ARMS = {"default": "no patch (target alone)", "react": "ReAct harness", "self_refine": "Self-Refine agent",
                 "review_hint": "fixed review-hint overlay",
                 "rule": "rule-based engineer", "prompt": "prompt-based engineer", "sft": "SFT engineer",
                 "grpo": "SFT+GRPO engineer"}
KINDS = ("auto", "main", "router", "harness_r1")


def r1_table_specs(avail: set, percent: bool) -> list[TableSpec]:
    """Tables of the runs' ``table_<split>.json`` (``launch/evaluate_engineer.py``): success and
    Delta_B per arm, the hook ablation, the transfer across targets."""
    out = []
    for split in sorted({n.split("/")[0] for n in avail if n.startswith("table_")}):
        known = [a for a in R1_TABLE_ARMS if f"{split}/{a}/success" in avail]
        other = sorted({n.split("/")[1] for n in avail if n.startswith(split + "/") and n.endswith("/success")
                        and n.count("/") == 2} - set(known))
        arms = known + other
        if arms:
            out += [TableSpec(f"Harness-R1 ({split}): target success", ["success"], mean_column=True, percent=percent,
                              arms=[Arm(R1_TABLE_ARMS.get(a, a), f"{split}/{a}/success") for a in arms]),
                    TableSpec(f"Harness-R1 ({split}): Delta_B", ["delta_b"], mean_column=True,
                              arms=[Arm(R1_TABLE_ARMS.get(a, a), f"{split}/{a}/delta") for a in arms])]
        hooks = sorted({n.split("/")[2] for n in avail if n.startswith(f"{split}/ablation/") and n.endswith("/drop")})
        if hooks:
            out.append(TableSpec(f"Harness-R1 ({split}): hook ablation", ["delta_b"], arms=[
                Arm("full patch", f"{split}/ablation/full_delta")] + [
                Arm(f"without {h}", f"{split}/ablation/{h}/delta") for h in hooks]))
        targets = sorted({n[len(split) + 10:-6] for n in avail if n.startswith(f"{split}/transfer/") and n.endswith("/delta")})
        if targets:
            out.append(TableSpec(f"Harness-R1 ({split}): transfer across targets", ["delta_b"],
                                 arms=[Arm(t, f"{split}/transfer/{t}/delta") for t in targets]))
    return out


def _available(runs: Sequence[Run]) -> set:
    return {k for r in runs if r.done for k in r.scalars}


def _ks(names: set, prefix: str) -> list[int]:
    return sorted({int(m.group(1)) for n in names for m in [re.fullmatch(re.escape(prefix) + r"(?:pass|avg)@(\d+)", n)] if m})


def main_metrics(avail: set) -> list[str]:
    """Pass@K / Avg@K (largest K) of the deployment evaluation: ``eval_test``, else another
    ``eval_<split>`` (not Rank-1), else the launcher's ``final`` evaluation; success rate when K=1."""
    splits = sorted({n.split("/")[0] for n in avail if n.startswith("eval_") and not n.split("/")[0].endswith("_rank1")},
                    key=lambda s: (s != "eval_test", s))
    for prefix in [s + "/" for s in splits] + ["final/"]:
        ks = _ks(avail, prefix)
        if ks and ks[-1] > 1:
            return [f"{prefix}pass@{ks[-1]}", f"{prefix}avg@{ks[-1]}"]
        if prefix + "success_rate" in avail:
            return [prefix + "success_rate"]
    return []


def router_metrics(avail: set) -> list[str]:
    out = []
    for split in sorted({n.split("/")[0] for n in avail if n.split("/")[0].endswith("_rank1")}):
        ks = _ks(avail, split + "/h0/")
        k = f"avg@{ks[-1]}" if ks else "success_rate"
        out += [f"{split}/h0_rank1_share", f"{split}/h0/{k}", f"{split}/rank1/{k}", f"{split}/gap/{k}"]
    out += [f"{s}/rescue/success_rate" for s in ("early", "mid", "late") if f"{s}/rescue/success_rate" in avail]
    return [m for m in out if m in avail]


def specs_for(kind: str, runs: Sequence[Run], metrics: Sequence[str] = (), percent: bool = False) -> list[TableSpec]:
    """The tables of ``kind`` (module docstring); ``metrics`` replaces the main table's columns."""
    if kind not in KINDS:
        raise TablesError(f"--table={kind!r}: expected one of {KINDS}")
    avail = _available(runs)
    is_r1 = any(n.startswith(("reference_rule/", "table_")) or n.endswith("/delta_b") for n in avail)
    out = []
    if metrics:
        out.append(TableSpec("results", list(metrics), percent=percent))
    elif kind == "main" or (kind == "auto" and not is_r1):
        m = main_metrics(avail)
        if not m and kind == "main":
            raise TablesError("--table=main: the runs hold no evaluation (summary.json 'eval', eval_<split>.json); "
                              "name the columns with --metrics=... (--list_metrics shows what they hold)")
        if m:
            out.append(TableSpec("main: held-out success", m, percent=percent))
    if kind == "router" or (kind == "auto" and not metrics):
        m = router_metrics(avail)
        if not m and kind == "router":
            raise TablesError("--table=router: no Rank-1 results (eval_<split>_rank1.json, launch/evaluate.py "
                              "--routing=rank1) and no rescue metrics (Harness-S training) in the runs")
        if m:
            out.append(TableSpec("router statistics", m))
    if kind == "harness_r1" or (kind == "auto" and is_r1 and not metrics):
        if not is_r1 and kind == "harness_r1":
            raise TablesError("--table=harness_r1: the runs hold no Harness-R1 evaluations (launch/engineer.py "
                              "workdirs: summary.json / engineer_summary.json; launch/evaluate_engineer.py: "
                              "table_<split>.json)")
        out += r1_table_specs(avail, percent)
        if any(n.startswith("reference_rule/") or n.endswith("/delta_b") for n in avail):
            out += [TableSpec("Harness-R1 training evaluations: target success", ["success"], arms=R1_SUCCESS_ARMS,
                              mean_column=True, percent=percent),
                    TableSpec("Harness-R1 training evaluations: Delta_B", ["delta_b"], arms=R1_DELTA_ARMS, mean_column=True),
                    TableSpec("Harness-R1 training evaluations: valid patches", ["valid_frac"], arms=R1_VALID_ARMS,
                              mean_column=True)]
    if not out:
        raise TablesError("no table can be made from these runs: they hold no evaluations; name the columns "
                          "with --metrics=... (--list_metrics shows what they hold)")
    return out


def check_metrics(specs: Sequence[TableSpec], runs: Sequence[Run], flag: str = "--metrics") -> None:
    """Every column a spec reads exists in at least one finished run, else an error with the
    closest names (arms' metrics may be absent: their cells are shown missing)."""
    avail = _available(runs)
    for s in specs:
        if s.arms:
            continue
        for m in s.metrics:
            if m not in avail:
                close = difflib.get_close_matches(m, sorted(avail), n=5, cutoff=0.5)
                raise TablesError(f"{flag}: no finished run reports {m!r}"
                                  + (f"; did you mean {', '.join(close)}?" if close else "")
                                  + " (--list_metrics lists the names the runs hold)")


# ------------------------------------------------------------------------------ grouping
def group_runs(runs: Sequence[Run], grouping: Optional[rows_lib.Grouping] = None,
               split_benchmarks: bool = False) -> dict:
    """{row label: [runs]} in first-seen order (``split_benchmarks``: one group per row and
    benchmark when the runs span several, ``"label [benchmark]"``; the plots' lines)."""
    return (grouping or rows_lib.plan(runs)).groups(runs, split_benchmarks)


def build(runs: Sequence[Run], specs: Sequence[TableSpec], grouping: Optional[rows_lib.Grouping] = None,
          strict: bool = False) -> list[Table]:
    """The tables of ``specs`` over ``runs``, rows as ``grouping`` (``rows.plan``) makes them."""
    g = grouping or rows_lib.plan(runs)
    groups = g.groups(runs)
    # a run that recorded no config and did not finish has no benchmark: it is in the runs list only
    benchmarks = sorted({benchmark_of(r, g.benchmark_key) for r in runs if r.done or r.config})
    out = []
    for spec in specs:
        rows, cells = [], {}
        for label, members in groups.items():
            if not any(r.done or r.config for r in members):
                continue        # unfinished runs that recorded no config: in the runs list only
            for arm in spec.arms or [None]:
                row = label if arm is None else (arm.label if len(groups) == 1 else f"{label}: {arm.label}")
                rows.append(row)
                for b in benchmarks:
                    here = [r for r in members if benchmark_of(r, g.benchmark_key) == b]
                    for m in spec.metrics:
                        cells[(row, b, m)] = _cell(row, b, m, spec.source(arm, m), here, g, strict)
                if spec.mean_column:
                    for m in spec.metrics:
                        cells[(row, "mean", m)] = _mean_cell(row, m, [cells[(row, b, m)] for b in benchmarks])
        out.append(Table(spec, rows, benchmarks, cells))
    return out


def _cell(row: str, bench: str, column: str, metric: str, runs: Sequence[Run], g: rows_lib.Grouping,
          strict: bool) -> Cell:
    c = Cell(row, bench, column, metric, expected=len(runs))
    used = []
    for r in runs:
        if not r.done:
            c.missing.append(f"{r.name}: {r.state}")
        elif metric not in r.scalars:
            c.missing.append(f"{r.name}: reports no {metric}")
        else:
            c.values.append(r.scalars[metric])
            c.runs.append(r.name)
            c.task_values.append(r.task_values.get(metric))
            used.append(r)
    if not runs:
        c.missing.append("no run")
    if len(used) > 1:
        _pooling_notes(c, used, g, strict)
    return c


def _pooling_notes(c: Cell, used: Sequence[Run], g: rows_lib.Grouping, strict: bool) -> None:
    """What a cell of several runs pools besides seeds: paths asked for (``--pool_over``), configs
    (``--pool_configs``), code versions; runs that share a seed."""
    where = f"cell {c.row} / {c.benchmark} / {c.column}"
    for k in g.pool_over:
        vals = list(dict.fromkeys(rows_lib.value_text(rows_lib.value(r, k)) for r in used))
        if len(vals) > 1:
            c.notes.append(f"pooled over {k} = {', '.join(vals)} (--pool_over)")
    diff = sorted({p for r in used[1:] for p in config_diff(used[0].config, r.config)
                   if not rows_lib.covers(g.ignored(), p)})
    if diff or any(not r.config for r in used):
        shown = ", ".join(diff[:6]) + (" ..." if len(diff) > 6 else "") if diff else "? (a run recorded no config)"
        msg = f"pools runs whose configs differ at {shown}" + (" (--pool_configs)" if g.pool_configs else "")
        if strict:
            raise TablesError(f"--strict: {where} {msg} (runs {', '.join(c.runs)}); leave out --pool_configs "
                              "to keep them in rows of their own")
        c.notes.append(msg)
    seeds = [tuple(repr(rows_lib.value(r, k)) for k in g.seeds) for r in used]
    if len(set(seeds)) < len(seeds):
        shown = "; ".join(", ".join(rows_lib.value_text(rows_lib.value(r, k)) for k in g.seeds) for r in used)
        c.notes.append(f"runs share a seed ({', '.join(g.seeds)} = {shown}): not independent seeds")
    versions = {(r.code.get("commit"), r.code.get("diff_sha256")) for r in used if r.code}
    if len(versions) > 1:
        shown = sorted(f"{(v[0] or '?')[:10]}{'+' + v[1][:8] if v[1] else ''}" for v in versions)
        msg = f"pools runs of different code versions ({', '.join(shown)})"
        if strict:
            raise TablesError(f"--strict: {where} {msg}")
        c.notes.append(msg)


def _mean_cell(row: str, column: str, cells: Sequence[Cell]) -> Cell:
    """Equal-weight mean over benchmarks; missing when any benchmark is (never re-weighted)."""
    c = Cell(row, "mean", column, "mean over benchmarks", expected=min((x.expected for x in cells), default=0))
    gaps = [x.benchmark for x in cells if x.mean is None]
    if gaps or not cells:
        c.missing.append(f"no value for {', '.join(gaps) or 'any benchmark'}")
        return c
    c.values = [float(np.mean([x.mean for x in cells]))]
    c.runs = sorted({r for x in cells for r in x.runs})
    c.notes = [f"n per benchmark: {', '.join(str(x.n) for x in cells)}"] if len(cells) > 1 else []
    return c


# ------------------------------------------------------------------------------ rendering
def fmt(v: Optional[float], percent: bool, digits: Optional[int] = None) -> str:
    if v is None:
        return MISSING
    return f"{v * 100:.{1 if digits is None else digits}f}" if percent else f"{v:.{3 if digits is None else digits}f}"


def cell_text(c: Cell, percent: bool, ci: bool = False) -> str:
    if c.mean is None:
        return f"{MISSING} (n=0/{c.expected})"
    s = fmt(c.mean, percent)
    if c.std is not None:
        s += f" ± {fmt(c.std, percent)}"
    if c.benchmark != "mean":
        s += f" (n={c.n}" + (f"/{c.expected}" if c.n != c.expected else "") + ")"
    if ci and c.ci95:
        s += f" [{fmt(c.ci95[0], percent)}, {fmt(c.ci95[1], percent)}]"
    return s


def column_name(t: Table, bench: str, metric: str) -> str:
    m = metric if not t.spec.percent else f"{metric} (%)"
    return f"{bench} {m}"


def footnotes(t: Table) -> tuple[list[str], dict]:
    """(texts, {(row, benchmark, column): [1-based numbers]}) for shown cells with missing runs or
    notes; a text shared by several cells is numbered once."""
    texts: list[str] = []
    marks: dict = {}
    shown = set((row, b, m) for row in t.rows for b, m in t.columns())
    for key, c in t.cells.items():
        if key not in shown:
            continue
        for text in _cell_notes(c):
            if text not in texts:
                texts.append(text)
            marks.setdefault(key, []).append(texts.index(text) + 1)
    return texts, marks


def _cell_notes(c: Cell) -> list[str]:
    out = list(c.notes)
    if c.missing and (c.mean is None or c.n < c.expected or c.benchmark == "mean"):
        out.append("missing: " + "; ".join(c.missing))
    return out


def table_markdown(t: Table, ci: bool = False) -> str:
    cols = t.columns()
    notes, marks = footnotes(t)
    lines = [f"### {t.spec.title}", "",
             "| " + " | ".join(["row"] + [column_name(t, b, m) for b, m in cols]) + " |",
             "|---" * (len(cols) + 1) + "|"]
    for row in t.rows:
        vals = []
        for b, m in cols:
            key = (row, b, m)
            mark = "".join(f" [{i}]" for i in marks.get(key, []))
            vals.append(cell_text(t.cells[key], t.spec.percent, ci) + mark)
        lines.append(f"| {row} | " + " | ".join(vals) + " |")
    if notes:
        lines.append("")
        lines += [f"[{i + 1}] {text}" for i, text in enumerate(notes)]
    return "\n".join(lines)


def failed_runs(runs: Sequence[Run]) -> list[Run]:
    return [r for r in runs if not r.done]


def run_rows(runs: Sequence[Run], g: rows_lib.Grouping) -> list[dict]:
    """Per run: name, row, benchmark and seed read from its own config, state, path."""
    return [{"name": r.name, "row": g.label(r), "benchmark": benchmark_of(r, g.benchmark_key),
             "seed": ", ".join(rows_lib.value_text(rows_lib.value(r, k)) for k in g.seeds) if r.config
             else "? (no config)", "state": r.state, "path": r.path} for r in runs]


def runs_markdown(runs: Sequence[Run], g: Optional[rows_lib.Grouping] = None) -> str:
    g = g or rows_lib.plan(runs)
    bad = failed_runs(runs)
    lines = [f"### Runs: {len(runs) - len(bad)} of {len(runs)} finished", "", g.header(), "",
             f"| run | row | benchmark | {', '.join(g.seeds)} | state |", "|---|---|---|---|---|"]
    lines += [f"| {x['name']} | {x['row']} | {x['benchmark']} | {x['seed']} | {x['state']} |" for x in run_rows(runs, g)]
    if bad:
        lines += ["", "Not in any value (listed, not dropped):", ""]
        for r in bad:
            lines.append(f"- **{r.name}** ({r.state}) `{r.path}`")
            for ln in (r.detail or "").splitlines():
                lines.append(f"    {ln}")
    return "\n".join(lines)


def to_markdown(tables_: Sequence[Table], runs: Sequence[Run], ci: bool = False, header: str = "",
                grouping: Optional[rows_lib.Grouping] = None) -> str:
    parts = [header] if header else []
    parts += [table_markdown(t, ci) for t in tables_]
    parts.append(runs_markdown(runs, grouping))
    parts.append("Cells: mean ± std over seeds (sample std) (n = finished runs reporting the value / runs in "
                 f"the cell); {MISSING} = no value. CSV/JSON hold the bootstrap 95% intervals and every value.")
    return "\n\n".join(parts) + "\n"


def to_csv(tables_: Sequence[Table]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["table", "row", "benchmark", "column", "metric", "mean", "std", "n", "expected", "ci95_low",
                "ci95_high", "ci95_over", "values", "runs", "missing", "notes"])
    for t in tables_:
        for c in t.cells.values():
            ci = c.ci95
            w.writerow([t.spec.title, c.row, c.benchmark, c.column, c.metric, _num(c.mean), _num(c.std), c.n,
                        c.expected, _num(ci[0] if ci else None), _num(ci[1] if ci else None), c.ci_over,
                        " ".join(repr(v) for v in c.values), " ".join(c.runs), "; ".join(c.missing),
                        "; ".join(c.notes)])
    return buf.getvalue()


def _num(v) -> str:
    return "" if v is None else repr(float(v))


def to_json(tables_: Sequence[Table], runs: Sequence[Run], grouping: Optional[rows_lib.Grouping] = None,
            **meta) -> str:
    g = grouping or rows_lib.plan(runs)
    info = {x["name"]: x for x in run_rows(runs, g)}
    return json.dumps({**meta, "rows": {"paths": g.keys, "seeds": g.seeds, "pool_over": g.pool_over,
                                        "pool_configs": g.pool_configs, "note": g.header(), "rows": g.describe(runs)},
                       "tables": [t.to_dict() for t in tables_],
                       "runs": [{"name": r.name, "path": r.path, "state": r.state, "overrides": r.overrides,
                                 "row": info[r.name]["row"], "benchmark": info[r.name]["benchmark"],
                                 "seed": {k: rows_lib.jsonable(rows_lib.value(r, k)) for k in g.seeds} if r.config else None,
                                 "code": r.code, "detail": r.detail} for r in runs]},
                      indent=1, default=str)


def _tex(s: str) -> str:
    return re.sub(r"([_%&#$])", r"\\\1", s)


def to_latex(tables_: Sequence[Table]) -> str:
    out = []
    for t in tables_:
        cols = t.columns()
        out += [f"% {t.spec.title}", r"\begin{tabular}{l" + "c" * len(cols) + "}", r"\toprule",
                " & ".join(["row"] + [_tex(column_name(t, b, m)) for b, m in cols]) + r" \\", r"\midrule"]
        for row in t.rows:
            vals = []
            for b, m in cols:
                c = t.cells[(row, b, m)]
                if c.mean is None:
                    vals.append("--")
                else:
                    s = fmt(c.mean, t.spec.percent) + (rf" \pm {fmt(c.std, t.spec.percent)}" if c.std is not None else "")
                    vals.append(f"${s}$")
            out.append(" & ".join([_tex(row)] + vals) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(out)
