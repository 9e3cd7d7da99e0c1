"""harness_s/dbbench_gpu8: Harness-S on DBBench with Qwen3.5-4B, one node with 8x H100-80GB
(``gpu8_qwen35_4b_dbbench``'s layout: learner on GPUs 0-3, four SGLang servers on GPUs 4-7,
async with staleness <= 1) plus rescue by a frozen pool with Top-8 helpers chosen by the offline
``features`` router (``--config.harness_s.router.name=hybrid`` with voters configured: features,
then LLM votes where they cannot separate), re-anchored every 25 steps.

Commands::

    # the four SGLang servers exactly as in gpu8_qwen35_4b_dbbench, then
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/evolve.py \
        --config=experiments/configs/harness_s/dbbench_gpu8.py --workdir=$WORK/evolve \
        --config.model.hf_path=$QWEN35_4B --checkpoint=$QWEN35_4B
    POOL=$(ls $WORK/evolve/pool/pool-*.json)
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/train.py \
        --config=experiments/configs/harness_s/dbbench_gpu8.py:$POOL --workdir=$WORK/run \
        --config.model.hf_path=$QWEN35_4B
    python launch/evaluate.py --config=experiments/configs/harness_s/dbbench_gpu8.py:$POOL \
        --workdir=$WORK/eval --checkpoint=$WORK/run --routing=rank1 --k=3 --split=test

Expected result: not run by this project (no GPU here); the config validates and its train step
lowers for the 4-device fsdp mesh on CPU fake devices (tests/harness_s/test_configs.py). The
target: held-out Pass@3/Avg@3 under H0 above the GRPO-only run (``--config.harness_s.rescue.
enabled=False``) of the same budget; rescue success rates per training stage in ``rescue/*``.

Memory: the train step and AOT budget of ``gpu8_qwen35_4b_dbbench`` (its docstring); rescue adds rollouts
on the servers, not learner memory (a rescued group keeps G=8 episodes with ``split``).
Voters: set ``--config.harness_s.router.votes.voters`` (and export their key variables); with
none, use ``--config.harness_s.router.name=features``.
"""
from experiments.configs import gpu8_qwen35_4b_dbbench
from experiments.configs.harness_s import common


def get_config(pool: str = ""):
    c = common.with_harness_s(gpu8_qwen35_4b_dbbench.get_config(), pool)
    c.name = "hs_dbbench_gpu8"
    hs = c.harness_s
    hs.router.name = "features"           # offline router, no LLM (the schema's default is validation_topk); "hybrid"/"llm_vote" with voters configured
    hs.router.top_k = 8                   # the papers' best K
    hs.rescue.split = "split"             # G=8 attempts over the 8 helpers
    hs.validation.num_tasks = 128         # validation tasks (evolution and re-anchoring)
    hs.validation.k = 3                   # attempts per validation task
    hs.reanchor.every_steps = 25          # re-anchored profiles
    hs.evolve.num_train_tasks = 256       # fresh training tasks for the repair directions
    hs.evolve.max_generations = 3         # generations
    hs.evolve.max_child_evaluations = 48  # children evaluated
    hs.evolve.min_val_solved = 2          # a child must solve at least this many validation tasks
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_rescue": common.seeds_x("harness_s.rescue.enabled", (True, False)),
    "seeds_x_router": common.seeds_x("harness_s.router.name", ("features", "validation_topk", "random")),
}
