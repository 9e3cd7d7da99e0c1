"""The one experiment schema every preset starts from (ml_collections ConfigDict).

The schema is declared once, as the typed sections of ``harness_jax.train.schema`` (every field's
type, default and one comment there, with its allowed values or bounds); ``base_config()`` is
their ConfigDict plus every registered environment family's typed section ``env.<family>``
(defined next to the family, ``registry.EnvSpec.config``; ``env.name`` selects which one is
used). Presets change values, never the structure, so ``harness_jax.train.spec.resolve`` checks
any preset and command-line overrides (``--config.rl.group_size=8``) only touch fields that exist
(the launchers lock the dict). Every field is read by the code
(``tests/experiments/test_configs.py`` proves it). Values are the tiny CPU defaults.
"""
from __future__ import annotations

import ml_collections

from harness_jax.envs import registry
from harness_jax.train import schema


def base_config() -> ml_collections.ConfigDict:
    c = schema.defaults()                 # name, seed, num_steps and every typed section of harness_jax.train.schema
    for name, section in sorted(registry.config_sections().items()):
        c.env[name] = section.section()   # typed constructor / split options of each env family
    return c


def toy_model(c: ml_collections.ConfigDict, layer_types: tuple) -> None:
    """The toy families' policy (the learning test's ``word_label``, ``kv_lookup`` in
    ``grpo_learns_cpu``): a 2-layer, hidden-64 Qwen3.5 on one device with a task BPE whose words
    are single tokens."""
    c.model.tokenizer = "task_bpe"        # a few hundred tokens: the words are single tokens
    c.model.tokenizer_vocab = 512         # task BPE vocabulary size
    c.model.tokenizer_pretokenizer = "isolate"  # every word its own pre-token
    a = c.model.arch
    a.vocab_size = 512                    # = the task BPE vocabulary
    a.hidden_size = 64                    # model width
    a.intermediate_size = 128             # MLP width
    a.num_hidden_layers = 2               # layers
    a.layer_types = tuple(layer_types)    # the caller's layer mix
    a.num_attention_heads = 2             # query heads of the full-attention layers
    a.num_key_value_heads = 1             # kv heads (GQA 2:1)
    a.head_dim = 32                       # attention head width
    a.linear_num_key_heads = 1            # Gated DeltaNet key heads
    a.linear_num_value_heads = 2          # Gated DeltaNet value heads
    a.linear_key_head_dim = 32            # Gated DeltaNet key head width
    a.linear_value_head_dim = 32          # Gated DeltaNet value head width
    a.tie_word_embeddings = True          # LM head shares the embedding
    a.max_position_embeddings = 128       # longest episode in tokens
    a.eos_token_id = 2                    # <|im_end|> in the task tokenizer
    a.pad_token_id = 0                    # padding id of the task tokenizer
    c.mesh.shape = (1, 1, 1, 1)           # data, fsdp, tensor, expert: one device
    c.mesh.num_devices = 1                # one CPU device


def toy_one_turn_loop(c: ml_collections.ConfigDict) -> None:
    """The toy families' GRPO loop: one text turn, G = 8 x 16 tasks per step, 4 optimizer steps
    per batch, 64-token rows."""
    c.env.protocol = "text"               # one reply in plain text
    c.env.max_turns = 1                   # one turn per episode
    c.rollout.max_slots = 128             # every episode of a step decodes at once
    c.rollout.max_len = 64                # prompt + reply tokens per slot
    c.rollout.prefill_buckets = (32,)     # one prompt bucket: one prefill program
    c.rollout.decode_steps = 8            # decode steps per engine call
    c.rollout.concurrency = 128           # episodes in flight
    c.rl.group_size = 8                   # G: episodes per task
    c.rl.tasks_per_step = 16              # tasks per GRPO step
    c.rl.mini_batches = 2                 # two optimizer steps per epoch: the clip acts
    c.rl.epochs = 2                       # two passes over each batch
    c.rl.pack_len = 64                    # tokens per packed row (an episode is ~20)
    c.rl.pack_buckets = ()                # one row length: one train-step program


def use_dbbench_mariadb(c: ml_collections.ConfigDict) -> None:
    """The accelerator presets' DBBench set-up (shared so GPU and TPU runs are comparable)."""
    c.env.name = "dbbench"                # AgentBench DB
    c.env.protocol = "function"           # tool calls (AgentBench-FC)
    c.env.dbbench.engine = "mariadb"      # faithful MySQL engine
    c.env.dbbench.max_rounds = 15         # AgentBench's 15 rounds
    c.env.num_tasks = 20000               # generated training tasks per split
    c.env.max_turns = 15                  # AgentBench's 15 rounds
