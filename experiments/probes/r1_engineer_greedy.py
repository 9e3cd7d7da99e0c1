"""Probe: the greedy responses of a Harness-R1 run's SFT and GRPO engineers on its first held-out
packets, with the validation verdict (what ``evaluate_engineer.py``'s sft/grpo arms apply).

    PYTHONPATH=$PWD python experiments/probes/r1_engineer_greedy.py \
        --config=experiments/configs/harness_r1/tiny_cpu_policy.py:/tmp/r1pol/target_hf \
        --workdir=/tmp/r1pol/seed0 --packets=3

Used for docs/harness_r1.md section 11.1, its earlier run (the GRPO engineer's responses lost their <patch> block).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "the run's Harness-R1 config")
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir")
_PACKETS = flags.DEFINE_integer("packets", 3, "held-out packets to show")
_CHARS = flags.DEFINE_integer("chars", 700, "characters of each response to print")


def main(argv):
    del argv
    from harness_jax.harness_r1 import evaluate
    from harness_jax.harness_r1.packets import PacketDataset
    from harness_jax.harness_r1.prompt import validate_response
    from harness_jax.train import spec

    run = spec.resolve(_CONFIG.value)
    packets = PacketDataset(os.path.join(_WORKDIR.value, "packets")).load("held_out")[:_PACKETS.value]
    for which in ("sft", "grpo"):
        eng, engine = evaluate.model_engineer(run, _WORKDIR.value, which)
        try:
            for p in packets:
                [r] = eng.propose(p, k=1, seed=0)
                v = validate_response(r, p.env_name)
                print(f"=== {which} {p.packet_id} valid={v.ok} errors={v.errors}\n{r[:_CHARS.value]}\n")
        finally:
            engine.close()


if __name__ == "__main__":
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(main)
