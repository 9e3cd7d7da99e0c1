"""gpu8_qwen35_4b_dbbench: Qwen3.5-4B agent GRPO on DBBench, one node with 8x H100-80GB.

Layout (disaggregated): GPUs 0-3 run the JAX learner (mesh data=1 x fsdp=4), GPUs 4-7 run four
SGLang servers (tp=1 each) that generate the rollouts; weights reach the servers as a Hugging
Face export in ``rollout.sync_dir`` (``update_weights_from_disk``) after every learner step.
Rollouts run asynchronously with at most one batch in flight ahead of the learner.

Commands::

    # 1) four SGLang servers (see harness_jax/sampling docs for the RL flags)
    for i in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$((4+i)) python -m sglang.launch_server \
        --model-path $QWEN35_4B --port $((30000+i)) --disable-radix-cache & done
    # 2) the learner
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/train.py \
        --config=experiments/configs/gpu8_qwen35_4b_dbbench.py --workdir=$WORKDIR \
        --config.model.hf_path=$QWEN35_4B

Expected result: not run by this project (no GPU here); the config validates and its train step
lowers for a 4-device fsdp mesh on CPU fake devices (tests/experiments). The target is the
Harness-S GRPO baseline on DBBench (success rises over ~200 steps from the base model's).

The shape used without ``hf_path`` is our ~4B estimate (hidden 2560, 32 layers, SwiGLU 9216,
tied embeddings; attention and Gated DeltaNet heads as the 9B): the public Qwen3.5-4B
config.json is not available offline here, and with ``--config.model.hf_path`` the checkpoint's
own config.json replaces it.

Memory plan: Pallas (Triton) flash attention with segment ids (nothing T x S), remat "full"
(each layer recomputed; its bf16 input kept), weights cast to bf16 on their FSDP shards before
the per-layer all-gather, fp32 gradient reduction. AOT budget: fits (39 GB per device of the
72 GB budget = 80 GB less 10% headroom), from XLA's memory analysis of the train step compiled for
the 4-device mesh at pack_len 8192, full depth, one 8192-token row per device per micro-batch
(tests/experiments/test_aot.py; 49 GB before remat "full" recomputed the layers of a scanned cycle
one at a time, ``model.ordered_remat``). That compile is XLA:CPU's (the Pallas kernel replaced by the XLA
flash kernel, same memory class), which holds bf16 math in fp32: an upper bound for the GPU.
Before this plan (reference attention materialising fp32 [B, K, G, T, S] scores, dots-saveable
remat, fp32 weight gathers) the same compile reported 158 GB.
Static part, exact: fp32 params 4.2 GB + Adam m, v 8.4 GB + fp32 gradient accumulator 4.2 GB per
GPU (N = 4.2e9, fsdp=4). With ``rl.reference_kl`` (on by default since 2026-12-02) the learner also keeps an fp32 copy of
the starting parameters on the same shards, outside the train step: +4.2 GB per GPU, not in
the AOT figure above.
"""
from experiments.configs import common


def get_config():
    c = common.base_config()
    c.name = "gpu8_qwen35_4b_dbbench"
    c.num_steps = 200                     # GRPO steps

    c.model.preset = "9b"                 # Qwen3.5 family defaults, resized below to ~4B
    # ~4B Qwen3.5 shape for validation/AOT without weights; with --config.model.hf_path the
    # checkpoint's config.json is used instead
    c.model.arch.hidden_size = 2560       # model width
    c.model.arch.intermediate_size = 9216  # SwiGLU width
    c.model.arch.num_hidden_layers = 32   # 8 cycles of 3 Gated DeltaNet + 1 gated attention
    c.model.arch.tie_word_embeddings = True  # small Qwen models tie the LM head
    c.model.dtype = "bfloat16"            # bf16 compute
    c.model.param_dtype = "float32"       # fp32 master weights
    c.model.remat = "full"                # recompute each decoder layer in the backward pass (keeps its input)
    c.model.attention = "pallas_gpu"      # Pallas (Triton) flash attention: causal + segment ids, nothing T x S
    c.model.scan_layers = True            # compile one 4-layer cycle, scanned 8 times

    c.mesh.shape = (1, 4, 1, 1)           # learner: 4 GPUs, FSDP
    c.mesh.num_devices = 4                # CUDA_VISIBLE_DEVICES=0,1,2,3
    c.mesh.platform = "gpu"               # H100-80GB
    c.mesh.chip = "h100"                  # AOT budget: 80 GB per GPU

    c.rollout.mode = "disaggregated"      # SGLang servers on GPUs 4-7
    c.rollout.server_urls = ("http://127.0.0.1:30000", "http://127.0.0.1:30001",
                             "http://127.0.0.1:30002", "http://127.0.0.1:30003")  # one per GPU
    c.rollout.sync_every = 1              # export + update_weights_from_disk after every step
    c.rollout.max_new_tokens = 512        # SQL + reasoning per turn
    c.rollout.concurrency = 256           # episodes in flight across the 4 servers
    c.rollout.max_len = 16384             # prompt + 15 rounds

    common.use_dbbench_mariadb(c)         # MariaDB, function calling, 15 rounds, generated tasks

    c.rl.group_size = 8                   # G
    c.rl.tasks_per_step = 32              # 256 episodes per step
    c.rl.micro_batches = 8                # gradient accumulation
    c.rl.mini_batches = 2                 # two optimizer steps per rollout batch
    c.rl.pack_len = 8192                  # packed row length
    c.rl.logit_chunk = 1024               # LM head in 1024-position chunks (248k vocab: 1 GB of fp32 logits each)
    c.rl.async_mode = True                # rollouts overlap training
    c.rl.max_staleness = 1                # at most one batch ahead
    c.opt.lr = 1e-6                       # GRPO lr for a 4B model
    c.opt.warmup_steps = 10               # warm-up
    c.opt.schedule = "constant"           # constant after warm-up

    c.ckpt.every_steps = 20               # checkpoint period
    c.ckpt.keep = 3                       # keep-N
    c.eval.every_steps = 20               # periodic eval on the selection split
    c.eval.num_tasks = 200                # selection tasks
    c.eval.k = 3                          # Pass@3 / Avg@3 (the paper's metrics)
    c.eval.temperature = 0.7              # sampled attempts
    c.log.peak_flops = 989e12             # H100 SXM bf16 dense peak per GPU
    c.log.progress_bar = "off"            # batch job
    return c
