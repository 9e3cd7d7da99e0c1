"""Plots and the static report: training curves over seeds, router decisions, sibling
complementarity (the pools the runs trained with), Delta_B, and one
self-contained HTML page (tables, plots embedded as PNG, the runs that failed) next to the
Markdown / CSV / JSON / LaTeX tables.

    from harness_jax.eval import report
    paths = report.write_report(runs, tables, "/tmp/sweep/report")   # what launch/tables.py does

Curves: one figure per ``metrics.jsonl`` key (``DEFAULT_CURVES`` that the runs logged, or the
keys asked for), one line per table row and benchmark (``rows.plan``: runs of different configs
never share a line unless pooled on request, then the title says over what): the mean over its
finished runs at each step logged by any of them, a ±std band where at least two runs logged the
step, and ``n`` in the legend. Only records holding the key are used (SFT and GRPO steps share
``step``).
"""
from __future__ import annotations

import base64
import html
import os
import time
from typing import Callable, Iterable, Optional, Sequence, Union
import sys

import numpy as np

from harness_jax.eval import rows as rows_lib, tables as tables_lib
from harness_jax.eval.runs import Run, TablesError
from harness_jax.eval import runs as runs_lib
from harness_jax.harness_s.pool import load_pool
from harness_jax.provenance import repo_root

DEFAULT_CURVES = ("eval/success_rate", "rollout/success_rate", "rollout/reward_mean",
                  "groups/zero_variance_fraction", "rescue/trigger_rate", "rescue/success_rate",
                  "rescue/zero_variance_before", "r1/delta_b_mean", "r1/valid_frac", "sft/nll")


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def curve_keys(runs: Sequence[Run], asked: Sequence[str] = ()) -> list[str]:
    logged = {k for r in runs if r.done for rec in r.metrics() for k in rec}
    if asked:
        unknown = [k for k in asked if k not in logged]
        if unknown:
            import difflib
            close = difflib.get_close_matches(unknown[0], sorted(logged), n=5, cutoff=0.5)
            raise TablesError(f"--curves: no finished run logged {unknown[0]!r} in metrics.jsonl"
                              + (f"; did you mean {', '.join(close)}?" if close else ""))
        return list(asked)
    return [k for k in DEFAULT_CURVES if k in logged]


def series(run: Run, key: str) -> dict:
    """step -> value of ``key`` in the run's metrics.jsonl (the last record of a step wins)."""
    out = {}
    for rec in run.metrics():
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and "step" in rec:
            out[int(rec["step"])] = float(v)
    return out


def group_curves(groups: dict, key: str) -> list[dict]:
    """Per group ``{"label", "n", "steps", "mean", "std"}`` (std NaN where one run logged the step)."""
    out = []
    for label, members in groups.items():
        ss = [s for s in (series(r, key) for r in members if r.done) if s]
        if not ss:
            continue
        steps = sorted({st for s in ss for st in s})
        vals = [[s[st] for s in ss if st in s] for st in steps]
        out.append({"label": label, "n": len(ss), "steps": steps,
                    "mean": [float(np.mean(v)) for v in vals],
                    "std": [float(np.std(v, ddof=1)) if len(v) > 1 else float("nan") for v in vals]})
    return out


def plot_curves(groups: dict, key: str, path_stem: str, pooled: str = "") -> Optional[list[str]]:
    """One line per group; ``pooled`` (what the rows pool besides seeds) goes in the title."""
    curves = group_curves(groups, key)
    if not curves:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for c in curves:
        steps, mean, std = np.array(c["steps"]), np.array(c["mean"]), np.array(c["std"])
        line, = ax.plot(steps, mean, marker="o" if len(steps) < 30 else None, ms=3,
                        label=f"{c['label']} (n={c['n']})")
        ok = np.isfinite(std)
        if ok.any():
            ax.fill_between(steps[ok], (mean - std)[ok], (mean + std)[ok], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel(key)
    ax.set_title(f"{key}: mean ± std over seeds" + (f"\n(pooled over {pooled}, as asked)" if pooled else ""),
                 fontsize=10 if pooled else None)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path_stem)


