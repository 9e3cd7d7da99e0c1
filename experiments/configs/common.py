"""The one experiment schema every preset starts from (ml_collections ConfigDict).

Every field is typed by its default (``placeholder(type)`` where the default is None) and has one
comment; presets change values, never the structure, so ``harness_jax.config_validation.validate``
checks any preset and command-line overrides (``--config.rl.group_size=8``) only touch fields that
exist (the launchers lock the dict). Every field is read by the code
(``tests/experiments/test_configs.py`` proves it). Values here are the tiny CPU defaults.

Environment families each own a typed section ``env.<family>``, defined next to the family and
registered with it (``registry.EnvSpec.config``, a ``harness_jax.config_schema.EnvSection``);
``env.name`` selects which one is used.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

from harness_jax import config_schema
from harness_jax.envs import registry


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.name = "experiment"                 # run name (appears in metrics, traces and summary.json)
    c.seed = 0                            # master seed: data order, init, sampling
    c.num_steps = 8                       # GRPO steps (one step = one rollout batch -> learner update(s))

    # ---------------------------------------------------------------- model
    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"               # harness_jax.models.qwen3_5.presets name (tiny, tiny_moe, small_10m, medium_80m, 9b, 35b_a3b)
    c.model.hf_path = ""                  # Hugging Face checkpoint dir: its config.json and weights replace preset + arch
    c.model.init_from = ""                # initial weights from another run's Orbax checkpoint (its workdir or checkpoints/ dir; "" = none); ignored on resume
    c.model.arch = config_schema.arch_section()  # typed Qwen3_5Config fields replacing the preset's (None = keep)
    c.model.tokenizer = "qwen"            # "qwen": Qwen3.5 vocabulary (or hf_path's own) | "task_bpe": small BPE trained on the env's train text
    c.model.tokenizer_vocab = 2048        # task_bpe vocabulary size (incl. byte alphabet and Qwen chat specials)
    c.model.tokenizer_pretokenizer = "bytelevel"  # task_bpe word splitting: "bytelevel" (GPT-2 regex) | "isolate" (each space/punctuation char alone: a value has the same tokens in a question, in quotes and in backticks)
    c.model.tokenizer_cache_dir = ""      # where the packaged Qwen3.5 tokenizer is built once ("" = $HARNESS_JAX_CACHE or ~/.cache/harness_jax)
    c.model.dtype = "float32"             # compute dtype ("float32" | "bfloat16")
    c.model.param_dtype = "float32"       # master parameter dtype (also of weights loaded from hf_path)
    c.model.remat = "none"                # decoder-layer remat policy: "none" | "full" | "dots" | "offload" (docs/model.md, "Memory plan")
    c.model.scan_layers = False           # scan over repeated layer cycles (compile time O(1) in depth)
    c.model.attention = "reference"       # attention implementation: "reference" | "xla" | "splash" (TPU) | "pallas_gpu" (GPU)
    c.model.attention_block_q = 0         # attention query tile (0 = the implementation's default)
    c.model.attention_block_kv = 0        # attention key/value tile (0 = the implementation's default)
    c.model.reduce_scatter_dtype = "float32"  # dtype FSDP weight gradients are reduce-scattered in ("float32" | "bfloat16")

    # ---------------------------------------------------------------- mesh / sharding
    c.mesh = ml_collections.ConfigDict()
    c.mesh.shape = (1, -1, 1, 1)          # learner mesh over (data, fsdp, tensor, expert); one -1 takes the rest
    c.mesh.axes = ("data", "fsdp", "tensor", "expert")  # mesh axis names (fixed by harness_jax.sharding)
    c.mesh.rules = config_dict.placeholder(tuple)  # logical-axis rules ((logical, mesh_axis|None), ...); None = harness_jax.sharding.TRAIN_RULES
    c.mesh.num_devices = -1               # devices the run uses: the first N of jax.devices() (-1 = all); validated against the mesh
    c.mesh.platform = "cpu"               # target platform ("cpu" | "gpu" | "tpu"); "cpu" with log.peak_flops=0 measures the MFU peak
    c.mesh.chip = ""                      # accelerator the preset is sized for ("h100" | "h200" | "v5p" | "v6e"; "" = none): its AOT memory budget (train/aot.py) and, without log.peak_flops, the MFU peak

    # ---------------------------------------------------------------- rollout engine
    c.rollout = ml_collections.ConfigDict()
    c.rollout.mode = "colocated"          # "colocated": embedded JaxEngine on the learner's devices | "disaggregated": SGLang-API servers (SGLang or launch/serve.py)
    c.rollout.server_urls = ()            # disaggregated: base URLs of the servers ("http://host:port", ...)
    c.rollout.sync_dir = ""               # disaggregated: dir for the bf16 weight exports, readable by every server ("" = memory-backed /dev/shm/harness_jax/<name>; servers on other hosts need a shared mount)
    c.rollout.sync_method = "disk"        # disaggregated weight sync: "disk" (bf16 export + update_weights_from_disk) | "distributed" (update_weights_from_distributed: torch.distributed broadcasts) | "tensor" (update_weights_from_tensor, same host); servers without it fall back to disk
    c.rollout.sync_dtype = "bfloat16"     # disaggregated weight sync: dtype of the weight matrices sent (1-D parameters keep theirs)
    c.rollout.sync_bucket_mb = 512        # distributed / tensor weight sync: megabytes of tensors per update call
    c.rollout.sync_group_backend = "nccl" # distributed weight sync: torch backend of the weights update group ("nccl": GPU servers | "gloo": CPU)
    c.rollout.sync_group_address = "127.0.0.1"  # distributed weight sync: this host's address, where the servers join the group
    c.rollout.sync_every = 1              # weight sync every N learner steps (1 = on-policy)
    c.rollout.request_timeout_s = 120.0   # disaggregated: per-request HTTP timeout
    c.rollout.max_slots = 16              # embedded engine: concurrent sequences (continuous-batching slots)
    c.rollout.max_len = 2048              # embedded engine: tokens per slot (prompt + all turns)
    c.rollout.prefill_buckets = (32, 128, 512)  # embedded engine: prefill chunk lengths (those < max_len are used)
    c.rollout.decode_steps = 8            # embedded engine: decode tokens per host round trip
    c.rollout.cache_dtype = "auto"        # embedded engine: KV and conv cache dtype ("auto": bfloat16 when mesh.platform is tpu/gpu, else float32 | "float32" | "bfloat16"); the GDN recurrent state is always float32
    c.rollout.cache_kind = "paged"        # embedded engine KV cache: "paged" (a page pool shared by the slots; memory follows live tokens) | "contiguous" (max_len per slot)
    c.rollout.page_size = 16              # paged KV cache: tokens per page
    c.rollout.kv_pages = 0                # paged KV cache: pages in the pool (0 = max_slots * max_len tokens, never preempts; fewer: the youngest request is preempted and recomputed when it runs out)
    c.rollout.token_budget = 0            # embedded engine: tokens per mixed step, decoding rows' plus prompt chunks (0 = the largest prefill bucket + max_slots)
    c.rollout.prefill_rows = 8            # embedded engine: most requests prefilling in one mixed step
    c.rollout.overlap = True              # embedded engine: dispatch the next decode step before the previous one is read back
    c.rollout.attention_impl = "auto"     # embedded engine paged attention: "auto" (Pallas on tpu/gpu, XLA on cpu) | "xla" | "pallas_tpu" | "pallas_gpu" | "reference"
    c.rollout.serve_tensor_parallel = 1   # embedded engine serving copy (compute dtype, rebuilt each sync): tensor-parallel degree over the learner's devices (1 = replicated weights, data-parallel rows)
    c.rollout.temperature = 1.0           # sampling temperature for training rollouts (log-probs use the same)
    c.rollout.top_p = 1.0                 # keep 1.0 for unbiased importance ratios
    c.rollout.top_k = -1                  # -1 = off (keep off for training)
    c.rollout.max_new_tokens = 96         # tokens per assistant turn
    c.rollout.concurrency = 16            # episodes run concurrently through the executor

    # ---------------------------------------------------------------- environment
    c.env = ml_collections.ConfigDict()
    c.env.name = "dbbench"                # harness_jax.envs.registry name; its section env.<name> below is used
    c.env.protocol = "text"               # "text" | "function": the env's action protocol, the base harness H0's and the SFT demonstrations'
    c.env.train_split = "train"           # split the task stream reads ("train" | "search" | "selection"; never "test")
    c.env.eval_split = "selection"        # split periodic evaluation reads
    c.env.num_tasks = 256                 # generated tasks per split (file-backed data: at most this many evaluation tasks)
    c.env.task_seed = 0                   # seed of the task generator (each split draws its own stream from it)
    c.env.max_turns = 6                   # per-episode turn limit (overrides the harness's when > 0)
    c.env.taskset = ml_collections.ConfigDict()
    c.env.taskset.data_dir = ""           # built TFDS task sets (launch/build_tasksets.py --data_dir); "" = tasks from the env registry
    c.env.taskset.config = "default"      # builder config of the task set (its directory under <data_dir>/<env.name>_tasks/, e.g. n20000-seed0-test.n500)
    c.env.taskset.version = ""            # dataset version "X.Y.Z" ("" = the newest built)
    for name, section in sorted(registry.config_sections().items()):
        c.env[name] = section.section()   # typed constructor / split options of each env family

    # ---------------------------------------------------------------- harness
    c.harness = ml_collections.ConfigDict()
    c.harness.spec = ""                   # harness spec file (JSON/YAML) or registered name (harness_jax.harness.presets.names()); "" = H0
    c.harness.thinking = False            # Qwen3.5 thinking mode in the chat template
    c.harness.infra_retries = 2           # executor: extra attempts of an episode after an infrastructure failure
    c.harness.hook_timeout_s = 1.0        # executor: time limit of one sandboxed overlay hook call
    c.harness.hook_workers = 4            # sandbox processes of the shared hook pool (run_hook)
    c.harness.overlay_workers = 2         # sandbox processes of each overlay's own pool

    # ---------------------------------------------------------------- RL hyper-parameters
    c.rl = ml_collections.ConfigDict()
    c.rl.group_size = 4                   # G rollouts per task (group-relative advantages need G >= 2)
    c.rl.tasks_per_step = 4               # tasks per rollout batch (episodes per step = G * tasks_per_step)
    c.rl.eps_low = 0.2                    # clip 1 - eps_low
    c.rl.eps_high = 0.28                  # clip 1 + eps_high (clip-higher)
    c.rl.dual_clip = 0.0                  # dual-clip constant c (> 1) for negative advantages; 0 = off
    c.rl.tis_mode = "cap"                 # truncated importance weight (rl.losses.TIS_WEIGHTS): "cap" | "mask" | "literal" | "none"
    c.rl.tis_cap = 2.0                    # "cap"/"literal": cap C of the importance weight
    c.rl.tis_low = 0.0                    # "mask": lower bound of the kept importance weights
    c.rl.tis_high = 2.0                   # "mask": upper bound of the kept importance weights
    c.rl.agg = "token_mean"               # loss aggregation (rl.losses.AGGREGATIONS): "token_mean" | "seq_mean_token_mean" | "constant"
    c.rl.norm_constant = 1.0              # "constant" aggregation: loss sum / (sequences * norm_constant)
    c.rl.adv_eps = 1e-6                   # eps in (R - mean) / max(std, eps)
    c.rl.adv_scale = "std"                # advantage scale (rl.losses.ADV_SCALES): "std" | "none" (Dr.GRPO)
    c.rl.adv_baseline = "mean"            # advantage baseline (rl.losses.ADV_BASELINES): "mean" | "loo" (RLOO)
    c.rl.kl_coef = 0.0                    # KL-to-reference coefficient (0 = no reference; else the policy RL starts from)
    c.rl.kl_estimator = "k3"              # KL estimator (rl.losses.KL_ESTIMATORS): "k1" | "k2" | "k3"
    c.rl.kl_clamp = 10.0                  # per-token KL estimate clamped to [-kl_clamp, kl_clamp]
    c.rl.entropy_coef = 0.0               # entropy bonus
    c.rl.router_aux_loss = True           # MoE models: add router_aux_loss_coef (from the model config; Qwen3.5: 0.001) x the router load-balancing loss
    c.rl.neg_adv_weight = 1.0             # multiplies negative advantages (1 = plain GRPO; < 1 damps the failure side of the gradient)
    c.rl.reference_kl = True              # keep the policy RL starts from to log learner/kl_to_ref (one parameter copy, one forward per update)
    c.rl.skip_no_signal = True            # no optimizer step on a batch whose advantages are all 0 (AdamW's momentum would still move the weights)
    c.rl.log_entropy = True               # log the policy's token entropy (learner/entropy; one more pass over the vocabulary)
    c.rl.epochs = 1                       # passes over each rollout batch
    c.rl.mini_batches = 1                 # optimizer steps per epoch
    c.rl.micro_batches = 1                # gradient accumulation inside a mini-batch
    c.rl.recompute_old_logp = True        # old_logp from the trainer at step start (False = use rollout logprobs)
    c.rl.pack_len = 2048                  # longest packed row (tokens) of a TrainBatch
    c.rl.pack_buckets = (256, 512, 1024, 2048, 4096, 8192, 16384)  # shorter row lengths a batch may use (those < pack_len)
    c.rl.pad_token_id = 0                 # token id in the padding positions of packed rows (masked out)
    c.rl.logit_chunk = 0                  # positions per LM-head chunk in the learner (0 = all at once; large vocab x long rows need chunks)
    c.rl.dynamic_sampling = "off"         # "off" | "skip" (drop zero-variance groups) | "oversample" (refill batch)
    c.rl.max_oversample_rounds = 2        # "oversample": extra rollout rounds to replace zero-variance groups
    c.rl.async_mode = False               # False = synchronous on-policy; True = rollouts overlap training
    c.rl.max_staleness = 1                # async: at most this many batches in flight ahead of the learner

    # ---------------------------------------------------------------- optimizer
    c.opt = ml_collections.ConfigDict()
    c.opt.lr = 1e-5                       # peak learning rate
    c.opt.schedule = "constant"           # "constant" | "cosine" | "linear" (after the warm-up)
    c.opt.warmup_steps = 0                # linear warm-up steps
    c.opt.end_lr_ratio = 0.0              # cosine/linear: final lr / peak lr (also for SFT)
    c.opt.b1 = 0.9                        # AdamW beta1 (also for SFT)
    c.opt.b2 = 0.999                      # AdamW beta2 (also for SFT)
    c.opt.eps = 1e-8                      # AdamW epsilon (also for SFT)
    c.opt.weight_decay = 0.0              # AdamW weight decay (also for SFT)
    c.opt.grad_clip = 1.0                 # global-norm clip (0 = off; also for SFT)

    # ---------------------------------------------------------------- SFT warm start
    c.sft = ml_collections.ConfigDict()
    c.sft.enabled = False                 # run SFT on gold demonstrations before GRPO
    c.sft.num_demos = 256                 # gold demonstrations (generator tasks solved by the oracle)
    c.sft.steps = 100                     # SFT optimizer steps
    c.sft.batch_size = 8                  # demonstrations per SFT step
    c.sft.lr = 1e-3                       # SFT peak learning rate
    c.sft.schedule = "cosine"             # SFT schedule after the warm-up: "constant" | "cosine" | "linear"
    c.sft.warmup_steps = 10               # SFT linear warm-up steps
    c.sft.seed_offset = 1000              # demo tasks use env.task_seed + this (disjoint from the GRPO stream)
    c.sft.demo_concurrency = 32           # demonstrations recorded concurrently through the executor
    c.sft.ckpt_every_steps = 50           # SFT checkpoint period (a killed warm start resumes from the last one)
    c.sft.cache_dir = ""                  # local cache of finished warm starts keyed by their config ("" = off); runs with equal keys share one

    # ---------------------------------------------------------------- episode workers
    c.workers = config_schema.workers_section()  # where episodes run: in-process (default), local processes or Ray

    # ---------------------------------------------------------------- checkpointing
    c.ckpt = ml_collections.ConfigDict()
    c.ckpt.every_steps = 4                # save every N GRPO steps (and at the end, and on SIGTERM)
    c.ckpt.keep = 2                       # checkpoints kept
    c.ckpt.resume = True                  # resume from <workdir>/checkpoints when present
    c.ckpt.export_hf = True               # also export the final policy as a Hugging Face dir (<workdir>/hf_final)

    # ---------------------------------------------------------------- evaluation
    c.eval = ml_collections.ConfigDict()
    c.eval.every_steps = 0                # evaluate every N steps (0 = only before and after training)
    c.eval.num_tasks = 16                 # tasks from eval_split
    c.eval.k = 1                          # attempts per task (Pass@k / Avg@k)
    c.eval.temperature = 0.0              # 0 = greedy (k must be 1 then); > 0 for Pass@k with k > 1
    c.eval.at_start = True                # evaluate before training starts (before the SFT warm start when enabled)
    c.eval.greedy = True                  # also one greedy attempt per task (greedy_success beside Avg@k)

    # ---------------------------------------------------------------- logging
    c.log = ml_collections.ConfigDict()
    c.log.tensorboard = True              # TensorBoard event files under <workdir>/tb (metrics.jsonl always)
    c.log.progress_bar = "auto"           # "auto" (only on a TTY) | "on" | "off"; one bar per phase (SFT, GRPO, eval, ...)
    c.log.library_level = "WARNING"       # log records of other libraries (Orbax, JAX, absl) below this level are dropped ("INFO" shows all)
    c.log.plot = True                     # <workdir>/progress.png: success and rescue statistics over steps (local workdirs)
    c.log.peak_flops = 0.0                # per-device peak FLOP/s for MFU (0 = measure a matmul at start-up on CPU)
    c.log.store_traces = True             # full traces in the trajectory store
    c.log.traces_dir = ""                 # local dir of the trajectory store ("" = <workdir>/traces; needed for gs:// workdirs)
    return c


def use_dbbench_mariadb(c: ml_collections.ConfigDict) -> None:
    """The accelerator presets' DBBench set-up (shared so GPU and TPU runs are comparable)."""
    c.env.name = "dbbench"                # AgentBench DB
    c.env.protocol = "function"           # tool calls (AgentBench-FC)
    c.env.dbbench.engine = "mariadb"      # faithful MySQL engine
    c.env.dbbench.max_rounds = 15         # AgentBench's 15 rounds
    c.env.num_tasks = 20000               # generated training tasks per split
    c.env.max_turns = 15                  # AgentBench's 15 rounds
