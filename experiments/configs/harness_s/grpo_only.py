"""harness_s/grpo_only: the GRPO-only control of the Harness-S CPU runs: ``dbbench_cpu`` with
rescue, routing and re-anchoring off (same learnable task family, model, SFT warm start, budget
and evaluation).

Commands::

    # the shared SFT warm start (cached in sft.cache_dir for every config of this directory)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/sft --config.num_steps=0 --config.eval.at_start=False
    # the control, one seed, from that warm start (dbbench_cpu's docstring: all steps)
    python launch/train.py --config=experiments/configs/harness_s/grpo_only.py \
        --workdir=/tmp/hs/grpo-s0 --config.seed=0 --config.model.init_from=/tmp/hs/sft \
        --config.sft.enabled=False
    python launch/sweep.py --config=experiments/configs/harness_s/grpo_only.py --sweep=seeds \
        --workdir=/tmp/hs/grpo_seeds

Expected result (measured, 3 seeds, 2 loaded CPU cores; docs/harness_s.md "CPU
demonstration"): 4-6.5 min per run; zero-variance fraction 0.64 ± 0.06 per step (the groups
``dbbench_cpu`` rescues); held-out H0 Avg@4 0.102 at step 0, 0.125 at step 6, 0.078 ± 0.004 at
step 12, i.e. no change against the warm start on the same sampling stream (0.000 ± 0.004).
Measured 2026-11-30, before ``rl.skip_no_signal``/``rl.reference_kl`` became defaults and
evaluation sampling was keyed by (task, attempt) (2026-12-02); not re-measured since.
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
