"""harness_s/appworld_gpu8: Harness-S on AppWorld with Qwen3.5-4B, 8x H100-80GB
(``gpu8_qwen35_4b_appworld``: the DBBench GPU layout on AppWorld's real runtime, ReAct H0, 40
code cells per episode) plus rescue with Top-8 helpers from a frozen AppWorld pool, re-anchored
every 25 steps.

Commands::

    HARNESS_JAX_APPWORLD_WORKERS=64 bash scripts/appworld.sh start
    # the four SGLang servers as in gpu8_qwen35_4b_dbbench, then
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/evolve.py \
        --config=experiments/configs/harness_s/appworld_gpu8.py --workdir=$WORK/evolve \
        --config.model.hf_path=$QWEN35_4B --checkpoint=$QWEN35_4B
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/train.py \
        --config=experiments/configs/harness_s/appworld_gpu8.py:$POOL --workdir=$WORK/run \
        --config.model.hf_path=$QWEN35_4B

Expected result: not run by this project (no GPU here); the config validates and lowers like the
DBBench preset (tests/harness_s/test_configs.py). Target: TGC on the selection split under H0
above the GRPO-only run of the same budget. Validation episodes are long (40 cells), so
validation uses 64 tasks x 2 attempts and re-anchoring runs every 25 steps.
"""
from experiments.configs import gpu8_qwen35_4b_appworld
from experiments.configs.harness_s import common


def get_config(pool: str = ""):
    c = common.with_harness_s(gpu8_qwen35_4b_appworld.get_config(), pool)
    c.name = "hs_appworld_gpu8"
    hs = c.harness_s
    hs.router.name = "features"           # offline router, no LLM (the schema's default is validation_topk)
    hs.router.top_k = 8                   # the papers' best K
    hs.validation.num_tasks = 64          # validation tasks (long episodes)
    hs.validation.k = 2                   # attempts per validation task
    hs.reanchor.every_steps = 25          # re-anchored profiles
    hs.evolve.num_train_tasks = 128       # fresh training tasks
    hs.evolve.max_generations = 3         # generations
    hs.evolve.max_child_evaluations = 40  # children evaluated
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_rescue": common.seeds_x("harness_s.rescue.enabled", (True, False)),
}
