"""harness_r1/gpu8: Qwen3.5-9B engineer, SFT then GRPO, one node with 8x H100-80GB.

Benchmark by argument: ``gpu8.py:dbbench`` (default), ``gpu8.py:alfworld``, ``gpu8.py:webshop``.

Layout (everything served by SGLang): GPUs 0-3 run the JAX learner of the ENGINEER (mesh data=1
x fsdp=1 x tensor=4); GPUs 4-5 run two SGLang servers of the engineer (its K=8 samples per packet; weights
reach them as an HF export after every step, ``update_weights_from_disk``); GPUs 6-7 run two
SGLang servers of the frozen TARGET (Qwen3.5-9B; the reruns of every patch). The target's servers
are pinned at their ``weight_version``: a weight update aimed at them raises. Reward evaluations
run on an ``EvaluationPool`` of 8 processes (HTTP clients of the target servers). GRPO is
asynchronous with staleness <= 4 (the reward is the long pole, docs/harness_r1.md section 8).

Commands::

    # engineer servers (GPUs 4-5) and target servers (GPUs 6-7)
    for i in 0 1; do CUDA_VISIBLE_DEVICES=$((4+i)) python -m sglang.launch_server \
        --model-path $QWEN35_9B --port $((30000+i)) --disable-radix-cache & done
    for i in 0 1; do CUDA_VISIBLE_DEVICES=$((6+i)) python -m sglang.launch_server \
        --model-path $QWEN35_9B --port $((31000+i)) --served-model-name qwen3.5-9b-target & done
    # the pipeline: baselines -> packets -> SFT data (a teacher endpoint) -> SFT -> GRPO
    CUDA_VISIBLE_DEVICES=0,1,2,3 python launch/engineer.py \
        --config=experiments/configs/harness_r1/gpu8.py:dbbench --workdir=$WORKDIR \
        --config.model.hf_path=$QWEN35_9B \
        --config.r1.teacher.base_url=$TEACHER_URL --config.r1.teacher.model=$TEACHER_MODEL \
        --config.r1.teacher.api_key_env=TEACHER_API_KEY
    # the table on held-out packets (then --split=test for the final numbers)
    python launch/evaluate_engineer.py --config=experiments/configs/harness_r1/gpu8.py:dbbench \
        --workdir=$WORKDIR --split=held_out

Expected result: not run by this project (no GPU here); the config validates and the engineer's
GRPO train step compiles for the 4-device tensor-parallel mesh on CPU fake devices
(tests/harness_r1/test_r1_configs.py). The paper's figures for this setting: equal-weight mean
success over WebShop, ALFWorld and DBBench of a vanilla Qwen3.5-9B target 44.3% -> 53.6% with the
trained engineer. Cost per GRPO step: docs/harness_r1.md section 8 (K x n = 80 target episodes
per packet, 4 packets).

Memory plan: tensor parallelism over the 4 GPUs (mesh data=1 x fsdp=1 x tensor=4). Every matmul
weight is split 4 ways (attention heads, MLP width, Gated DeltaNet channels, vocabulary) and never
gathered; the layer inputs are split over the hidden dim between layers (``mesh.rules``:
``activation_embed`` -> tensor); one 32768-token row per micro-batch runs on all four GPUs (32
micro-batches of one row = K=8 x 4 packets). Pallas (Triton) flash attention with segment ids
(nothing T x S; one kv head per GPU), remat "offload" (each layer recomputed; its input in pinned
host memory), bf16 compute. Static part, exact (N = 8.95e9 over 4 GPUs): fp32 params 9.0 GB +
Adam m, v 17.9 GB (the arguments, 26.9 GB) + fp32 gradient accumulator 9.0 GB + one micro-batch's
fp32 gradient 9.0 GB. No fp32 reference copy: ``rl.reference_kl`` is off here (it would keep 9.0 GB
per GPU outside the train step and the AOT figure, 65 + 9 = 74 GB > 72; with ``rl.kl_coef`` 0
the copy only logs ``learner/kl_to_ref``).
AOT budget: fits (65 GB per device against the 72 GB budget = 80 GB less 10% headroom), from XLA's memory analysis of the train step compiled for the
4-device mesh at pack_len 32768, full depth (tests/experiments/test_aot.py): arguments 26.95 GB +
temporaries 37.96 GB = 64.9 GB. Measured at 8k / 16k / 32k: 50.7 / 55.5 / 64.9 GB, i.e. 46.0 GB
T-independent (arguments 26.9, accumulator 9.0, micro-batch gradient 9.0, the rest ~1) + 0.58 MB
per token (the 32 layer inputs, 32 x 32768 x 1024 x 4 B = 4.3 GB as XLA:CPU keeps them, plus one
layer's recomputation and backward, ~14.6 GB at 32k). That compile is XLA:CPU's: it holds bf16
math and the bf16 copies of dot operands in fp32 and keeps the offloaded layer inputs on the
device, so the figure is an upper bound. Without the ``activation_embed`` rule the same mesh
measured 51.5 / 57.3 GB at 8k / 16k (~69 GB at 32k by the same slope: 3 GB of margin); the layer
inputs split over the sequence instead (sequence parallelism) measured 60.1 GB at 16k.

Before (mesh fsdp=4, 8 micro-batches of one row per GPU, weights cast to bf16 on their shards and
gathered per layer): 112 GB per device, does not fit (111.7 = arguments 26.9 + temporaries 84.8;
measured at 2k / 8k / 16k / 32k: 59.4 / 66.6 / 81.8 / 111.7 GB, i.e. ~51 GB T-independent:
arguments 26.9, accumulator 9.0, micro-batch gradient 9.0, the LM head gathered whole in bf16
2.0 and its whole fp32 gradient 4.1 before the reduce-scatter (buffer shapes of XLA's report);
+ 1.84 MB per token: the 32 whole layer inputs, 32 x 32768 x 4096 x 4 B = 17.2 GB, and one
layer's recomputation and backward at full width with the LM head's logits chunks, ~43 GB at
32k). Tensor parallelism divides the layer inputs by 4 and one layer's activations by ~3, and
splits the LM head over the vocabulary instead of gathering it. 157 GB before remat "full" recomputed the layers of a scanned
cycle one at a time (``model.ordered_remat``); 907 GB before the attention / remat / gather plan.
"""

