"""harness_s/hs_no_rewrites: the Harness-S method (``dbbench_cpu``) routing only over H0 and the
siblings that never rewrite or force an action (``harness_s.pool_siblings="no_action_rewrites"``,
issue 25 item 6): every rescued success is then made of the policy's own actions (guards that
block, hints, prompts and worked examples stay), so the credit question of ``answer_from_result``
does not arise. Everything else is dbbench_cpu's (K=2 helpers: config validation says so when the
filtered pool holds fewer).

Commands::

    python launch/main.py --arms=grpo,harness_s,hs_no_rewrites
    python launch/train.py --config=experiments/configs/harness_s/hs_no_rewrites.py:$POOL \
        --workdir=/tmp/hs/norewrite-s0 --config.model.init_from=/tmp/hs/sft --config.sft.enabled=False

Expected result: not measured yet (pending; the console's first line says how many siblings were
left out; compare held-out H0 Avg@4 with ``dbbench_cpu``'s, paired by (seed, task)).
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_no_rewrites_cpu"
    c.harness_s.pool_siblings = "no_action_rewrites"  # H0 + siblings that never rewrite or force actions
    return c


SWEEPS = {"seeds": common.seeds()}
