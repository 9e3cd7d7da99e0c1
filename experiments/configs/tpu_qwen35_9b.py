"""tpu_qwen35_9b: Qwen3.5-9B agent GRPO on DBBench, TPU v5p-32 pod slice (16 chips, 95 GB HBM each).

Layout (colocated): the embedded JAX engine shares the learner's parameters on one mesh
(data=1 x fsdp=16); weights update in place after each step (no export). Multi-host: 4 hosts x
4 chips; ``launch/train.py`` calls ``jax.distributed.initialize()`` when the TPU environment says
so, and every host runs the same command.

Command (on every host of the slice)::

    python launch/train.py --config=experiments/configs/tpu_qwen35_9b.py --workdir=gs://$BUCKET/run \
        --config.model.hf_path=$QWEN35_9B

Expected result: not run by this project (no TPU here); the config validates and the train step
lowers for a 16-device fsdp mesh on CPU fake devices with the real parameter shapes
(tests/experiments), reporting per-device memory.

Memory plan: TPU splash attention (causal + segment ids, nothing T x S), remat "full" (each layer
recomputed; its bf16 input kept), weights cast to bf16 on their FSDP shards before the per-layer
all-gather. Static part, exact (N = 8.95e9: embeddings 2 x 248320 x 4096 = 2.03e9, 24 Gated
DeltaNet layers x 218e6 + 8 attention layers x 210e6 = 6.92e9; fsdp=16): fp32 params 2.2 GB +
Adam m, v 4.5 GB + fp32 gradient accumulator 2.2 GB per chip (+2.2 GB per chip for the fp32
reference copy that ``rl.reference_kl``, on by default since 2026-12-02, keeps outside the train
step and the AOT figure). AOT budget: fits (32 GB per device
of the 85.5 GB budget = 95 GB less 10% headroom), from XLA's memory analysis of the train step
compiled for the 16-device mesh at pack_len 8192, full depth, one 8192-token row per chip per
micro-batch (tests/experiments/test_aot.py); that compile is XLA:CPU's (splash replaced by the XLA
flash kernel), which holds bf16 math in fp32: an upper bound for the TPU (42 GB with the layers of a scanned cycle recomputed side by side, before
``model.ordered_remat``; before this plan:
reference attention, dots-saveable remat, fp32 weight gathers, the same compile reported 546 GB).
Engine caches
(colocated): 64 slots x (8 attention layers x 2 x 4 kv x 256 x 16384 x 2 B + 24 GDN layers x 32
heads x 128 x 128 x 4 B) = 37.6 GB, 2.35 GB per chip if split over the 16 chips; the paged KV
pool is today copied on each data shard (docs/sampling.md, "Benchmark"), so a chip holds the whole
34.4 GB pool on top of the train step's 32 GB: within the 85.5 GB budget, not yet measured.
"""
from experiments.configs import common


def get_config():
    c = common.base_config()
    c.name = "tpu_qwen35_9b_dbbench"
    c.num_steps = 300                     # GRPO steps

    c.model.preset = "9b"                 # Qwen3.5-9B shapes (weights from --config.model.hf_path)
    c.model.dtype = "bfloat16"            # bf16 compute
    c.model.param_dtype = "float32"       # fp32 master weights
    c.model.remat = "full"                # recompute each decoder layer in the backward pass (keeps its input)
    c.model.attention = "splash"          # TPU Pallas splash attention: causal + segment ids, nothing T x S
    c.model.scan_layers = True            # one 4-layer cycle scanned 8 times

    c.mesh.shape = (1, 16, 1, 1)          # FSDP over the 16 chips
    c.mesh.num_devices = 16               # v5p-32 = 16 chips
    c.mesh.platform = "tpu"               # TPU v5p
    c.mesh.chip = "v5p"                   # AOT budget: 95 GB per chip

    c.rollout.mode = "colocated"          # embedded JaxEngine on the learner's mesh, in-place weight update
    c.rollout.max_slots = 64              # decode slots
    c.rollout.max_len = 16384             # prompt + 15 rounds
    c.rollout.max_new_tokens = 512        # per turn
    c.rollout.concurrency = 64            # episodes in flight (= slots)

    common.use_dbbench_mariadb(c)         # MariaDB, function calling, 15 rounds, generated tasks

    c.rl.group_size = 8                   # G
    c.rl.tasks_per_step = 64              # 512 episodes per step
    c.rl.micro_batches = 4                # gradient accumulation
    c.rl.mini_batches = 2                 # optimizer steps per rollout batch
    c.rl.pack_len = 8192                  # packed row length
    c.rl.logit_chunk = 1024               # LM head in 1024-position chunks (248k vocab: 1 GB of fp32 logits each)
    c.opt.lr = 5e-7                       # GRPO lr for a 9B model
    c.opt.warmup_steps = 10               # warm-up

    c.ckpt.every_steps = 25               # checkpoint period
    c.ckpt.keep = 3                       # keep-N
    c.eval.every_steps = 25               # periodic eval
    c.eval.num_tasks = 200                # selection tasks
    c.eval.k = 3                          # Pass@3 / Avg@3
    c.eval.temperature = 0.7              # sampled attempts
    c.log.peak_flops = 459e12             # v5p bf16 peak per chip
    c.log.progress_bar = "off"            # batch job
    return c
