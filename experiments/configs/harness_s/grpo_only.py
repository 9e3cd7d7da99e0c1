"""harness_s/grpo_only: the GRPO-only control of the Harness-S CPU runs: ``dbbench_cpu`` with
rescue, routing and re-anchoring off (same learnable task family, model, SFT warm start, budget
and evaluation).

Commands::

    # the shared SFT warm start (cached in sft.cache_dir for every config of this directory)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/sft --config.num_steps=0 --config.eval.at_start=False
    # the control, one seed, from that warm start (dbbench_cpu's docstring: all steps)
    mkdir -p /tmp/hs/grpo-s0 && cp -r /tmp/hs/sft/tokenizer /tmp/hs/grpo-s0/
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/grpo-s0 --config.seed=0 --config.model.init_from=/tmp/hs/sft \
        --config.sft.enabled=False
    python launch/sweep.py --config=experiments/configs/harness_s/grpo_only.py --sweep=seeds \
        --workdir=/tmp/hs/grpo_seeds

Expected result: RESULT
No pool is needed.
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_grpo_only_cpu"
    c.harness_s.rescue.enabled = False    # plain GRPO
    c.harness_s.reanchor.every_steps = 0  # nothing to re-anchor
    return c


SWEEPS = {"seeds": common.seeds()}
