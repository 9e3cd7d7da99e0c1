"""harness_r1/tiny_cpu: the Harness-R1 MECHANICS TEST on CPU -- a tiny engineer, SFT then GRPO, 2 cores.

A mechanics test, NOT a demonstration of learning (issue 26): the scripted target turns careful
after any harness intervention and the rule-based teacher targets exactly its seeded mistakes, so
a gain here is circular (the ablation and Self-Refine rows follow from how the target was built).
It checks that every stage runs end to end and that the engineer writes valid, firing patches.
The demonstration that can show learning is ``tiny_cpu_policy`` (a trained policy as target,
pre-registered criteria; docs/harness_r1.md section 11.1).

Command::

    python launch/engineer.py --config=experiments/configs/harness_r1/tiny_cpu.py --workdir=/tmp/r1_tiny

What it does: the frozen target is the scripted DBBench agent (``harness_r1.scripted``: a rule
policy with seeded mistakes that reacts to harness interventions; no tiny model has a baseline a
harness can move, see its docstring). Its cached baselines on generated DBBench batches (SQLite,
text protocol) give 24 train and 8 held-out failure packets. The rule-based engineer writes the
cold-start patches; the engineer -- a tiny Qwen3.5 (4 layers, hidden 64) with a 4k-token phrase-level BPE
trained on its own training text (system prompt, train packets, teacher patches) -- is
fine-tuned on them with the loss averaged over all response tokens of the data set, then trained
by GRPO (K=8 patches per packet, 4 packets per step, seq_mean_token_mean, clip 0.2/0.28, TIS cap
2), each patch rewarded by the target's paired Delta_B on its packet's batch. The held-out
packets are evaluated before SFT, after SFT and after GRPO (4 samples each at T=0.7, and the
greedy patch), next to the rule-based engineer's Delta_B. The table of arms (default, ReAct,
Self-Refine, rule, SFT, GRPO) and the hook ablation of the same run::

    python launch/evaluate_engineer.py --config=experiments/configs/harness_r1/tiny_cpu.py --workdir=/tmp/r1_tiny

Expected result (measured on 2026-11-30, before the issue-26 grading and reward changes, over
seeds 0, 1, 2 with ``--config.seed=S``; docs/harness_r1.md
section 11, plot docs/img/harness_r1_cpu.png): on the 8 held-out packets (baseline success
48.4%) the untrained engineer writes no valid patch (Delta_B 0); after SFT its samples have mean
Delta_B +0.353 +- 0.023, 82% valid; after GRPO +0.408 +- 0.045, 82% valid; the greedy patch of
both gives +0.516 (100% success), exactly the rule-based engineer's +0.516 -- the ceiling, so
GRPO cannot beat the reference here. Reward-cache hit rate over GRPO ~0.23. About 9-10 min wall
and ~390 CPU-s on the 2 shared cores (loaded machine); ``launch/evaluate_engineer.py`` with the
same flags adds ~1.5-2 min. Kill it and run the same command again: it resumes from the last
finished stage / checkpoint.
"""

from experiments.configs.harness_r1 import common as r1_common
from harness_jax.sweeps import hyper


