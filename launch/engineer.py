"""Harness-R1 engineer training end to end (thin main; the stages live in harness_jax.harness_r1).

    python launch/engineer.py --config=experiments/configs/harness_r1/tiny_cpu.py --workdir=/tmp/r1

baseline -> failure packets -> cold-start SFT data (rule-based teacher or an endpoint) -> SFT ->
GRPO -> held-out evaluation, with resume at every stage: kill it and run the same command again.
The console shows a progress bar per phase and one summary line per GRPO step (mean Delta_B,
valid fraction, zero-variance packets, step time); library logs are at WARNING (``--verbosity=0``
for INFO). Metrics: ``<workdir>/metrics.jsonl`` and ``tb/``; figures ``engineer_summary.json``;
plot ``engineer.png``.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from harness_jax import distributed  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Harness-R1 config file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "a local directory for packets, caches, checkpoints, metrics")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags()


def main(argv):
    del argv
    distributed.initialize(platform=_CONFIG.value.mesh.platform)   # XLA flags of the platform, multi-host
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from harness_jax.harness_r1 import pipeline
    from harness_jax.train.console import Console

    console = Console("on", echo=True, stream=sys.stderr)
    summary = pipeline.run(_CONFIG.value, _WORKDIR.value, console=console)
    ev = summary["eval"]
    ref = summary.get("reference_rule") or {}
    out = {"workdir": os.path.abspath(_WORKDIR.value), "wall_s": round(summary["wall_s"], 1),
           "stage_wall_s": summary["stage_wall_s"],
           "held_out": {tag: {k: v[k] for k in ("delta_b", "valid_frac", "noop_frac", "success_rate")}
                        for tag, v in ev.items() if v.get("delta_b") is not None},
           "rule_based_delta_b": ref.get("delta_b"), "preempted": summary.get("preempted")}
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    import jax
    jax.config.config_with_absl()
    app.run(main)
