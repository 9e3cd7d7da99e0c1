"""The one experiment schema every preset starts from (ml_collections ConfigDict).

Every field has a one-line comment; presets change values, never the structure, so that
``harness_jax.config_validation.validate`` can check any preset and command-line overrides
(``--config.rl.group_size=8``) only ever touch fields that exist (the dict is locked by the
launcher). Values here are the tiny CPU defaults.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def base_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.name = "experiment"                 # run name (appears in metrics and traces)
    c.seed = 0                            # master seed: data order, init, sampling
    c.num_steps = 8                       # GRPO steps (one step = one rollout batch -> learner update(s))

    # ---------------------------------------------------------------- model
    c.model = ml_collections.ConfigDict()
    c.model.preset = "tiny"               # harness_jax.models.qwen3_5.presets name ("tiny", "4b", "9b", ...)
    c.model.hf_path = ""                  # Hugging Face checkpoint dir; when set it wins over preset (weights loaded)
    c.model.init_from = ""                # workdir-independent warm start: an HF dir or orbax checkpoint dir ("" = none)
    c.model.overrides = config_dict.ConfigDict({}, type_safe=False)  # Qwen3_5Config fields replaced in the preset (ignored with hf_path: its config.json is the truth)
    c.model.tokenizer = "qwen"            # "qwen": Qwen3.5 vocabulary (or hf_path's own) | "task_bpe": small BPE trained on the env's train text
    c.model.tokenizer_vocab = 2048        # task_bpe vocabulary size (incl. byte alphabet and Qwen chat specials)
    c.model.dtype = "float32"             # compute dtype ("float32" | "bfloat16")
    c.model.param_dtype = "float32"       # master parameter dtype
    c.model.remat = "none"                # "none" | "block" | "full" rematerialisation of decoder blocks
    c.model.scan_layers = False           # scan over repeated layer cycles (compile time O(1) in depth)

    # ---------------------------------------------------------------- mesh / sharding
    c.mesh = ml_collections.ConfigDict()
    c.mesh.shape = (1, -1, 1, 1)          # learner mesh over (data, fsdp, tensor, expert); one -1 takes the rest
    c.mesh.axes = ("data", "fsdp", "tensor", "expert")  # mesh axis names (fixed by harness_jax.sharding)
    c.mesh.rules = config_dict.placeholder(tuple)  # logical-axis rules ((logical, mesh_axis|None), ...); None = library default
    c.mesh.num_devices = -1               # devices the preset is sized for (-1 = whatever jax sees); validated against the mesh
    c.mesh.platform = "cpu"               # target platform of the preset ("cpu" | "gpu" | "tpu"); informational + validation

    # ---------------------------------------------------------------- rollout engine
    c.rollout = ml_collections.ConfigDict()
    c.rollout.mode = "colocated"          # "colocated" (embedded JaxEngine shares params) | "disaggregated" (HTTP servers)
    c.rollout.engine = "jax"              # "jax" (embedded) | "sglang" (SGLang-API servers: SGLang or launch/serve.py)
    c.rollout.server_urls = ()            # disaggregated: base URLs of the servers ("http://host:port", ...)
    c.rollout.sync_dir = ""               # disaggregated: shared dir for HF weight exports ("" = <workdir>/weight_sync)
    c.rollout.sync_every = 1              # weight sync every N learner steps (1 = on-policy)
    c.rollout.max_slots = 16              # embedded engine: concurrent sequences (continuous-batching slots)
    c.rollout.max_len = 2048              # embedded engine: tokens per slot (prompt + all turns)
    c.rollout.temperature = 1.0           # sampling temperature for training rollouts (log-probs use the same)
    c.rollout.top_p = 1.0                 # keep 1.0 for unbiased importance ratios
    c.rollout.top_k = -1                  # -1 = off (keep off for training)
    c.rollout.max_new_tokens = 96         # tokens per assistant turn
    c.rollout.concurrency = 16            # episodes run concurrently through the executor
    c.rollout.request_timeout_s = 120.0   # disaggregated: per-request HTTP timeout

    # ---------------------------------------------------------------- environment
    c.env = ml_collections.ConfigDict()
    c.env.name = "dbbench"                # harness_jax.envs.registry name
    c.env.kwargs = config_dict.ConfigDict({"engine": "sqlite", "protocol": "text"}, type_safe=False)  # Env constructor args
    c.env.train_split = "train"           # split the task stream reads ("train"; never "test")
    c.env.eval_split = "selection"        # split periodic evaluation reads
    c.env.split_kwargs = config_dict.ConfigDict({"n": 256, "seed": 0}, type_safe=False)  # registry.load_split args (generated: n, seed; or path)
    c.env.max_turns = 6                   # per-episode turn limit (overrides the harness's when > 0)

    # ---------------------------------------------------------------- harness
    c.harness = ml_collections.ConfigDict()
    c.harness.spec = ""                   # harness spec path (JSON/YAML) or registered name; "" = the env's base harness H0
    c.harness.thinking = False            # Qwen3.5 thinking mode in the chat template

    # ---------------------------------------------------------------- RL hyper-parameters
    c.rl = ml_collections.ConfigDict()
    c.rl.group_size = 4                   # G rollouts per task (group-relative advantages need G >= 2)
    c.rl.tasks_per_step = 4               # tasks per rollout batch (episodes per step = G * tasks_per_step)
    c.rl.eps_low = 0.2                    # clip 1 - eps_low
    c.rl.eps_high = 0.28                  # clip 1 + eps_high (clip-higher)
    c.rl.dual_clip = 0.0                  # dual-clip constant c (> 1) for negative advantages; 0 = off
    c.rl.tis_cap = 2.0                    # truncated importance weight cap C
    c.rl.tis_mode = "cap"                 # "cap" min(w, C) | "mask" | "literal" (Harness-R1 as written) | "none"
    c.rl.agg = "token_mean"               # "token_mean" | "seq_mean_token_mean" | "constant"
    c.rl.adv_eps = 1e-6                   # eps in (R - mean) / max(std, eps)
    c.rl.adv_scale = "std"                # "std": divide by max(group std, eps); "none": Dr.GRPO mean-only
    c.rl.adv_baseline = "mean"            # "mean" group mean | "loo" leave-one-out (RLOO)
    c.rl.kl_coef = 0.0                    # KL-to-reference coefficient (0 = no reference model)
    c.rl.kl_estimator = "k3"              # "k1" | "k2" | "k3"
    c.rl.entropy_coef = 0.0               # entropy bonus
    c.rl.epochs = 1                       # passes over each rollout batch
    c.rl.mini_batches = 1                 # optimizer steps per epoch
    c.rl.micro_batches = 1                # gradient accumulation inside a mini-batch
    c.rl.recompute_old_logp = True        # old_logp from the trainer at step start (False = use rollout logprobs)
    c.rl.pack_len = 2048                  # packed row length (tokens) of a TrainBatch row
    c.rl.logit_chunk = 0                  # positions per LM-head chunk in the learner (0 = all at once; large vocab x long rows need chunks)
    c.rl.dynamic_sampling = "off"         # "off" | "skip" (drop zero-variance groups) | "oversample" (refill batch)
    c.rl.max_oversample_rounds = 2        # "oversample": extra rollout rounds to replace zero-variance groups
    c.rl.async_mode = False               # False = synchronous on-policy; True = rollouts overlap training
    c.rl.max_staleness = 1                # async: at most this many batches in flight ahead of the learner

    # ---------------------------------------------------------------- optimizer
    c.opt = ml_collections.ConfigDict()
    c.opt.lr = 1e-5                       # peak learning rate
    c.opt.schedule = "constant"           # "constant" | "cosine" | "linear"
    c.opt.warmup_steps = 0                # linear warm-up steps
    c.opt.b1 = 0.9                        # AdamW beta1
    c.opt.b2 = 0.999                      # AdamW beta2
    c.opt.weight_decay = 0.0              # AdamW weight decay
    c.opt.grad_clip = 1.0                 # global-norm clip (0 = off)

    # ---------------------------------------------------------------- SFT warm start
    c.sft = ml_collections.ConfigDict()
    c.sft.enabled = False                 # run SFT on gold demonstrations before GRPO
    c.sft.num_demos = 256                 # gold demonstrations (generator tasks solved by the oracle)
    c.sft.steps = 100                     # SFT optimizer steps
    c.sft.batch_size = 8                  # demonstrations per SFT step
    c.sft.lr = 1e-3                       # SFT learning rate
    c.sft.seed_offset = 1000              # demo tasks use seed + this (disjoint from the GRPO stream)

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
    c.eval.at_start = True                # evaluate before the first step

    # ---------------------------------------------------------------- logging
    c.log = ml_collections.ConfigDict()
    c.log.every_steps = 1                 # scalar logging period
    c.log.tensorboard = True              # TensorBoard event files under <workdir>/tb
    c.log.progress_bar = "auto"           # "auto" (only on a TTY) | "on" | "off"
    c.log.peak_flops = 0.0                # per-device peak FLOP/s for MFU (0 = measure a matmul at start-up on CPU)
    c.log.store_traces = True             # full traces in <workdir>/traces (trajectory store)
    return c


def use_dbbench_mariadb(c: ml_collections.ConfigDict) -> None:
    """The accelerator presets' DBBench set-up (shared so GPU and TPU runs are comparable)."""
    c.env.kwargs = dict(engine="mariadb", protocol="function", max_rounds=15)  # faithful MySQL engine, tool calls
    c.env.split_kwargs = dict(n=20000, seed=0)  # generated training tasks (n per split)
    c.env.max_turns = 15                  # AgentBench's 15 rounds
