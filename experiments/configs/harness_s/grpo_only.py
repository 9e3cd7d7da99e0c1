"""harness_s/grpo_only: the GRPO-only control of the Harness-S CPU runs: ``dbbench_cpu`` with
rescue, routing and re-anchoring off (same model, data, SFT warm start, budget and evaluation).

Commands::

    # the shared SFT warm start (cached in sft.cache_dir for every config of this directory)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/sft --config.num_steps=0
    # the control
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py --workdir=/tmp/hs/grpo
    python launch/sweep.py --config=experiments/configs/harness_s/grpo_only.py --sweep=seeds \
        --workdir=/tmp/hs/grpo_seeds

Expected result: the tiny_cpu main job's (docs/training.md): 0/32 held-out success after SFT and
after GRPO, ``groups/zero_variance_fraction`` 1.0 on every step (every group fails, every
advantage is 0); the point of comparison for ``dbbench_cpu``'s zero-variance fraction, rescue
statistics and held-out H0 success. No pool is needed.
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_grpo_only_cpu"
    c.harness_s.rescue.enabled = False    # plain GRPO
    c.harness_s.reanchor.every_steps = 0  # nothing to re-anchor
    return c


SWEEPS = {"seeds": common.seeds()}
