"""harness_r1/tpu: Qwen3.5-9B engineer on a TPU v5p-32 slice; the frozen target served from JAX hosts.

Benchmark by argument: ``tpu.py:dbbench`` (default), ``tpu.py:alfworld``, ``tpu.py:webshop``.

Layout: the engineer trains colocated on the slice (16 chips, mesh data=1 x fsdp=16; its
embedded JaxEngine samples the K=8 patches and gets the new weights in place after every step).
The frozen target (Qwen3.5-9B) runs where SGLang's weight API is missing: on separate JAX TPU
hosts behind our ``EngineServer`` (``launch/serve.py``, SGLang's HTTP API), reached as target
kind ``sglang`` and pinned at the version it reports (a weight update aimed at it raises). Reward
evaluations run on an ``EvaluationPool`` of 8 processes of HTTP clients.

Commands::

    # on each target host (e.g. two v5e-8 hosts)
    python -m launch.serve --model_path $QWEN35_9B --port 31000 --max_slots 64 --max_len 32768 \
        --served_model_name qwen3.5-9b-target --weight_version 1
    # on every host of the engineer's slice
    python launch/engineer.py --config=experiments/configs/harness_r1/tpu.py:dbbench \
        --workdir=/mnt/shared/r1 --config.model.hf_path=$QWEN35_9B \
        --config.r1.target.urls='("http://target-0:31000", "http://target-1:31000")' \
        --config.r1.teacher.base_url=$TEACHER_URL --config.r1.teacher.model=$TEACHER_MODEL

Expected result: not run by this project (no TPU here); the config validates and the engineer's
GRPO train step lowers for the 16-device fsdp mesh on CPU fake devices with the real parameter
shapes (tests/harness_r1/test_r1_configs.py). The paper's figure for this setting: a vanilla
Qwen3.5-9B target's equal-weight mean 44.3% -> 53.6%.

Memory plan: TPU splash attention (causal + segment ids, nothing T x S), remat "offload" (each
layer recomputed; its input, 32 x 32768 x 4096 x 2 B = 8.6 GB per chip, in pinned host memory),
weights cast to bf16 on their FSDP shards before the per-layer all-gather. Static part, exact
(N = 8.95e9, fsdp=16): params + Adam + fp32 gradient accumulator = 16 B x N / 16 = 9 GB per chip,
plus 2.2 GB per chip for the fp32 reference copy ``rl.reference_kl`` keeps (on by default since
2026-12-02; outside the train step and the AOT figure).
AOT budget: fits (77 GB per device of the 85.5 GB budget = 95 GB less 10% headroom), from XLA's memory analysis of the train step compiled for the 16-device mesh at
pack_len 32768, full depth, one row per chip per micro-batch (tests/experiments/test_aot.py).
That compile is XLA:CPU's (splash replaced by the XLA flash kernel): it holds bf16 math in fp32
and keeps the offloaded inputs on the device, so it is an upper bound. Before remat recomputed
the layers of a scanned cycle one at a time (``model.ordered_remat``) the same compile reported
123 GB. ``benchmarks/accel_probe.py`` on the slice measures the real figure; engine caches (colocated, 32 slots x
32768 tokens) add 0.6 GB per chip. The workdir must be a shared local mount (the packet dataset and caches are
files; checkpoints could go to gs:// but the pipeline keeps one root).
"""

from experiments.configs.harness_r1 import common as r1_common
from experiments.configs.harness_r1.gpu8 import use_benchmark


