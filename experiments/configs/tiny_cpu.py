"""tiny_cpu: the README's former main job (now ``harness_s/dbbench_cpu``) -- SFT warm start, then agent GRPO on generated DBBench, 2 CPU cores.

Command (after ``pip install -e .``)::

    python launch/train.py --config=experiments/configs/tiny_cpu.py --workdir=/tmp/tiny_cpu

What it does: builds a tiny Qwen3.5 (4 layers: 3 Gated DeltaNet + 1 gated attention, hidden 64,
tied embeddings) with a 2k-token byte-level BPE trained on DBBench training text (Qwen chat
special tokens included, so the harness and chat format are unchanged), warm-starts it with SFT on gold
demonstrations from the DBBench task generator, then runs GRPO (G=4 rollouts per task, 4 tasks
per step) on freshly generated tasks through the embedded JAX engine, colocated and
synchronous. It evaluates success on held-out generated tasks (``selection`` split) before SFT,
after SFT and after GRPO, and writes checkpoints, metrics (JSONL + TensorBoard) and traces under
``--workdir``.

Expected result (measured, 2 shared CPU cores): 8-9 min wall (8 min 14 s; 9 min 2 s after #12 on a busier machine); success on 32 held-out
generated tasks 0/32 before SFT, 0/32 after SFT, 0/32 after GRPO. The SFT'd policy writes
well-formed `Action: Operation` / `Action: Answer` turns but not task-specific SQL, so every GRPO
group has zero reward variance; see docs/training.md for the loop's health figures. These
figures were measured with 32 held-out tasks (``eval.num_tasks`` is 256 since 2026-12-02) and
before ``rl.skip_no_signal`` (on since that day: a batch of zero-variance groups now makes no
optimizer step); not re-measured since.
Kill it (SIGTERM) and run the same command again: it resumes from the last checkpoint.
"""
from experiments.configs import common


def get_config():
    c = common.base_config()
    c.name = "tiny_cpu_dbbench"
    c.num_steps = 10                      # GRPO steps after the SFT warm start

    c.model.preset = "tiny"               # start from the tiny test preset ...
    c.model.tokenizer = "task_bpe"        # 2k-token byte-level BPE trained on DBBench train text
    c.model.tokenizer_vocab = 2048        # (the 248k Qwen3.5 vocabulary would make the LM head 30x the model)
    a = c.model.arch                      # ... resized for the task tokenizer
    a.vocab_size = 2048                   # = model.tokenizer_vocab
    a.hidden_size = 64                    # model width
    a.intermediate_size = 192             # SwiGLU width
    a.num_hidden_layers = 4               # 3 linear-attention + 1 full-attention layer
    a.layer_types = ()                    # () = default 3:1 pattern
    a.num_attention_heads = 2             # gated attention heads
    a.num_key_value_heads = 1             # GQA kv heads
    a.head_dim = 32                       # attention head width
    a.linear_num_key_heads = 1            # Gated DeltaNet q/k heads
    a.linear_num_value_heads = 2          # Gated DeltaNet v heads
    a.linear_key_head_dim = 32            # Gated DeltaNet q/k head width
    a.linear_value_head_dim = 32          # Gated DeltaNet v head width
    a.tie_word_embeddings = True          # one 2048 x 64 matrix instead of two
    a.max_position_embeddings = 4096      # longest episode
    a.eos_token_id = 2                    # <|im_end|> in the task tokenizer
    a.pad_token_id = 0                    # <|endoftext|>
    c.mesh.shape = (1, 1, 1, 1)           # one CPU device (the CPU run uses real, not fake, devices)

    c.rollout.max_slots = 16              # all 16 episodes of a step decode together
    c.rollout.max_len = 1280              # prompt (~400 task-BPE tokens) + up to 3 turns
    c.rollout.max_new_tokens = 64         # one SQL action per turn
    c.env.protocol = "text"               # AgentBench v0.2 text protocol
    c.env.dbbench.engine = "sqlite"       # in-process SQLite
    c.env.dbbench.max_rounds = 3          # short episodes
    c.env.num_tasks = 512                 # generated tasks per split
    c.env.max_turns = 3                   # short episodes keep the CPU budget (gold needs 2)

    c.rl.group_size = 4                   # G
    c.rl.tasks_per_step = 4               # 16 episodes per step
    c.rl.pack_len = 1280                  # one packed row per episode at most
    c.rl.micro_batches = 1                # whole batch at once (tiny model)
    c.opt.lr = 2e-4                       # GRPO learning rate (tiny model, few steps)

    c.sft.enabled = True                  # SFT warm start on generator gold demonstrations
    c.sft.num_demos = 512                 # demonstrations
    c.sft.steps = 300                     # optimizer steps
    c.sft.batch_size = 6                  # demos per step
    c.sft.lr = 3e-3                       # SFT learning rate
    c.sft.ckpt_every_steps = 50           # a killed warm start loses at most 50 steps

    c.ckpt.every_steps = 2                # frequent checkpoints: the run is short
    c.eval.num_tasks = 256                # held-out generated tasks per evaluation
    c.eval.k = 1                          # greedy, one attempt
    c.eval.temperature = 0.0              # greedy
    c.log.peak_flops = 0.0                # measure this CPU's matmul peak at start-up
    return c