def get_config():
    c = r1_common.engineer_config()
    c.name = "r1_tiny_cpu_dbbench"
    c.seed = 0
    c.num_steps = 12                      # GRPO steps

    # ---- the frozen target and its benchmark
    c.env.name = "dbbench"                # generated DBBench tasks
    c.env.protocol = "text"               # AgentBench v0.2 text protocol
    c.env.dbbench.engine = "sqlite"       # in-process SQLite
    c.env.dbbench.max_rounds = 5          # short episodes
    c.env.max_turns = 5                   # the scripted agent needs at most 3
    c.env.train_split = "train"           # train packets
    c.env.eval_split = "selection"        # held-out packets
    t = c.r1.target
    t.kind = "factory"                    # a scripted agent (no tiny model has a movable baseline)
    t.model = "scripted-dbbench-agent"    # its label in cache keys
    t.version = "1"                       # pinned version
    t.factory = "harness_jax.harness_r1.scripted:dbbench_agent"  # the scripted agent
    t.options.kwargs = {"seed": 0}       # it indexes the generated tasks of the packets' seed
    t.temperature = 1.0                   # sampling target (paired by seed)
    t.max_new_tokens = 128                # its replies are one short action
    t.max_context = 4096                  # tokens of context
    t.concurrency = 8                     # episodes in flight
    p = c.r1.packets
    p.train_batches = 24                  # 24 train packets
    p.held_out_batches = 8                # 8 held-out packets
    p.batch_size = 8                      # tasks per batch B
    p.budget_tokens = 600                 # small packets (2-3 failures) for a tiny engineer
    p.seed = 0                            # = the target's kwargs seed
    p.n_per_task = 2                      # a sampling target: two paired seeded episodes per task
    c.r1.teacher.kind = "rule"            # the rule-based engineer writes the cold-start patches
    c.r1.teacher.k = 3                    # its full patch and two with one fix dropped (they differ in Delta_B)
    c.r1.tokenizer_max_token_bytes = 32   # phrase-level engineer BPE (prompts ~300, responses ~80-130 tokens)

    # ---- the engineer
    c.model.preset = "tiny"               # start from the tiny preset ...
    c.model.tokenizer = "task_bpe"        # BPE trained on the engineer's training text
    c.model.tokenizer_vocab = 4096        # vocabulary
    a = c.model.arch                      # ... resized
    a.vocab_size = 4096                   # = model.tokenizer_vocab
    a.hidden_size = 64                    # model width
    a.intermediate_size = 192             # SwiGLU width
    a.num_hidden_layers = 4               # 3 Gated DeltaNet + 1 gated attention
    a.layer_types = ()                    # default 3:1 pattern
    a.num_attention_heads = 2             # gated attention heads
    a.num_key_value_heads = 1             # GQA kv heads
    a.head_dim = 32                       # attention head width
    a.linear_num_key_heads = 1            # Gated DeltaNet q/k heads
    a.linear_num_value_heads = 2          # Gated DeltaNet v heads
    a.linear_key_head_dim = 32            # Gated DeltaNet q/k head width
    a.linear_value_head_dim = 32          # Gated DeltaNet v head width
    a.tie_word_embeddings = True          # one embedding matrix
    a.max_position_embeddings = 2048      # prompt + response
    a.eos_token_id = 2                    # <|im_end|> in the task tokenizer
    a.pad_token_id = 0                    # <|endoftext|>
    c.mesh.shape = (1, 1, 1, 1)           # one CPU device
    c.mesh.num_devices = 1                # the first device (tests see 8 fake ones)

    c.rollout.max_slots = 32              # 4 packets x K=8 in training, 8 x 4 in evaluation
    c.rollout.max_len = 1024              # prompt (~300) + response
    c.rollout.max_new_tokens = 192        # response budget (teacher responses: <= ~130 tokens)
    c.rollout.prefill_buckets = (64, 256)  # prefill chunks
    c.rollout.temperature = 0.7           # engineer sampling temperature (at 1.0 the tiny engineer's samples are ~95% invalid)
    c.rollout.concurrency = 16            # (agent episodes; unused by the engineer's sampling)

    c.rl.group_size = 8                   # K
    c.rl.tasks_per_step = 4               # packets per step
    c.rl.pack_len = 1024                  # two engineer sequences per row
    c.rl.pack_buckets = ()                # one row length: one compilation
    c.opt.lr = 5e-4                       # GRPO learning rate

    c.sft.steps = 160                     # cold-start SFT steps (response NLL ~0.03 per token)
    c.sft.batch_size = 4                  # examples per step
    c.sft.num_demos = 4                   # (agent warm start only; kept >= batch_size for validation)
    c.sft.lr = 3e-3                       # SFT learning rate
    c.sft.warmup_steps = 10               # warm-up
    c.sft.schedule = "cosine"             # decay
    c.sft.ckpt_every_steps = 40           # a killed SFT loses at most 40 steps

    c.ckpt.every_steps = 2                # GRPO checkpoints
    c.eval.num_tasks = 8                  # held-out packets evaluated
    c.eval.k = 4                          # samples per held-out packet
    c.eval.temperature = 0.7              # the training distribution (plus the greedy patch)
    c.eval.at_start = True                # the untrained engineer too (it writes no valid patch; cheap)
    c.log.store_traces = False            # the engineer's samples are in metrics and the reward cache
    return c


SWEEPS = {
    "seeds": hyper.sweep("seed", [0, 1, 2]),
}
