"""harness_s/swe_gpu8: Harness-S on SWE-Gym-style repository repair (generated bug-injected
corpus projects, sandboxed bash/editor tools, FAIL_TO_PASS/PASS_TO_PASS grading) with
Qwen3.5-4B, 8x H100-80GB in ``gpu8_qwen35_4b_dbbench``'s layout, plus rescue with Top-8 helpers
from a frozen SWE pool, re-anchored every 25 steps.

Commands::

    # the four SGLang servers as in gpu8_qwen35_4b_dbbench, then
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/evolve.py \
        --config=experiments/configs/harness_s/swe_gpu8.py --workdir=$WORK/evolve \
        --config.model.hf_path=$QWEN35_4B --checkpoint=$QWEN35_4B
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/train.py \
        --config=experiments/configs/harness_s/swe_gpu8.py:$POOL --workdir=$WORK/run \
        --config.model.hf_path=$QWEN35_4B

Expected result: not run by this project (no GPU here); the config validates and lowers like the
DBBench preset (tests/harness_s/test_configs.py). Target: resolved rate on held-out instances
under H0 above GRPO alone. Memory: episodes of up to 50 tool calls with long file views are
packed at 16384 tokens with one row per micro-batch (the AppWorld preset's train step and AOT
budget); G=8 x 16 tasks per step because each episode runs a sandboxed test suite.
"""
from experiments.configs import gpu8_qwen35_4b_dbbench
from experiments.configs.harness_s import common


def get_config(pool: str = ""):
    c = common.with_harness_s(gpu8_qwen35_4b_dbbench.get_config(), pool)
    c.name = "hs_swe_gpu8"
    c.env.name = "swe"                    # harness_jax.envs.swe (SWE-Gym-style repair)
    c.env.protocol = "function"           # bash / editor tool calls
    c.env.swe.max_steps = 50              # tool calls per episode
    c.env.num_tasks = 2000                # generated instances per split
    c.env.max_turns = 50                  # one tool call per turn
    c.rollout.max_new_tokens = 1024       # reasoning + one tool call per turn
    c.rollout.max_len = 32768             # the issue, file views and test output
    c.rollout.concurrency = 64            # sandboxed episodes in flight
    c.rl.tasks_per_step = 16              # G=8 x 16 instances per step
    c.rl.pack_len = 16384                 # long episodes
    c.rl.micro_batches = 16               # one row per micro-batch at 16k tokens
    c.eval.num_tasks = 100                # held-out instances
    hs = c.harness_s
    hs.router.name = "features"           # offline router, no LLM (the schema's default is validation_topk)
    hs.router.top_k = 8                   # the papers' best K
    hs.validation.num_tasks = 64          # validation instances
    hs.validation.k = 2                   # attempts per validation instance
    hs.reanchor.every_steps = 25          # re-anchored profiles
    hs.evolve.num_train_tasks = 128       # fresh training instances
    hs.evolve.max_generations = 3         # generations
    hs.evolve.max_child_evaluations = 40  # children evaluated
    return c


SWEEPS = {
    "seeds": common.seeds(),
    "seeds_x_rescue": common.seeds_x("harness_s.rescue.enabled", (True, False)),
}
