"""The Harness-R1 engineer-training schema: the project's experiment schema plus an ``r1`` section.

The engineer is a policy trained by the project's loop, so every section of
``experiments.configs.common.base_config()`` keeps its meaning, applied to the ENGINEER:
``model`` (the engineer's Qwen3.5), ``mesh``, ``rollout`` (the engineer's engine and sampling:
``temperature``, ``max_new_tokens`` = the response budget, ``max_len`` = packet prompt +
response), ``rl`` (``group_size`` = K samples per packet, ``tasks_per_step`` = packets per step,
the loss: ``agg``, ``eps_low/high``, ``tis_mode/tis_cap``, async and staleness), ``opt``, ``sft``
(the cold-start SFT's steps, batch size, lr, schedule, checkpoint period; the gold-demonstration
fields ``num_demos``, ``seed_offset``, ``demo_concurrency`` belong to the agent loop and are not
used here), ``ckpt``, ``eval`` (held-out packets: ``num_tasks`` packets, ``k`` samples each at
``temperature``, ``every_steps``, ``at_start``), ``log``. The environment sections describe the
TARGET's benchmark (``env.train_split`` feeds the train packets, ``env.eval_split`` the held-out
packets); ``harness`` is the target's base harness and sandbox.

``r1`` holds what only Harness-R1 has: the frozen target, the packet dataset, the cold-start
teacher, the SFT normalisation, the reward's options and the table's arms. Validation:
``harness_jax.config_validation`` (the ``r1`` checks run when the section is present).
"""
from __future__ import annotations

import ml_collections

from experiments.configs import common