def get_config(benchmark: str = "dbbench"):
    c = r1_common.engineer_config()
    c.name = f"r1_tpu_qwen35_9b_{benchmark}"
    c.num_steps = 174                     # the published RL recipe

    c.model.preset = "9b"                 # engineer shapes (weights from --config.model.hf_path)
    c.model.dtype = "bfloat16"            # bf16 compute
    c.model.param_dtype = "float32"       # fp32 master weights
    c.model.remat = "offload"             # recompute each layer; its input waits in pinned host memory
    c.model.attention = "splash"          # TPU Pallas splash attention: causal + segment ids, nothing T x S
    c.model.scan_layers = True            # one cycle scanned

    c.mesh.shape = (1, 16, 1, 1)          # FSDP over the 16 chips
    c.mesh.num_devices = 16               # v5p-32 = 16 chips
    c.mesh.platform = "tpu"               # TPU v5p
    c.mesh.chip = "v5p"                   # AOT budget: 95 GB per chip

    c.rollout.mode = "colocated"          # the engineer samples on its own mesh
    c.rollout.max_slots = 32              # K=8 x 4 packets
    c.rollout.max_len = 32768             # packet + system prompt + response
    c.rollout.max_new_tokens = 12288      # the published response budget
    c.rollout.prefill_buckets = (512, 2048, 8192)  # long prompts prefill in big chunks
    c.rollout.cache_dtype = "bfloat16"    # engine caches
    c.rollout.temperature = 1.0           # engineer sampling temperature

    t = c.r1.target
    t.kind = "sglang"                     # EngineServer speaks SGLang's API
    t.urls = ("http://target-0:31000", "http://target-1:31000")  # the JAX target hosts
    t.model = "qwen3.5-9b-target"         # served model name
    t.version = "1"                       # pinned: the --weight_version the servers report
    t.options.max_concurrency = 64       # client: requests in flight
    t.options.timeout_s = 600.0          # client: per-request timeout
    t.temperature = 0.0                   # greedy reruns (the public code: the target re-runs greedily)
    t.max_new_tokens = 4096               # per call, thinking off
    t.max_context = 32768                 # target context
    t.concurrency = 10                    # published target concurrency per rerun
    p = c.r1.packets
    p.train_batches = 400                 # train packets
    p.held_out_batches = 40               # held-out packets
    p.batch_size = 10                     # n = 10
    p.budget_tokens = 18000               # the published packet budget
    c.r1.teacher.kind = "endpoint"        # a strong teacher model
    c.r1.teacher.base_url = "http://127.0.0.1:32000/v1"  # placeholder: the teacher's endpoint
    c.r1.teacher.model = "teacher"        # placeholder: its model name
    c.r1.teacher.k = 2                    # two teacher patches per packet
    c.r1.pool_workers = 8                 # reward evaluations on 8 processes
    c.r1.tokenizer_max_token_bytes = 0    # (task_bpe only)
    use_benchmark(c, benchmark)

    c.rl.group_size = 8                   # K
    c.rl.tasks_per_step = 4               # packets per step
    c.rl.micro_batches = 2                # 32 rows = 2 micro-batches x 16 chips
    c.rl.mini_batches = 1                 # one optimizer step per rollout batch
    c.rl.pack_len = 32768                 # one engineer sequence per row
    c.rl.pack_buckets = (16384,)          # shorter rows when the batch allows
    c.rl.logit_chunk = 1024               # LM head in chunks
    c.rl.async_mode = True                # rewards overlap training
    c.rl.max_staleness = 4                # the method's bound
    c.opt.lr = 1e-6                       # GRPO lr
    c.opt.weight_decay = 0.1              # AdamW
    c.sft.steps = 300                     # cold-start SFT steps
    c.sft.batch_size = 32                 # examples per SFT step
    c.sft.num_demos = 32                  # (agent warm start only)
    c.sft.lr = 1e-5                       # SFT lr
    c.sft.warmup_steps = 20               # warm-up
    c.sft.ckpt_every_steps = 50           # SFT checkpoints
    c.ckpt.every_steps = 10               # GRPO checkpoints
    c.eval.every_steps = 25               # held-out evaluation period
    c.eval.num_tasks = 40                 # held-out packets
    c.eval.k = 1                          # one patch per packet
    c.eval.temperature = 0.0              # greedy
    c.log.peak_flops = 459e12             # TPU v5p bf16 peak per chip (MFU)
    return c