def plot_router_choices(runs: Sequence[Run], groups: dict, path_stem: str) -> Optional[list[str]]:
    """Share of tasks routed to each sibling at Rank-1 (``eval_<split>_rank1.json`` choices), per
    row, pooled over its runs."""
    shares: dict = {}
    for label, members in groups.items():
        for r in members:
            for k, ch in r.extras.items():
                if k.endswith("/choices"):
                    for sid, c in ch.items():
                        name = c.get("name") or sid
                        shares.setdefault(label, {}).setdefault(name, 0)
                        shares[label][name] += int(c.get("tasks", 0))
    if not shares:
        return None
    plt = _plt()
    sibs = sorted({s for d in shares.values() for s in d})
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    width = 0.8 / len(shares)
    for i, (label, d) in enumerate(shares.items()):
        total = sum(d.values()) or 1
        ax.bar(np.arange(len(sibs)) + i * width, [d.get(s, 0) / total for s in sibs], width, label=label)
    ax.set_xticks(np.arange(len(sibs)) + 0.4 - width / 2, sibs, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("share of tasks")
    ax.set_title("Rank-1 router decisions")
    ax.legend(fontsize=7)
    return _save(fig, path_stem)


def plot_delta_b(groups: dict, path_stem: str) -> Optional[list[str]]:
    """Distribution of per-packet Delta_B of the rule-based reference and of the engineer's GRPO
    steps (``r1/delta_b_mean``), pooled per row."""
    data = {}
    for label, members in groups.items():
        ref = [x for r in members if r.done for x in r.extras.get("reference_rule/per_packet_delta_b", [])]
        steps = [v for r in members if r.done for v in series(r, "r1/delta_b_mean").values()]
        if ref:
            data[f"{label}: rule-based, per packet"] = ref
        if steps:
            data[f"{label}: GRPO step means"] = steps
    if not data:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.hist(list(data.values()), bins=12, label=[f"{k} (n={len(v)})" for k, v in data.items()])
    ax.set_xlabel("Delta_B")
    ax.set_ylabel("count")
    ax.set_title("Delta_B distribution")
    ax.legend(fontsize=7)
    return _save(fig, path_stem)


def pool_paths(runs: Sequence[Run], repo_root: str = "") -> list[str]:
    """The distinct sibling pool files (``harness_s.pool``) of the finished runs that exist here
    (relative paths: to the current directory, else to ``repo_root``)."""
    out = []
    for r in runs:
        p = ((r.config.get("harness_s") or {}).get("pool") or "") if r.done else ""
        if not p:
            continue
        for cand in (os.path.expanduser(p), os.path.join(repo_root, p) if repo_root else ""):
            if cand and os.path.isfile(cand) and os.path.abspath(cand) not in out:
                out.append(os.path.abspath(cand))
                break
    return out


def plot_complementarity(pool_path: str, path_stem: str, max_tasks: int = 60) -> Optional[list[str]]:
    """Sibling complementarity of a frozen pool: which of H0's validation failures each sibling
    solves (a sibling x task matrix) and how many (``harness_s.pool.pool_report``'s matrix)."""
    pool = load_pool(pool_path)
    fails = pool.h0_failed_tasks()[:max_tasks]
    if not fails or len(pool) < 2:
        return None
    solved = pool.solved()
    entries = pool.entries[1:]
    m = np.array([[t in solved[e.sibling_id] for t in fails] for e in entries], dtype=float)
    plt = _plt()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 0.45 * len(entries) + 1.8),
                                 gridspec_kw={"width_ratios": [4, 1]}, sharey=True)
    ax.imshow(m, aspect="auto", cmap="Greens", vmin=0, vmax=1, interpolation="nearest")
    ax.set_yticks(range(len(entries)), [e.name for e in entries], fontsize=7)
    ax.set_xticks(range(len(fails)), [pool.task_info.get(t, {}).get("category") or t for t in fails],
                  rotation=90, fontsize=6)
    ax.set_title(f"H0 validation failures each sibling solves (pool {pool.content_hash[:10]})", fontsize=9)
    bx.barh(range(len(entries)), m.sum(axis=1))
    bx.set_xlabel(f"solved of {len(fails)}")
    return _save(fig, path_stem)


def _save(fig, stem: str) -> list[str]:
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    paths = [stem + ".png", stem + ".svg"]
    fig.tight_layout()
    for p in paths:
        fig.savefig(p, dpi=110)
    _plt().close(fig)
    return paths


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def make_plots(runs: Sequence[Run], groups: dict, out_dir: str, curves: Sequence[str] = (),
               progress: Optional[Callable[[Iterable], Iterable]] = None, pooled: str = "") -> list[tuple[str, str]]:
    """[(title, png path)] of every plot written under ``out_dir/plots`` (``pooled``: what the
    groups pool besides seeds, said in the curves' titles)."""
    wrap = progress or (lambda it: it)
    plot_dir = os.path.join(out_dir, "plots")
    jobs = [(f"training curve: {k}", lambda k=k: plot_curves(groups, k, os.path.join(plot_dir, "curve_" + _safe(k)), pooled))
            for k in curve_keys(runs, curves)]
    jobs += [(f"sibling complementarity: {os.path.basename(p)}",
              lambda p=p: plot_complementarity(p, os.path.join(plot_dir, "complementarity_" + _safe(os.path.basename(p)))))
             for p in pool_paths(runs, _repo_root())]
    jobs += [("Rank-1 router decisions", lambda: plot_router_choices(runs, groups, os.path.join(plot_dir, "router_choices"))),
             ("Delta_B distribution", lambda: plot_delta_b(groups, os.path.join(plot_dir, "delta_b")))]
    out = []
    for title, job in wrap(jobs):
        paths = job()
        if paths:
            out.append((title, paths[0]))
    return out


