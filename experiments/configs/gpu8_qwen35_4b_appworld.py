"""gpu8_qwen35_4b_appworld: Qwen3.5-4B agent GRPO on AppWorld, one node with 8x H100-80GB.

The DBBench GPU preset (``gpu8_qwen35_4b_dbbench``: learner on GPUs 0-3, four SGLang servers on
GPUs 4-7, same model, mesh and memory arithmetic) with the environment swapped for AppWorld on
its real runtime: generated tasks (``harness_jax.envs.appworld.generate_tasks``; or a real data
bundle with ``--config.env.appworld.data_dir=/path/to/data``), the function protocol
(``execute_python`` code cells), AppWorld's ReAct-style H0, 40 cells per episode. Rollout
concurrency is bounded by the AppWorld service's workers (one process per live episode).

Commands::

    HARNESS_JAX_APPWORLD_WORKERS=64 bash scripts/appworld.sh start
    # the four SGLang servers exactly as in gpu8_qwen35_4b_dbbench, then:
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/train.py \
        --config=experiments/configs/gpu8_qwen35_4b_appworld.py --workdir=$WORKDIR \
        --config.model.hf_path=$QWEN35_4B

Expected result: not run by this project (no GPU here); the config validates (the train step is
the DBBench preset's, which lowers for the 4-device fsdp mesh on CPU fake devices). The target
is the Harness-S GRPO baseline on AppWorld (TGC on the selection split rises from the base
model's).

Memory arithmetic: AppWorld episodes are longer (the ReAct instruction is ~1.3k tokens and API outputs are
long), so rows are packed at 16384 tokens, one row per GPU per micro-batch; the memory plan is
``gpu8_qwen35_4b_dbbench``'s (Pallas flash attention, remat "full", bf16 weight gathers). AOT
budget: fits (51 GB per device of the 72 GB budget = 80 GB less 10% headroom; 71.7 GB
before remat "full" recomputed one layer at a time), from XLA's memory analysis of the train step compiled for the
4-device mesh at pack_len 16384, full depth (tests/experiments/test_aot.py); XLA:CPU holds bf16
math in fp32, so the figure is an upper bound for the GPU. The harness_s AppWorld and SWE presets
compile the same step. With ``rl.reference_kl`` (on by default since 2026-12-02) the learner also keeps an fp32 copy of
the starting parameters on the same shards, outside the train step: +4.2 GB per GPU, not in
the AOT figure above.
"""
from experiments.configs import gpu8_qwen35_4b_dbbench


def get_config():
    c = gpu8_qwen35_4b_dbbench.get_config()
    c.name = "gpu8_qwen35_4b_appworld"
    c.env.name = "appworld"               # harness_jax.envs.appworld on AppWorld's own runtime
    c.env.protocol = "function"           # code cells as execute_python tool calls
    c.env.appworld.max_interactions = 40  # AppWorld's cell budget per episode
    c.env.appworld.timeout_seconds = 30   # per-cell limit (whole seconds)
    c.env.num_tasks = 1200                # generated tasks per split (400 scenarios x 3 variants; built once, cached)
    c.env.task_seed = 0                   # generator stream
    c.env.max_turns = 40                  # one cell per turn
    c.rollout.max_new_tokens = 1024       # reasoning + one code cell per turn
    c.rollout.max_len = 32768             # the ReAct prompt + 40 cells with their outputs
    c.rollout.concurrency = 64            # = HARNESS_JAX_APPWORLD_WORKERS: one worker per live episode
    c.rl.pack_len = 16384                 # long episodes
    c.rl.micro_batches = 16               # one row per micro-batch at 16k tokens
    c.eval.num_tasks = 150                # selection tasks (50 scenarios: TGC and SGC)
    return c
