"""cpu_learnable: a DBBench task family a tiny CPU policy learns (issue #13 §7), SFT then GRPO.

Command (from the repository root, after ``pip install -e .``)::

    python launch/train.py --config=experiments/configs/cpu_learnable.py --workdir=/tmp/cpu_learnable

What changes against ``tiny_cpu`` (docs/cpu_learnable.md has the probes behind each choice):

* task family: one domain (football players) in one table named ``players``, no AgentBench
  table-description sentence, SELECT questions from ``CATEGORIES`` only
  (``env.dbbench.{domain,table_name,describe_table,categories}``), so a task differs in its rows
  and its question and the policy copies a column and a value, never a table name;
* H0: the v0.2 text protocol with no instruction (``experiments/configs/harness/
  dbbench_text_minimal.json``): the question is the whole prompt (~40 tokens, not ~400);
* tokenizer: a 1k task BPE with ``model.tokenizer_pretokenizer="isolate"`` (a value is the same
  tokens in the question, in SQL quotes and in a result row);
* model: hidden 128, 4 layers (linear, full, linear, full) -- two attention layers for copying;
* SFT: 1024 gold demonstrations, 600 steps of 16; GRPO: G=8 x 8 tasks, lr 5e-5, one optimizer
  step per batch (``rl.mini_batches = rl.epochs = 1``, the defaults); Avg@4 at T=1 (plus one
  greedy attempt) on 256 held-out tasks.

Expected result (measured 2026-11-30 on a loaded 2-core machine, docs/cpu_learnable.md):
held-out Avg@4 0 before SFT, 0.08-0.11 after SFT (depending on the evaluation's sampling
stream); SFT takes ~17 min. 12-20 GRPO steps do not move held-out success measurably (an older
probe: 0.094 -> 0.117 in 20 steps; the current tree: no change in 12 steps over 3 seeds); half or
more of the GRPO groups have zero reward variance. These figures were measured with 64 held-out
tasks per evaluation (``eval.num_tasks`` is 256 since 2026-12-02) and before that day's GRPO
defaults (``rl.skip_no_signal``, ``rl.reference_kl``) and (task, attempt)-keyed evaluation
sampling; not re-measured since.
The Harness-S demonstration on this family is ``experiments/configs/harness_s/dbbench_cpu.py``.
"""
import os

from experiments.configs import common

H0_MINIMAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness", "dbbench_text_minimal.json")
CATEGORIES = ("counting", "other", "ranking", "aggregation-MAX", "aggregation-MIN",
              "aggregation-SUM", "comparison")


def get_config():
    c = common.base_config()
    c.name = "cpu_learnable_dbbench"
    c.num_steps = 20                      # GRPO steps after the SFT warm start

    c.model.preset = "tiny"               # start from the tiny test preset ...
    c.model.tokenizer = "task_bpe"        # small BPE trained on DBBench train text
    c.model.tokenizer_vocab = 1024        # one domain: 1k tokens cover its words and numbers
    c.model.tokenizer_pretokenizer = "isolate"  # spaces/punctuation alone: values copy token for token
    a = c.model.arch                      # ... resized
    a.vocab_size = 1024                   # = model.tokenizer_vocab
    a.hidden_size = 128                   # model width
    a.intermediate_size = 384             # SwiGLU width
    a.num_hidden_layers = 4               # 4 layers ...
    a.layer_types = ("linear_attention", "full_attention", "linear_attention", "full_attention")  # ... two of them attention
    a.num_attention_heads = 4             # gated attention heads
    a.num_key_value_heads = 2             # GQA kv heads
    a.head_dim = 32                       # attention head width
    a.linear_num_key_heads = 2            # Gated DeltaNet q/k heads
    a.linear_num_value_heads = 4          # Gated DeltaNet v heads
    a.linear_key_head_dim = 32            # Gated DeltaNet q/k head width
    a.linear_value_head_dim = 32          # Gated DeltaNet v head width
    a.tie_word_embeddings = True          # one embedding matrix
    a.max_position_embeddings = 1024      # longest episode
    a.eos_token_id = 2                    # <|im_end|> in the task tokenizer
    a.pad_token_id = 0                    # <|endoftext|>
    c.mesh.shape = (1, 1, 1, 1)           # one CPU device

    c.rollout.max_slots = 64              # all 64 episodes of a step decode together
    c.rollout.max_len = 192               # prompt (~40 tokens) + 2-3 turns (gold episodes: 100-180 tokens)
    c.rollout.max_new_tokens = 64         # one SQL action per turn
    c.rollout.concurrency = 64            # episodes in flight
    c.env.protocol = "text"               # AgentBench v0.2 text protocol
    c.env.num_tasks = 1024                # generated tasks per split
    c.env.max_turns = 3                   # gold needs 2
    d = c.env.dbbench                     # the narrow family (generator options)
    d.engine = "sqlite"                   # in-process SQLite
    d.max_rounds = 3                      # = env.max_turns
    d.domain = "player"                   # one domain ...
    d.table_name = "players"              # ... in one table
    d.describe_table = False              # no "The name of this table is ..." sentence
    d.categories = CATEGORIES             # SELECT questions only
    c.harness.spec = H0_MINIMAL           # H0: v0.2 text protocol, no instruction (the question is the prompt)

    c.rl.group_size = 8                   # G
    c.rl.tasks_per_step = 8               # 64 episodes per step
    c.rl.pack_len = 192                   # = rollout.max_len: one bucket (few compiled shapes)
    c.rl.micro_batches = 1                # whole batch at once (tiny model)
    c.opt.lr = 5e-5                       # GRPO learning rate (2e-4 with 4 tasks/step scored lower in one held-out evaluation, within its noise)

    c.sft.enabled = True                  # SFT warm start on generator gold demonstrations
    c.sft.num_demos = 1024                # demonstrations
    c.sft.steps = 600                     # optimizer steps (copying appears after ~300)
    c.sft.batch_size = 16                 # demos per step
    c.sft.lr = 3e-3                       # SFT learning rate
    c.sft.ckpt_every_steps = 100          # a killed warm start loses at most 100 steps

    c.ckpt.every_steps = 10               # checkpoints
    c.eval.num_tasks = 256                # held-out generated tasks per evaluation (paired comparisons need many)
    c.eval.k = 4                          # attempts per task (Avg@4 at T=1)
    c.eval.temperature = 1.0              # the rollout temperature
    c.log.peak_flops = 0.0                # measure this CPU's matmul peak at start-up
    return c
