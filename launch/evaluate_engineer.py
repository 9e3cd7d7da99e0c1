"""The Harness-R1 table (thin main; harness_jax.harness_r1.evaluate): per-benchmark success of the
frozen target under each engineer, the equal-weight mean, the hook ablation and the transfer.

    # one run of launch/engineer.py (its held-out packets; --split=test opens the sealed test split)
    python launch/evaluate_engineer.py --config=experiments/configs/harness_r1/tiny_cpu.py \
        --workdir=/tmp/r1_tiny [--split=held_out] [--arms=default,react,self_refine,rule,sft,grpo]
    # several benchmarks' tables -> one table with the equal-weight mean
    python launch/evaluate_engineer.py --merge=/r/db/table_test.json,/r/alf/table_test.json \
        --out=/r/table_test

Writes ``<workdir>/table_<split>.json`` (schema in docs/harness_r1.md) and ``.md``, and prints
the markdown.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "the run's Harness-R1 config", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir (launch/engineer.py)")
_SPLIT = flags.DEFINE_enum("split", "held_out", ["held_out", "test"], "packets to evaluate on")
_ARMS = flags.DEFINE_list("arms", None, "arms (default: config.r1.table.arms)")
_MERGE = flags.DEFINE_list("merge", None, "table JSON files to merge (one per benchmark)")
_OUT = flags.DEFINE_string("out", None, "output stem for --merge (writes .json and .md)")


def main(argv):
    del argv
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from harness_jax import compile_cache
    from harness_jax.harness_r1 import evaluate
    from harness_jax.train.console import Console
    compile_cache.enable()

    if _MERGE.value:
        import json
        if not _OUT.value:
            raise app.UsageError("--merge needs --out=<stem>")
        tables = []
        for p in _MERGE.value:
            with open(p, encoding="utf-8") as f:
                tables.append(json.load(f))
        table = evaluate.merge_tables(tables)
        evaluate.write(table, _OUT.value)
    else:
        if _CONFIG.value is None or not _WORKDIR.value:
            raise app.UsageError("give --config and --workdir (or --merge and --out)")
        table = evaluate.run_table(_CONFIG.value, _WORKDIR.value, split=_SPLIT.value, arms=_ARMS.value,
                                   console=Console("on", echo=True))
    print(evaluate.markdown(table))


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(main)