def _repo_root() -> str:
    return repo_root()


# ------------------------------------------------------------------------------ HTML
_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}th,td{border:1px solid #bbb;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f0f0f0}td.missing{background:#fde8e8;color:#900}
td.partial{background:#fff6dd}.notes{font-size:12px;color:#555}pre{background:#f6f6f6;padding:6px;font-size:12px;overflow-x:auto}
img{max-width:100%;border:1px solid #ddd;margin:.5em 0}"""


def table_html(t: tables_lib.Table, ci: bool = True) -> str:
    cols = t.columns()
    notes, marks = tables_lib.footnotes(t)
    h = [f"<h3>{html.escape(t.spec.title)}</h3><table><tr><th>row</th>"
         + "".join(f"<th>{html.escape(tables_lib.column_name(t, b, m))}</th>" for b, m in cols) + "</tr>"]
    for row in t.rows:
        h.append(f"<tr><td>{html.escape(row)}</td>")
        for b, m in cols:
            c = t.cells[(row, b, m)]
            cls = "missing" if c.mean is None else ("partial" if c.n < c.expected and b != "mean" else "")
            mark = "".join(f" <sup>[{i}]</sup>" for i in marks.get((row, b, m), []))
            title = html.escape("values: " + ", ".join(f"{v:.4g}" for v in c.values) + (" · runs: " + ", ".join(c.runs) if c.runs else ""))
            h.append(f'<td class="{cls}" title="{title}">{html.escape(tables_lib.cell_text(c, t.spec.percent, ci))}{mark}</td>')
        h.append("</tr>")
    h.append("</table>")
    if notes:
        h.append('<div class="notes">' + "<br>".join(
            f"[{i + 1}] {html.escape(text)}" for i, text in enumerate(notes)) + "</div>")
    return "\n".join(h)


def to_html(tables_: Sequence[tables_lib.Table], runs: Sequence[Run], plots: Sequence[tuple[str, str]],
            title: str = "harness_jax results", command: str = "", grouping: Optional[rows_lib.Grouping] = None) -> str:
    g = grouping or rows_lib.plan(runs)
    bad = tables_lib.failed_runs(runs)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p>{len(runs) - len(bad)} of {len(runs)} runs finished · generated {time.strftime('%Y-%m-%d %H:%M:%S')}"
             + (f"<br><code>{html.escape(command)}</code>" if command else "") + "</p>",
             "<p class='notes'>Cells: mean ± std over seeds (n = finished runs reporting the value / runs in the "
             "cell) [bootstrap 95% interval of the mean]. Hover a cell for its values and runs.</p>",
             f"<p class='notes'>{html.escape(g.header())}</p>"]
    parts += [table_html(t) for t in tables_]
    parts.append("<h2>Plots</h2>" if plots else "<h2>Plots</h2><p>No curves: the finished runs logged none of the plotted keys.</p>")
    for name, png in plots:
        with open(png, "rb") as f:
            data = base64.b64encode(f.read()).decode("ascii")
        parts.append(f"<h3>{html.escape(name)}</h3><img alt='{html.escape(name)}' src='data:image/png;base64,{data}'>")
    parts.append(f"<h2>Runs not finished ({len(bad)})</h2>")
    if bad:
        parts.append("<p>Listed here, counted in no cell.</p>")
        for r in bad:
            parts.append(f"<h4>{html.escape(r.name)} — {html.escape(r.state)}</h4><p><code>{html.escape(r.path)}</code></p>"
                         f"<pre>{html.escape(r.detail)}</pre>")
    else:
        parts.append("<p>None.</p>")
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(x[k]))}</td>" for k in ("name", "row", "benchmark", "seed", "state"))
                   + f"<td>{html.escape(str((r.code.get('commit') or '')[:10]))}</td><td>{html.escape(r.path)}</td></tr>"
                   for r, x in zip(runs, tables_lib.run_rows(runs, g)))
    parts.append("<h2>All runs</h2><table><tr><th>run</th><th>row</th><th>benchmark</th>"
                 f"<th>{html.escape(', '.join(g.seeds))}</th><th>state</th><th>commit</th><th>path</th></tr>{rows}</table></body></html>")
    return "\n".join(parts)


