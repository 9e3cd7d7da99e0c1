"""The smallest Harness-S configuration: ``tiny_e2e_config`` (the CI-sized main job) with the
``harness_s`` section: rescue on, K=2 helpers, re-anchoring every step on two validation tasks,
evolution of one generation that keeps children solving nothing (a random tiny policy solves
nothing, and the launcher chain must still be exercised end to end).

Used by tests/e2e/test_harness_s_e2e.py through ``launch/evolve.py``, ``launch/train.py`` and
``launch/evaluate.py --routing=rank1`` with the pool as the config argument.
"""
from experiments.configs.harness_s import common
from tests.e2e import tiny_e2e_config


def get_config(pool: str = ""):
    c = common.with_harness_s(tiny_e2e_config.get_config(), pool)
    c.name = "tiny_hs_e2e"
    c.sft.steps = 2
    hs = c.harness_s
    hs.router.name = "validation_topk"
    hs.router.top_k = 2
    hs.validation.num_tasks = 2
    hs.validation.k = 1
    hs.reanchor.every_steps = 1
    hs.evolve.num_train_tasks = 4
    hs.evolve.max_generations = 1
    hs.evolve.max_directions = 2
    hs.evolve.children_per_direction = 2
    hs.evolve.min_failures = 1
    hs.evolve.min_val_solved = 0
    hs.evolve.max_child_evaluations = 4
    return c
