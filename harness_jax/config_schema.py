"""Typed pieces of the experiment config that more than one layer reads.

* **Environment sections.** Each environment family owns one typed section of the experiment
  config, ``config.env.<family>`` (its constructor and task-split options, one comment per field),
  described by an ``EnvSection`` that the family passes to ``registry.EnvSpec(config=...)`` when it
  registers itself (``harness_jax/envs/registry.py``), next to its code::

      SECTION = config_schema.EnvSection(section=_section, env_kwargs=_env_kwargs,
                                         split_kwargs=_split_kwargs,
                                         choices={"partition": ("hash", "agentbench")})

  ``env_kwargs(env)`` / ``split_kwargs(env)`` receive the whole ``config.env`` (so they can read the
  shared fields ``protocol``, ``num_tasks``, ``task_seed`` and their own ``env.<family>``) and return
  ``registry.make`` / ``registry.load_split`` keyword arguments. ``choices`` and ``at_least`` are
  facts about the section's fields that ``harness_jax.config_validation`` (the one place configs
  are validated) checks for the selected family. ``experiments/configs/common.base_config()`` adds
  the section of every registered family, so ``--config.env.dbbench.engine=mariadb`` works for any
  preset; there is no central list to edit for a new family.
* **Model config.** ``model_config(config.model)``: the Qwen3.5 config of a run (HF config.json or a
  named preset, then the typed ``model.arch`` fields, then the runtime knobs), shared by config
  validation and the builders.

This module imports nothing from the rest of ``harness_jax`` at import time, so every layer (env
families included) can import it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import ml_collections
from ml_collections import config_dict


# ---------------------------------------------------------------------------------------------
# environment sections
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class EnvSection:
    """The typed ``config.env.<family>`` section of one environment family."""

    section: Callable[[], ml_collections.ConfigDict]  # the typed section, defaults = the family's
    env_kwargs: Callable[[Any], dict]                 # config.env -> registry.make(name, **kw)
    split_kwargs: Callable[[Any], dict]               # config.env -> registry.load_split(name, split, **kw)
    choices: Mapping[str, tuple] = dataclasses.field(default_factory=dict)   # field -> allowed values
    at_least: Mapping[str, float] = dataclasses.field(default_factory=dict)  # field -> smallest allowed value

    def __post_init__(self):
        for field in ("section", "env_kwargs", "split_kwargs"):
            if not callable(getattr(self, field)):
                raise TypeError(f"EnvSection.{field} must be callable")
        fields = set(self.section().keys())
        unknown = sorted((set(self.choices) | set(self.at_least)) - fields)
        if unknown:
            raise ValueError(f"EnvSection: choices/at_least name field(s) {unknown} that the "
                             f"section does not have ({sorted(fields)})")


# mesh.chip: accelerators a preset can be sized for, with their HBM (bytes) and bf16 dense peak
# (FLOP/s) as the vendors state them (train/aot.py budgets, the MFU peak without log.peak_flops)
CHIP_HBM = {"h100": 80e9, "h200": 141e9, "v5p": 95e9, "v6e": 32e9}
CHIP_BF16_PEAK = {"h100": 989e12, "h200": 989e12, "v5p": 459e12, "v6e": 918e12}

# model.tokenizer_pretokenizer choices (train/task_tokenizer.py implements them)
TOKENIZER_PRETOKENIZERS = ("bytelevel", "isolate")


def or_none(v):
    """'' / () / 0 in a typed field mean "the family's default" (None)."""
    return None if v in ("", (), 0, None) else v


# ---------------------------------------------------------------------------------------------
# episode workers
# ---------------------------------------------------------------------------------------------
WORKER_BACKENDS = ("inprocess", "processes", "ray")


def workers_section() -> ml_collections.ConfigDict:
    """``config.workers``: where episodes run (rollouts, evaluation, Harness-S validation,
    Harness-R1 reruns); ``harness_jax.harness.workers`` documents the backends."""
    w = ml_collections.ConfigDict()
    w.backend = "inprocess"           # "inprocess" (the driver's event loop) | "processes" (local worker processes) | "ray" (Ray actors)
    w.num_workers = 2                 # worker processes / Ray actors (ignored in-process)
    w.slots = 16                      # episodes in flight per worker (families that are not thread-safe, e.g. ALFWorld, run one per worker)
    w.ray_address = ""                # ray: cluster address for ray.init ("" = a private local Ray on this machine; "auto" = the running cluster)
    w.ray_cpus = 1.0                  # ray: CPUs each worker actor reserves
    return w


# ---------------------------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------------------------
def arch_section() -> ml_collections.ConfigDict:
    """``config.model.arch``: Qwen3_5Config fields replacing the preset's (None = keep the
    preset's value; ignored with ``model.hf_path``, whose config.json is the truth, except the
    kernel choices at the end, which are not architecture)."""
    a = ml_collections.ConfigDict()
    a.vocab_size = config_dict.placeholder(int)              # vocabulary rows (>= the tokenizer's size)
    a.hidden_size = config_dict.placeholder(int)             # model width
    a.intermediate_size = config_dict.placeholder(int)       # dense SwiGLU width
    a.num_hidden_layers = config_dict.placeholder(int)       # decoder layers
    a.layer_types = config_dict.placeholder(tuple)           # per-layer "linear_attention" | "full_attention" (() = 3 linear : 1 full)
    a.num_attention_heads = config_dict.placeholder(int)     # gated attention query heads
    a.num_key_value_heads = config_dict.placeholder(int)     # gated attention kv heads (GQA)
    a.head_dim = config_dict.placeholder(int)                # attention head width
    a.linear_num_key_heads = config_dict.placeholder(int)    # Gated DeltaNet q/k heads
    a.linear_num_value_heads = config_dict.placeholder(int)  # Gated DeltaNet v heads
    a.linear_key_head_dim = config_dict.placeholder(int)     # Gated DeltaNet q/k head width
    a.linear_value_head_dim = config_dict.placeholder(int)   # Gated DeltaNet v head width
    a.num_experts = config_dict.placeholder(int)             # MoE experts (0 = dense MLP)
    a.num_experts_per_tok = config_dict.placeholder(int)     # MoE top-k
    a.moe_intermediate_size = config_dict.placeholder(int)   # per-expert SwiGLU width
    a.shared_expert_intermediate_size = config_dict.placeholder(int)  # shared expert width
    a.tie_word_embeddings = config_dict.placeholder(bool)    # LM head shares the embedding matrix
    a.max_position_embeddings = config_dict.placeholder(int)  # longest sequence the RoPE tables cover
    a.eos_token_id = config_dict.placeholder(int)            # end-of-turn token id of the tokenizer
    a.pad_token_id = config_dict.placeholder(int)            # padding token id of the tokenizer
    # kernel choices (runtime knobs: they also apply with model.hf_path; docs/model.md)
    a.gdn_impl = config_dict.placeholder(str)                # Gated DeltaNet: "jnp" (lax.scan reference) | "pallas" (TPU Mosaic / GPU Triton kernels)
    a.moe_impl = config_dict.placeholder(str)                # MoE: "auto" (expert parallel on a multi-device mesh) | "ep" | "sorted" | "dense"
    a.moe_capacity_factor = config_dict.placeholder(float)   # expert parallel: 0 = dropless, else rows per device pair = factor * rows / ep (drops counted)
    a.moe_dispatch = config_dict.placeholder(str)            # expert parallel: "all_to_all" (padded; any backend) | "ragged" (ragged_all_to_all; TPU/GPU)
    a.moe_gmm = config_dict.placeholder(str)                 # grouped matmul: "auto" | "ragged_dot" | "blocked"
    return a


KERNEL_FIELDS = ("gdn_impl", "moe_impl", "moe_capacity_factor", "moe_dispatch", "moe_gmm")


def arch_overrides(model) -> dict:
    """The set (non-None) fields of ``config.model.arch`` as Qwen3_5Config keyword arguments."""
    return {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in model.arch.items()
            if v is not None}


def runtime_overrides(model) -> dict:
    """Runtime knobs of the model config that come from ``config.model`` (with or without
    hf_path): rematerialisation, layer scanning, the attention implementation and its tiles, the
    dtype gradients of FSDP-gathered weights are reduce-scattered in (the memory plan), and the set
    kernel choices of ``model.arch`` (Gated DeltaNet, MoE)."""
    kernels = {k: v for k, v in arch_overrides(model).items() if k in KERNEL_FIELDS}
    return dict(remat=model.remat, scan_layers=bool(model.scan_layers), attention_impl=model.attention,
                attention_block_q=int(model.attention_block_q), attention_block_kv=int(model.attention_block_kv),
                reduce_scatter_dtype=model.reduce_scatter_dtype, **kernels)


def model_config(model):
    """The run's Qwen3_5Config from ``config.model``: ``hf_path``'s config.json (its architecture
    is the truth) or the named preset with the ``arch`` fields, plus the runtime knobs."""
    from harness_jax.models import qwen3_5

    if model.hf_path:
        return qwen3_5.Qwen3_5Config.from_hf(model.hf_path, **runtime_overrides(model))
    over = arch_overrides(model)
    if "num_hidden_layers" in over and "layer_types" not in over:
        over["layer_types"] = ()      # a new depth gets the default 3 linear : 1 full pattern
    over.update(runtime_overrides(model))
    return qwen3_5.presets.get(model.preset).replace(**over)
