"""Which runs share a row (and so a cell): runs whose resolved configs differ never do, unless asked.

    from harness_jax.eval import rows
    g = rows.plan(runs)                       # what tables.build and the curves use
    g.label(run)                              # "hs_grpo_only_cpu", "opt.lr=0.001", "harness_s, num_steps=4"

A run's config is the resolved one it recorded (``sweep/config.json`` of a sweep run, else the
``config.json`` its launcher wrote into its workdir). Two runs of one benchmark share a row only
when their configs are equal at every path except

* the **seed paths**: ``seed_keys`` (default ``seed``) and every path a sweep sweeps whose last
  part is ``seed`` (``hyper.sweep("seed", ...)``, ``hyper.sweep("rl.seed", ...)``): the sweep's
  seed axis, pooled within a cell as seeds;
* the paths the user pools over (``pool_over``, ``launch/tables.py --pool_over=a.b,c``); the cells
  say what was pooled;

and with ``pool_configs`` (``--pool_configs``) rows are made by the row paths alone (the config
``name`` when the runs' names differ, the swept paths, or ``--rows``) and a cell may pool runs whose
configs differ, said in its notes.

The row label names what tells the rows apart: the config ``name`` when it tells runs of one
benchmark apart, then each swept path that tells apart runs the paths before it did not
(``--rows`` replaces both; the benchmark is a column, never a label), then, while two runs of one
benchmark with different configs would still share a label, the config path that splits the most
of them (shown as its shortest unambiguous dotted suffix of at least two parts: ``lr=`` would say
too little, ``opt.lr=0.001``). A section one config has and another lacks is named by its leaves
when it has at most three (``r1.k=8`` / ``r1.k=unset``), else whole (``harness_s=set`` /
``harness_s=unset``). A run that recorded no config cannot be compared with another: it gets a
row of its own (``<run> (no config)``) unless configs are pooled. With no path in the label
(one row), the label is the runs' config name(s).
"""
from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Optional, Sequence

from harness_jax.eval.runs import Run, TablesError, config_get
from harness_jax.sweeps.hyper import short_keys
from harness_jax.sweeps.spec import config_diff

UNSET = object()            # a path the run's config does not have


def covers(paths: Sequence[str], p: str) -> bool:
    return any(p == k or p.startswith(k + ".") for k in paths)


def seed_paths(runs: Sequence[Run], seed_keys: Sequence[str] = ("seed",)) -> list[str]:
    """``seed_keys`` and the swept paths whose last part is ``seed`` (a sweep's seed axis)."""
    out = list(dict.fromkeys(seed_keys))
    for r in runs:
        for k in r.overrides:
            if k.split(".")[-1] == "seed" and k not in out:
                out.append(k)
    return out


def value(run: Run, path: str) -> Any:
    """The run's value at ``path``: the sweep's override, else its config's (``UNSET`` if none)."""
    if path in run.overrides:
        return run.overrides[path]
    return config_get(run.config, path, UNSET)


def value_text(v: Any) -> str:
    if v is UNSET:
        return "unset"
    if isinstance(v, dict):
        return "set"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "x".join(value_text(x) for x in v)
    return str(v)


def _strip(config: dict, paths: Sequence[str]) -> dict:
    out = copy.deepcopy(config)
    for p in paths:
        parts, node = p.split("."), out
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return out


@dataclasses.dataclass
class Grouping:
    """The row of every run, and why (``plan``)."""
    keys: list                   # config paths named in the labels, in order
    seeds: list                  # seed paths (pooled within a cell as seeds)
    pool_over: list              # paths pooled because the user asked (--pool_over)
    pool_configs: bool           # rows by the row paths alone (--pool_configs)
    benchmark_key: str
    labels: dict                 # run name -> row label

    def label(self, run: Run) -> str:
        return self.labels[run.name]

    def ignored(self) -> list:
        """Paths whose differences do not split cells (the seeds and the asked-for pooling)."""
        return self.seeds + self.pool_over

    def groups(self, runs: Sequence[Run], split_benchmarks: bool = False) -> dict:
        """{row label: [runs]} in first-seen order (``split_benchmarks``: ``"label [benchmark]"``
        per benchmark when the runs span several: the plots' lines)."""
        several = len({benchmark_of(r, self.benchmark_key) for r in runs}) > 1
        out: dict = {}
        for r in runs:
            label = self.label(r)
            if split_benchmarks and several:
                label += f" [{benchmark_of(r, self.benchmark_key)}]"
            out.setdefault(label, []).append(r)
        return out

    def describe(self, runs: Sequence[Run]) -> dict:
        """{row label: {"paths": {path: value}, "runs": [names]}} (tables.json)."""
        out: dict = {}
        for r in runs:
            row = out.setdefault(self.label(r), {"paths": {k: jsonable(value(r, k)) for k in self.keys},
                                                 "runs": []})
            row["runs"].append(r.name)
        return out

    def header(self) -> str:
        """One line saying how rows were made and what was pooled (the Markdown, the HTML)."""
        s = ("Rows: runs share a row only when their resolved configs are equal except at "
             f"{', '.join(self.ignored())}")
        if self.pool_configs:
            s = ("Rows: by " + (", ".join(self.keys) or "nothing (one row)") + "; configs pooled as asked "
                 "(--pool_configs): a cell may pool runs whose configs differ (its notes say where)")
        elif self.pool_over:
            s += f" (pooled over {', '.join(self.pool_over)} as asked: --pool_over)"
        return s + "."


