"""Agent GRPO training (thin main; the loop lives in harness_jax.train).

    python launch/train.py --config=experiments/configs/tiny_cpu.py --workdir=/tmp/run \
        [--config.rl.group_size=8 ...]

Running the same command again resumes from <workdir>/checkpoints (or from the SFT warm start's
last checkpoint). SIGTERM saves a checkpoint and exits cleanly. ``--workdir`` may be a URI
(``gs://bucket/run``). The methods a config has sections of plug in through their registered
extensions (``harness_jax.train.extensions``): a ``harness_s`` section that names a sibling pool
(``experiments/configs/harness_s/``) trains with Harness-S's rescue, router and re-anchoring; a
config without method sections is plain agent GRPO.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from harness_jax import distributed  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "checkpoints, metrics and traces go here (path or gs:// URI)")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags()


def main(argv):
    del argv
    # the platform's XLA flags (collective overlap), then multi-host when flags/environment say so
    distributed.initialize(platform=_CONFIG.value.mesh.platform)
    from harness_jax.train import run
    summary = run.train(_CONFIG.value, _WORKDIR.value)
    logging.info("done: %s", summary)


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(main)