from experiments.configs import common
from experiments.configs.harness_r1 import common as r1_common
from harness_jax import sharding

BENCHMARKS = ("dbbench", "alfworld", "webshop")


def use_benchmark(c, benchmark: str) -> None:
    """The target's benchmark (shared by the accelerator presets)."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"benchmark {benchmark!r}: use one of {BENCHMARKS} (e.g. gpu8.py:alfworld)")
    if benchmark == "dbbench":
        common.use_dbbench_mariadb(c)     # MariaDB, function calling, 15 rounds
        c.env.max_turns = 20              # the published rerun limit (20 rounds)
        c.env.dbbench.max_rounds = 20     # the published rerun limit
    elif benchmark == "alfworld":
        c.env.name = "alfworld"           # ALFWorld (generated games; real ones via env.alfworld.data_dir)
        c.env.protocol = "text"           # admissible commands as text
        c.env.max_turns = 50              # the published rerun limit
        c.env.num_tasks = 2000            # generated games per split
        c.r1.target.concurrency = 1       # ALFWorld's engine is not thread-safe: one episode per process
        c.r1.pool_workers = 16            # ... so reruns spread over 16 processes
    else:
        c.env.name = "webshop"            # WebShop
        c.env.protocol = "function"       # search / click tools
        c.env.max_turns = 20              # the published rerun limit (20 rounds)
        c.env.num_tasks = 2000            # goals per split
    c.env.train_split = "train"           # train packets
    c.env.eval_split = "selection"        # held-out packets (the table's --split=test opens the sealed test split)


def get_config(benchmark: str = "dbbench"):
    c = r1_common.engineer_config()
    c.name = f"r1_gpu8_qwen35_9b_{benchmark}"
    c.num_steps = 174                     # the published RL recipe: 174 rollout steps

    c.model.preset = "9b"                 # engineer shapes (weights from --config.model.hf_path)
    c.model.dtype = "bfloat16"            # bf16 compute
    c.model.param_dtype = "float32"       # fp32 master weights
    c.model.remat = "offload"             # recompute each layer; its input waits in pinned host memory
    c.model.attention = "pallas_gpu"      # Pallas (Triton) flash attention: causal + segment ids, nothing T x S
    c.model.scan_layers = True            # one cycle scanned

    c.mesh.shape = (1, 1, 4, 1)           # learner: 4 GPUs, tensor parallel (heads, MLP, vocab, GDN channels split 4 ways)
    c.mesh.rules = sharding.with_rules(activation_embed="tensor")  # layer inputs split over the hidden dim between layers
    c.mesh.num_devices = 4                # CUDA_VISIBLE_DEVICES=0,1,2,3
    c.mesh.platform = "gpu"               # H100-80GB
    c.mesh.chip = "h100"                  # AOT budget: 80 GB per GPU

    c.rollout.mode = "disaggregated"      # engineer samples from SGLang on GPUs 4-5
    c.rollout.server_urls = ("http://127.0.0.1:30000", "http://127.0.0.1:30001")  # engineer servers
    c.rollout.sync_every = 1              # export + update_weights_from_disk after every step
    c.rollout.max_new_tokens = 12288      # the published response budget
    c.rollout.max_len = 32768             # packet (~18k) + system prompt + response
    c.rollout.temperature = 1.0           # engineer sampling temperature
    c.rollout.concurrency = 64            # (agent episodes; the engineer sends K x packets requests)

    t = c.r1.target
    t.kind = "sglang"                     # the frozen target on SGLang (GPUs 6-7)
    t.urls = ("http://127.0.0.1:31000", "http://127.0.0.1:31001")  # target servers
    t.model = "qwen3.5-9b-target"         # served model name
    t.options.max_concurrency = 64       # client: requests in flight
    t.options.timeout_s = 600.0          # client: per-request timeout
    t.temperature = 0.0                   # greedy reruns (the public code: the target re-runs greedily)
    t.max_new_tokens = 4096               # the published per-call limit, thinking off
    t.max_context = 32768                 # target context
    t.concurrency = 10                    # the published target concurrency per rerun
    p = c.r1.packets
    p.train_batches = 400                 # ~1,500 packets over the three benchmarks in the paper
    p.held_out_batches = 40               # held-out packets
    p.batch_size = 10                     # n = 10 tasks per batch
    p.budget_tokens = 18000               # the published packet budget
    c.r1.teacher.kind = "endpoint"        # a strong teacher model (give base_url / model / api_key_env)
    c.r1.teacher.base_url = "http://127.0.0.1:32000/v1"  # placeholder: the teacher's endpoint
    c.r1.teacher.model = "teacher"        # placeholder: its model name
    c.r1.teacher.k = 2                    # two teacher patches per packet
    c.r1.pool_workers = 8                 # reward evaluations on 8 processes
    c.r1.tokenizer_max_token_bytes = 0    # (task_bpe only; the engineer uses the Qwen3.5 vocabulary)
    use_benchmark(c, benchmark)

    c.rl.group_size = 8                   # K
    c.rl.tasks_per_step = 4               # packets per step (32 responses)
    c.rl.micro_batches = 32               # one 32k row per micro-batch, on all 4 GPUs
    c.rl.mini_batches = 1                 # one optimizer step per rollout batch
    c.rl.pack_len = 32768                 # one engineer sequence per row
    c.rl.pack_buckets = (16384,)          # shorter rows when the batch allows
    c.rl.logit_chunk = 1024               # LM head in 1024-position chunks
    c.rl.reference_kl = False             # no kl_to_ref log: its fp32 reference copy (9 GB per GPU) would not fit beside the step
    c.rl.async_mode = True                # rewards overlap training
    c.rl.max_staleness = 4                # the method's bound
    c.opt.lr = 1e-6                       # GRPO lr
    c.opt.weight_decay = 0.1              # AdamW
    c.sft.steps = 300                     # cold-start SFT steps
    c.sft.batch_size = 32                 # examples per SFT step
    c.sft.num_demos = 32                  # (agent warm start only; >= batch_size for validation)
    c.sft.lr = 1e-5                       # SFT lr
    c.sft.warmup_steps = 20               # warm-up
    c.sft.ckpt_every_steps = 50           # SFT checkpoints
    c.ckpt.every_steps = 10               # GRPO checkpoints
    c.eval.every_steps = 25               # held-out evaluation period
    c.eval.num_tasks = 40                 # held-out packets
    c.eval.k = 1                          # one patch per packet (deployment)
    c.eval.temperature = 0.0              # greedy
    c.eval.at_start = True                # the base engineer before SFT
    c.log.peak_flops = 989e12             # H100 bf16 dense peak (MFU)
    return c
