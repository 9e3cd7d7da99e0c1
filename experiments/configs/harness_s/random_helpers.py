"""harness_s/random_helpers: the random-helpers ablation: rescue as in ``dbbench_cpu``, but the K
helpers are a seeded random draw from the pool instead of the router's choice.

Command (pool and warm start from ``dbbench_cpu``'s steps 1-2)::

    python launch/train.py --config=experiments/configs/harness_s/random_helpers.py:$POOL \
        --workdir=/tmp/hs/random

Expected result: not measured yet. The same trigger rate as ``dbbench_cpu`` (triggering does not
depend on the router) and, where the pool's siblings differ in which failures they fix, a lower
``rescue/success_rate`` than routed helpers; the routing log shows the random Top-K.
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_random_helpers_cpu"
    c.harness_s.router.name = "random"    # seeded random helpers
    c.harness_s.reanchor.every_steps = 0  # a random router uses no statistics
    return c


SWEEPS = {"seeds": common.seeds()}
