"""harness_s/fixed_profiles: the router's statistics and behaviour profiles frozen at evolution
time (no re-anchoring), against ``dbbench_cpu``'s re-anchoring every 6 steps (once in its 12
steps, after step 6).

Command (pool and warm start from ``dbbench_cpu``'s steps 1-2)::

    python launch/train.py --config=experiments/configs/harness_s/fixed_profiles.py:$POOL \
        --workdir=/tmp/hs/fixed_profiles

Expected result: not measured yet. No ``reanchor/*`` metrics and no re-anchor records in the
routing log; as the policy changes, the ``features`` router keeps the success models and offline
profiles fitted on the pool's original validation results, so ``rescue/success_rate`` should fall
behind the re-anchored run once the policy has
moved (that is the claim the comparison tests).
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_fixed_profiles_cpu"
    c.harness_s.reanchor.every_steps = 0  # profiles and statistics stay the pool's
    return c


SWEEPS = {"seeds": common.seeds()}