def jsonable(v: Any) -> Any:
    return None if v is UNSET else v


def benchmark_of(run: Run, key: str = "env.name") -> str:
    """The run's benchmark from its own config (``?`` when it recorded none)."""
    v = config_get(run.config, key, None)
    return "?" if v is None else str(v)


def signature(run: Run, ignored: Sequence[str]) -> str:
    """What must be equal for two runs to share a cell: the config minus ``ignored`` paths
    (a run without a config is like no other)."""
    if not run.config:
        return "no config: " + run.path
    return json.dumps(_strip(run.config, ignored), sort_keys=True, default=str)


def auto_keys(runs: Sequence[Run], ignored: Sequence[str], benchmark_key: str = "env.name") -> list[str]:
    """``name``, then the swept paths (not ``ignored``, not the benchmark), each kept when it tells
    apart runs of one benchmark that the paths before it did not (a path that only repeats what
    the name says, or that only follows the benchmark, makes no label longer)."""
    cands = ["name"]
    for r in runs:
        for k in r.overrides:
            if k not in cands:
                cands.append(k)
    keys: list[str] = []
    for k in cands:
        if covers(ignored, k) or k == benchmark_key:
            continue
        if _buckets(runs, keys + [k], benchmark_key) > _buckets(runs, keys, benchmark_key):
            keys.append(k)
    return keys


def _buckets(runs: Sequence[Run], keys: Sequence[str], benchmark_key: str) -> int:
    return len({(benchmark_of(r, benchmark_key), _tuple(r, keys)) for r in runs if r.config})


def _tuple(run: Run, keys: Sequence[str]) -> tuple:
    return tuple(repr(value(run, k)) for k in keys)


def _split_keys(runs: Sequence[Run], keys: list, ignored: Sequence[str], benchmark_key: str) -> list:
    """``keys`` plus, one at a time, the config path that splits the most runs of one benchmark
    that share a label but not a config, until none do."""
    keys = list(keys)
    with_config = [r for r in runs if r.config]
    sigs = {r.name: signature(r, ignored) for r in with_config}
    while True:
        buckets: dict = {}
        for r in with_config:
            buckets.setdefault((benchmark_of(r, benchmark_key), _tuple(r, keys)), []).append(r)
        mixed = [b for b in buckets.values() if len({sigs[r.name] for r in b}) > 1]
        if not mixed:
            return keys
        cands: list[str] = []
        for b in mixed:
            for r in b[1:]:
                for p in config_diff(b[0].config, r.config):
                    for q in _leaves(p, b[0], r):
                        if not covers(ignored, q) and q not in keys and q not in cands:
                            cands.append(q)
        if not cands:        # cannot happen for JSON configs; never loop
            return keys
        best = max(cands, key=lambda p: sum(len({repr(value(r, p)) for r in b}) for b in mixed))
        keys.append(best)


def _leaves(path: str, *runs: Run, most: int = 3) -> list[str]:
    """A section one run has and another lacks, as its few leaf paths (``r1.k``); a larger
    section stays whole (labelled ``set`` / ``unset``)."""
    for r in runs:
        v = value(r, path)
        if isinstance(v, dict):
            leaves = sorted(f"{path}.{k}" for k in flatten_keys(v))
            return leaves if 0 < len(leaves) <= most else [path]
    return [path]


def flatten_keys(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        p = f"{prefix}.{k}" if prefix else str(k)
        out += flatten_keys(v, p) if isinstance(v, dict) and v else [p]
    return out


def plan(runs: Sequence[Run], row_keys: Optional[Sequence[str]] = None, seed_keys: Sequence[str] = ("seed",),
         pool_over: Sequence[str] = (), pool_configs: bool = False, benchmark_key: str = "env.name") -> Grouping:
    """The rows of ``runs`` (module docstring)."""
    if isinstance(seed_keys, str):
        seed_keys = [seed_keys]
    pool_over = list(dict.fromkeys(pool_over))
    for k in pool_over:
        if all(value(r, k) is UNSET for r in runs):
            raise TablesError(f"--pool_over: {k!r} is a path of no run's config; give dotted config paths "
                              "(e.g. --pool_over=rl.num_steps,opt.lr)")
    seeds = seed_paths(runs, seed_keys)
    ignored = seeds + pool_over
    keys = list(row_keys) if row_keys is not None else auto_keys(runs, ignored, benchmark_key)
    if not pool_configs:
        keys = _split_keys(runs, keys, ignored, benchmark_key)
    short = short_keys(keys, min_parts=2)
    names = list(dict.fromkeys(str(r.config["name"]) for r in runs if r.config.get("name")))
    one_row = " / ".join(names) or "all runs"      # no path tells the runs apart
    labels = {}
    for r in runs:
        if not r.config and not pool_configs:
            labels[r.name] = f"{r.name} (no config)"
            continue
        parts = [value_text(value(r, k)) if k == "name" else f"{short[k]}={value_text(value(r, k))}" for k in keys]
        labels[r.name] = ", ".join(parts) if parts else one_row
    return Grouping(keys=keys, seeds=seeds, pool_over=pool_over, pool_configs=pool_configs,
                    benchmark_key=benchmark_key, labels=labels)