def r1_section() -> ml_collections.ConfigDict:
    r = ml_collections.ConfigDict()
    r.target = ml_collections.ConfigDict()
    r.target.kind = "factory"             # harness_r1.TargetSpec kind: "jax" (HF dir, embedded JaxEngine) | "sglang" (SGLang or launch/serve.py servers) | "chat" (OpenAI-compatible endpoint) | "factory"
    r.target.model = ""                   # jax: HF weights dir; sglang/chat: the served model name; factory: a label
    r.target.urls = ()                    # sglang: server base URLs; chat: the endpoint's one base URL
    r.target.version = ""                 # pinned weights version ("" = derived: weights fingerprint, the server's weight_version, or "api")
    r.target.factory = ""                 # kind "factory": "module:function" returning a RolloutEngine
    r.target.options = "{}"               # JSON object of TargetSpec options (harness_r1.targets.KNOWN_OPTIONS of the kind)
    r.target.tokenizer = ""               # tokenizer dir of the target's executor ("" = the Qwen3.5 tokenizer)
    r.target.temperature = 0.0            # target sampling temperature: 0 = greedy reruns (the public code); > 0 needs r1.packets.n_per_task >= 2 (paired seeds, a paired interval)
    r.target.max_new_tokens = 512         # target tokens per turn
    r.target.max_context = 16384          # target context limit in tokens (harness memory)
    r.target.concurrency = 16             # target episodes in flight per baseline or rerun

    r.packets = ml_collections.ConfigDict()
    r.packets.train_batches = 20          # train packets: batches of batch_size tasks from env.train_split (batches without a failure give none)
    r.packets.validation_batches = 0      # validation packets from the environment's "search" split
    r.packets.held_out_batches = 4        # held-out packets from env.eval_split (evaluation during and after training)
    r.packets.batch_size = 10             # tasks per batch B (the paper: 10)
    r.packets.budget_tokens = 18000       # packet size limit (characters / 4)
    r.packets.n_per_task = 1              # baseline (and rerun) episodes per task, each with its own paired sampling key; >= 2 when r1.target.temperature > 0
    r.packets.seed = 0                    # task draw and sampling seed of the baselines (reruns replay it)
    r.packets.cache_dir = ""              # baseline cache ("" = <workdir>/cache/baselines; share one per target across runs)

    r.teacher = ml_collections.ConfigDict()
    r.teacher.kind = "rule"               # cold-start teacher: "rule" (offline rule-based engineer) | "endpoint" (any OpenAI-compatible model)
    r.teacher.base_url = ""               # endpoint teacher: base URL (e.g. https://api.example/v1)
    r.teacher.model = ""                  # endpoint teacher: model name
    r.teacher.api_key_env = ""            # endpoint teacher: NAME of the environment variable holding the key
    r.teacher.price_in = 0.0              # endpoint teacher: USD per 1M prompt tokens (cost accounting)
    r.teacher.price_out = 0.0             # endpoint teacher: USD per 1M completion tokens
    r.teacher.temperature = 0.7           # endpoint teacher: sampling temperature
    r.teacher.max_tokens = 4096           # endpoint teacher: completion tokens per reply
    r.teacher.k = 1                       # teacher responses per train packet
    r.teacher.cache_dir = ""              # endpoint teacher: response cache ("" = <workdir>/cache/teacher)
    r.teacher.filter_by_delta = True      # keep only teacher patches whose measured Delta_B on their own packet's batch is > min_delta_b
    r.teacher.min_delta_b = 0.0           # the filter's threshold (paired rerun of each teacher patch; cached like any reward)

    r.sft_agg = "dataset_token_mean"      # cold-start SFT normalisation (rl.losses.AGGREGATIONS): "dataset_token_mean" = METHODS' mean over all response tokens of the data set | "token_mean" (per batch)
    r.tokenizer_max_token_bytes = 16      # model.tokenizer="task_bpe": the engineer's BPE merges across words up to N bytes (0 = word-level, as the agent loop's)
    r.eval_attempts = 3                   # reward: rerun rounds for infrastructure failures before a sample is left unscored
    r.pool_workers = 0                    # reward: evaluate patches on N worker processes (EvaluationPool; 0 = in this process)
    r.require_code_hook_only = False      # reward: only add_code_hook actions make a valid patch
    r.effect_surface = "public"           # hook effects the runtime honours: "public" = the public Harness-R1 runtime's per-benchmark surface (DBBench: no rewritten/forced actions) | "contract" = every kind of the hook contracts (wider than the paper)
    r.cross_batch = True                  # held-out evaluation: also apply each packet's patches to the NEXT held-out packet's batch (cross-batch Delta_B beside the same-batch one)

    r.reward = ml_collections.ConfigDict()
    r.reward.invalid_reward = 0.0         # reward of an invalid, unparsable or runtime no-op patch (the paper: 0)
    r.reward.valid_bonus = 0.0            # added to Delta_B of a valid patch that takes effect (the public code: 0)
    r.reward.adv_baseline = "group"       # advantage baseline (harness_r1.reward.ADV_BASELINES): "group" = mean/std of the K rewards (the paper) | "group_with_noop" = plus a virtual no-patch sample of reward 0
    r.reference_rule = True               # evaluate the rule-based engineer on the held-out packets (the demonstration's reference)

    r.table = ml_collections.ConfigDict()
    r.table.arms = ("default", "react", "self_refine", "rule", "sft", "grpo")  # arms of launch/evaluate_engineer.py ("prompt" needs r1.table.prompt_*)
    r.table.prompt_base_url = ""          # "prompt" arm: a prompt-based engineer on this OpenAI-compatible endpoint
    r.table.prompt_model = ""             # "prompt" arm: its model name (e.g. a frontier model)
    r.table.prompt_api_key_env = ""       # "prompt" arm: NAME of the environment variable holding the key
    r.table.ablate = "grpo"               # arm whose patches the hook ablation evaluates ("" = no ablation)
    r.table.transfer_targets = "[]"       # JSON list of TargetSpec dicts: the ablate arm's engineer transferred to these targets
    return r


def engineer_config() -> ml_collections.ConfigDict:
    """``base_config()`` with the ``r1`` section and the engineer's loss defaults (METHODS)."""
    c = common.base_config()
    c.r1 = r1_section()                   # Harness-R1: target, packets, teacher, reward, table
    c.sft.enabled = True                  # cold-start SFT before GRPO
    c.rl.group_size = 8                   # K samples per packet
    c.rl.tasks_per_step = 4               # packets per GRPO step
    c.rl.agg = "seq_mean_token_mean"      # (1/K) sum_k (1/T_k) sum_t
    c.rl.eps_low = 0.2                    # asymmetric clip
    c.rl.eps_high = 0.28                  # clip-higher
    c.rl.tis_mode = "cap"                 # w = min(exp(l_tr - l_ro), tis_cap); "literal" = the paper's printed clip(l_tr - l_ro, 0, 2)
    c.rl.tis_cap = 2.0                    # the truncation C
    c.rl.max_staleness = 4                # async: the method's bound on policy lag
    c.harness.thinking = False            # the target's chat template (the engineer always thinks: its prompt prefills <think>)
    return c
