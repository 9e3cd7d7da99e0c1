"""Harness-S directional evolution into a frozen sibling pool (thin main; the work is
``harness_jax.harness_s.evolve_run.evolve_main``).

    python launch/evolve.py --config=experiments/configs/harness_s/dbbench_cpu.py \
        --workdir=/tmp/hs/evolve --checkpoint=/tmp/hs/sft

``--checkpoint`` is the current policy: a training workdir (its latest parameters), an Orbax
checkpoints dir or an HF directory ('' = the config's own model). The pool is written to
``harness_s.evolve.out_dir`` (default ``<workdir>/pool``) as ``pool-<hash>.json`` (read-only) with
its ``.md`` report; point training at it with ``--config.harness_s.pool=<that file>``. Running the
same command again replays the finished rollouts and continues.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from harness_jax import distributed  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Harness-S experiment config", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "rollouts, traces, the pool and its report go here")
_CKPT = flags.DEFINE_string("checkpoint", "", "the current policy: training workdir, checkpoints dir or HF dir")
_OUT = flags.DEFINE_string("out_dir", "", "pool directory ('' = harness_s.evolve.out_dir or <workdir>/pool)")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags()


def main(argv):
    del argv
    distributed.initialize()
    from harness_jax.harness_s import evolve_run
    summary = evolve_run.evolve_main(_CONFIG.value, _WORKDIR.value, checkpoint=_CKPT.value, out_dir=_OUT.value)
    logging.info("done: %s", summary)
    print(summary["pool"])


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(main)
