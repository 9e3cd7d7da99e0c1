"""harness_s/fixed_mixture: the fixed-harness-mixture baseline: every task's group is rolled out
under a harness drawn from a fixed distribution over the whole pool (H0 included; uniform unless
``harness_s.selector.weights`` says otherwise), with no rescue and no routing.

Command (the pool and the SFT warm start from ``dbbench_cpu``'s steps 1-2)::

    python launch/train.py --config=experiments/configs/harness_s/fixed_mixture.py:$POOL \
        --workdir=/tmp/hs/mixture

Expected result: not measured yet. Training rollouts mix harnesses (``rollout/episodes_by_sibling/*``
spread over the pool) and nothing is rescued (no ``rescue/*`` metrics); held-out evaluation is
under H0, like every config here, so the comparison with ``dbbench_cpu`` shows whether
*selective* help (routed rescue of failed groups) beats indiscriminate mixing.
"""
from experiments.configs.harness_s import common, dbbench_cpu


def get_config(pool: str = ""):
    c = dbbench_cpu.get_config(pool)
    c.name = "hs_fixed_mixture_cpu"
    c.harness_s.rescue.enabled = False    # no rescue ...
    c.harness_s.selector.name = "mixture"  # ... groups rolled out under a fixed mixture of harnesses
    c.harness_s.reanchor.every_steps = 0  # no router to re-anchor
    return c


SWEEPS = {"seeds": common.seeds()}
