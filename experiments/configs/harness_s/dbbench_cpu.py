"""DOC"""
from experiments.configs import cpu_learnable
from experiments.configs.harness_s import common

ROUTERS = ("features", "validation_topk", "random")


def get_config(pool: str = ""):
    c = common.with_harness_s(cpu_learnable.get_config(), pool)
    c.name = "hs_dbbench_cpu"
    c.num_steps = 20                      # GRPO steps after the warm start
    c.sft.cache_dir = "~/.cache/harness_jax/sft"  # one warm start for the method and its baselines
    c.eval.every_steps = 10               # held-out H0 evaluation at steps 0, 10 and 20
    c.eval.num_tasks = 64                 # held-out selection tasks (Avg@4 at T=1)
    hs = c.harness_s
    hs.rescue.enabled = True              # rescue all-failed H0 groups
    hs.rescue.split = "split"             # the G=8 attempts shared by the K helpers
    hs.rescue.calibration = "with_original"  # originals in the statistics: an all-success rescue teaches
    hs.router.name = "features"           # offline router: per-sibling success models on H0-failure features
    hs.router.top_k = 2                   # helpers per rescue (4 attempts each)
    hs.validation.split = "search"        # validation tasks of evolution and re-anchoring
    hs.validation.num_tasks = 16          # small: re-anchoring runs every sibling on each
    hs.validation.k = 2                   # attempts per validation task
    hs.reanchor.every_steps = 10          # re-anchored profiles and statistics (once, at step 10)
    hs.evolve.num_train_tasks = 32        # fresh training tasks for the repair directions
    hs.evolve.max_generations = 2         # generations of children
    hs.evolve.children_per_direction = 4  # every deterministic operator of a direction (at most 4 per direction)
    hs.evolve.max_child_evaluations = 16  # children evaluated on validation
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_router": common.seeds_x("harness_s.router.name", ROUTERS),
}