def write_report(runs: Sequence[Run], tables_: Sequence[tables_lib.Table], out_dir: str, *,
                 grouping: Optional[rows_lib.Grouping] = None, curves: Sequence[str] = (), plots: bool = True,
                 ci: bool = False, command: str = "", title: str = "harness_jax results",
                 progress: Optional[Callable[[Iterable], Iterable]] = None) -> dict:
    """Writes ``tables.md``, ``tables.csv``, ``tables.json``, ``tables.tex``, ``plots/*.png|svg``
    and ``report.html`` under ``out_dir``; returns ``{kind: path}``."""
    os.makedirs(out_dir, exist_ok=True)
    g = grouping or rows_lib.plan(runs)
    header = f"# {title}\n\n`{command}`" if command else f"# {title}"
    out = {}
    for kind, text in (("md", tables_lib.to_markdown(tables_, runs, ci=ci, header=header, grouping=g)),
                       ("csv", tables_lib.to_csv(tables_)),
                       ("json", tables_lib.to_json(tables_, runs, g, command=command)),
                       ("tex", tables_lib.to_latex(tables_))):
        out[kind] = os.path.join(out_dir, f"tables.{kind}")
        with open(out[kind], "w", encoding="utf-8") as f:
            f.write(text)
    pooled = "configs" if g.pool_configs else ", ".join(g.pool_over)
    made = make_plots(runs, g.groups(runs, split_benchmarks=True), out_dir, curves, progress, pooled) if plots else []
    out["plots"] = [p for _, p in made]
    out["html"] = os.path.join(out_dir, "report.html")
    with open(out["html"], "w", encoding="utf-8") as f:
        f.write(to_html(tables_, runs, made, title=title, command=command, grouping=g))
    return out


def generate(paths: Sequence[str], out_dir: Optional[str] = None, *, table: str = "auto",
             metrics: Sequence[str] = (), rows: Optional[Sequence[str]] = None,
             seed_key: Union[str, Sequence[str]] = "seed", pool_over: Sequence[str] = (), pool_configs: bool = False,
             benchmark_key: str = "env.name", percent: bool = False, ci: bool = False, strict: bool = False,
             curves: Sequence[str] = (), plots: bool = True, title: str = "", command: str = "",
             progress: bool = False) -> dict:
    """``launch/tables.py``: reads the runs under ``paths``, makes the rows (``rows.plan``: runs
    whose configs differ apart unless pooled over ``pool_over`` or ``pool_configs``), builds the
    tables of ``table`` (or of ``metrics``), writes the report under ``out_dir`` (default
    ``<first path>/report``). Returns ``{"runs", "grouping", "tables", "markdown", "files"}``."""
    wrap = _progress("reading runs") if progress else None
    runs = runs_lib.load_runs(paths, progress=wrap)
    if not any(r.done for r in runs):
        listed = "; ".join(f"{r.name}: {r.state}" for r in runs[:10])
        raise TablesError(f"--runs: none of the {len(runs)} runs finished ({listed}); nothing to tabulate "
                          "(re-run the sweep: launch/sweep.py resumes interrupted runs)")
    specs = tables_lib.specs_for(table, runs, metrics, percent)
    tables_lib.check_metrics(specs, runs)
    if rows is not None:
        _check_rows(rows, runs)
    grouping = rows_lib.plan(runs, rows, [seed_key] if isinstance(seed_key, str) else seed_key, pool_over,
                             pool_configs, benchmark_key)
    built = tables_lib.build(runs, specs, grouping, strict)
    out_dir = out_dir or os.path.join(os.path.abspath(os.path.expanduser(paths[0])), "report")
    files = write_report(runs, built, out_dir, grouping=grouping, curves=curves, plots=plots, ci=ci,
                         command=command, title=title or "harness_jax results",
                         progress=_progress("plots") if progress else None)
    header = f"# {title}" if title else ""
    return {"runs": runs, "grouping": grouping, "tables": built, "files": files,
            "markdown": tables_lib.to_markdown(built, runs, ci=ci, header=header, grouping=grouping)}


def _check_rows(rows: Sequence[str], runs: Sequence[Run]) -> None:
    for k in rows:
        if all(rows_lib.value(r, k) is rows_lib.UNSET for r in runs):
            raise TablesError(f"--rows: {k!r} is a path of no run's config; give dotted config paths "
                              "(e.g. --rows=harness_s.router.name) or leave --rows empty for the swept paths")


def _progress(desc: str) -> Callable[[Iterable], Iterable]:
    from tqdm import tqdm

    def wrap(it):
        it = list(it)
        return tqdm(it, desc=desc, total=len(it), file=sys.stderr, leave=False,
                    disable=not sys.stderr.isatty() and len(it) < 2)
    return wrap


def list_metrics(paths: Sequence[str]) -> list[str]:
    """The scalar names the finished runs under ``paths`` hold (``--list_metrics``)."""
    return sorted({k for r in runs_lib.load_runs(paths) if r.done for k in r.scalars})
