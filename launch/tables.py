"""Regenerates the benchmark tables and plots from run directories (thin main; the library is
harness_jax.eval.{runs,tables,report}).

    python launch/tables.py --runs=/tmp/seeds [--runs=/tmp/grpo_only] [--out=/tmp/seeds/report]
    python launch/tables.py --runs=/tmp/r1_run0 --runs=/tmp/r1_run1 --table=harness_r1
    python launch/tables.py --runs=/tmp/seeds --metrics=final/success_rate,after_sft/success_rate --percent
    python launch/tables.py --runs=/tmp/seeds --list_metrics

    python launch/tables.py --runs=/tmp/hs --runs=/tmp/grpo_only --pool_over=num_steps   # pool on purpose

--runs takes sweep roots (launch/sweep.py --workdir), run workdirs, or directories of them. Runs
share a row only when their resolved configs are equal except at the seed (--seed_key and a
sweep's seed axis): a method and its baseline, or two lengths of one method, are never averaged
unless --pool_over=paths or --pool_configs asks for it (the cells then say what was pooled). Rows
are labelled by what tells them apart (config name, swept paths, or --rows=config.paths), columns
benchmark x metric (benchmark and seed from each run's own config); cells are mean ± std over
seeds with n, failed / unfinished runs are listed, missing cells shown.
Writes tables.{md,csv,json,tex}, plots/*.{png,svg} and a self-contained report.html under --out
and prints the Markdown. Exit code 2 on bad input. See docs/experiments.md.
"""
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402

_RUNS = flags.DEFINE_multi_string("runs", [], "sweep root, run workdir, or a directory of them (repeatable)")
_OUT = flags.DEFINE_string("out", "", "output directory ('' = <first --runs>/report)")
_TABLE = flags.DEFINE_enum("table", "auto", ["auto", "main", "router", "harness_r1"],
                           "which tables: main (Harness-S Pass@k/Avg@k), router (Rank-1, rescue by stage), "
                           "harness_r1 (success / Delta_B per engineer), auto (those the runs have data for)")
_METRICS = flags.DEFINE_list("metrics", [], "columns: scalar names (--list_metrics); replaces the table kind")
_ROWS = flags.DEFINE_list("rows", None, "config paths named in the row labels (default: the config name and swept "
                          "paths that differ); runs whose configs differ elsewhere still get rows of their own")
_SEED_KEY = flags.DEFINE_list("seed_key", ["seed"], "config paths pooled over within a cell as seeds (swept paths "
                              "ending in 'seed' are seeds too)")
_POOL_OVER = flags.DEFINE_list("pool_over", [], "config paths whose differences do not split rows: their runs are "
                               "pooled in one cell, and the cell says so")
_POOL_CONFIGS = flags.DEFINE_bool("pool_configs", False, "rows by --rows / config name / swept paths alone: a cell may "
                                  "pool runs whose configs differ (its notes say where)")
_BENCH_KEY = flags.DEFINE_string("benchmark_key", "env.name", "config path naming the benchmark (column group)")
_PERCENT = flags.DEFINE_bool("percent", False, "show rates x100")
_CI = flags.DEFINE_bool("ci", False, "also show bootstrap 95%% intervals in the Markdown (always in CSV/JSON/HTML)")
_STRICT = flags.DEFINE_bool("strict", False, "refuse cells pooling runs whose code versions (or, with --pool_configs, "
                            "configs) differ")
_CURVES = flags.DEFINE_list("curves", [], "metrics.jsonl keys to plot (default: success, reward, zero-variance, rescue, Delta_B, ...)")
_PLOTS = flags.DEFINE_bool("plots", True, "write plots (and embed them in report.html)")
_TITLE = flags.DEFINE_string("title", "", "report title")
_LIST = flags.DEFINE_bool("list_metrics", False, "print the scalar names the finished runs hold and exit")


def main(argv):
    del argv
    from harness_jax.eval import report
    from harness_jax.eval.runs import TablesError

    if not _RUNS.value:
        raise app.UsageError("--runs is required: a sweep root (launch/sweep.py --workdir) or a run's --workdir")
    try:
        if _LIST.value:
            print("\n".join(report.list_metrics(_RUNS.value)))
            return 0
        res = report.generate(_RUNS.value, _OUT.value or None, table=_TABLE.value, metrics=_METRICS.value,
                              rows=_ROWS.value, seed_key=_SEED_KEY.value, pool_over=_POOL_OVER.value,
                              pool_configs=_POOL_CONFIGS.value, benchmark_key=_BENCH_KEY.value,
                              percent=_PERCENT.value, ci=_CI.value, strict=_STRICT.value, curves=_CURVES.value,
                              plots=_PLOTS.value, title=_TITLE.value, progress=True,
                              command=shlex.join(["python", "launch/tables.py", *sys.argv[1:]]))
    except TablesError as e:
        print(f"launch/tables.py: {e}", file=sys.stderr)
        return 2
    print(res["markdown"])
    files = res["files"]
    print(f"wrote {files['html']} ({len(files['plots'])} plots), {files['md']}, {files['csv']}, "
          f"{files['json']}, {files['tex']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
