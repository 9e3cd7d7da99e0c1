"""Evaluate a policy (a training checkpoint or a Hugging Face dir) under any harness on any split.

    python launch/evaluate.py --config=experiments/configs/tiny_cpu.py --workdir=/tmp/run \
        --checkpoint=/tmp/run/hf_final --split=selection --k=3 --out=/tmp/run/eval_selection.json

``--checkpoint`` is an HF directory (config.json + safetensors) or the workdir of a training run
(the parameters of its latest checkpoint; no optimizer state is read). ``--split=test`` is allowed here only (the test split is sealed for
training). Writes a results JSON (success, Pass@k, Avg@k, per-category) for table regeneration.

Paired comparison of two policies (issue 25): ``--baseline=`` a second checkpoint, evaluated on the
same tasks with the same random numbers (attempt j of a task always samples with the seeds of
(task, j)), or a results file (an ``eval_*.json``, or a training ``summary.json#<tag>`` such as
``summary.json#after_sft``); ``--checkpoint`` may be a results file too. The JSON then has
``paired``: Avg@k and greedy success of checkpoint minus baseline, mean over tasks, with a
bootstrap 95% interval over tasks::

    python launch/evaluate.py --config=experiments/configs/cpu_learnable.py --workdir=/tmp/cmp \
        --checkpoint=/tmp/run/hf_final --baseline=/tmp/sft/hf_final

``--routing=rank1`` (Harness-S configs): one harness per task from the sibling pool (H0 included),
chosen by the router before any rollout, against H0 alone; writes ``eval_<split>_rank1.json``
(schema ``harness-s-rank1-v1``, docs/harness_s.md). ``--pool`` overrides ``harness_s.pool``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from harness_jax import distributed  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "where traces of the evaluation go")
_CKPT = flags.DEFINE_string("checkpoint", "", "HF dir or training workdir ('' = config's model)")
_SPLIT = flags.DEFINE_string("split", "selection", "train | search | selection | test")
_HARNESS = flags.DEFINE_string("harness", "", "harness spec file or registered name ('' = config.harness.spec)")
_K = flags.DEFINE_integer("k", 0, "attempts per task (0 = config.eval.k)")
_NUM_TASKS = flags.DEFINE_integer("num_tasks", 0, "tasks (0 = config.eval.num_tasks)")
_OUT = flags.DEFINE_string("out", "", "results JSON path ('' = <workdir>/eval_<split>[_rank1].json)")
_ROUTING = flags.DEFINE_string("routing", "h0", "h0: one harness for every task; or a routing a method "
                               "registers (rank1: Harness-S Rank-1 routing over the pool, and H0 for comparison)")
_POOL = flags.DEFINE_string("pool", "", "--routing=rank1: pool file ('' = config.harness_s.pool)")
_BASELINE = flags.DEFINE_string("baseline", "", "a second checkpoint or results file (eval JSON, "
                                "summary.json#tag): paired difference with a bootstrap interval over tasks")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags()


def main(argv):
    del argv
    distributed.initialize()
    from harness_jax.train import evaluation

    res = evaluation.evaluate_command(_CONFIG.value, _WORKDIR.value, split=_SPLIT.value, num_tasks=_NUM_TASKS.value,
                                      routing=_ROUTING.value, checkpoint=_CKPT.value, harness=_HARNESS.value,
                                      k=_K.value, pool=_POOL.value, out=_OUT.value, baseline=_BASELINE.value)
    logging.info("results: %s", {k: v for k, v in res.items() if k != "per_task"})


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(main)
