"""Qwen3.5 text-decoder configuration (dense and MoE).

Field names follow Hugging Face's ``Qwen3_5TextConfig`` / ``Qwen3_5MoeTextConfig`` so that
``from_hf``/``to_hf_dict`` are nearly the identity. Runtime knobs that HF does not have
(``scan_layers``, ``remat``, ``gdn_chunk_size``, ``attention_impl``, the Gated DeltaNet and MoE
kernel choices ``gdn_impl`` / ``moe_*``, ...) live here too, with defaults that never change numerics
(implementations agree to float rounding; a MoE capacity factor > 0 drops tokens, counted).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, Optional, Union

from . import attention, moe

LINEAR = "linear_attention"
FULL = "full_attention"

DENSE_MODEL_TYPES = ("qwen3_5", "qwen3_5_text")
MOE_MODEL_TYPES = ("qwen3_5_moe", "qwen3_5_moe_text")
SUPPORTED_MODEL_TYPES = DENSE_MODEL_TYPES + MOE_MODEL_TYPES


# Decoder-layer rematerialisation (model.py applies them; docs/model.md "Memory plan"):
#   none     keep every activation for the backward pass
#   full     recompute each layer in the backward pass; only its input is kept (on the device)
#   dots     recompute each layer, but keep the outputs of its weight matmuls (no batch dims)
#   offload  as full, with each layer's input kept in host memory (pinned_host), not on the device
REMAT_POLICIES = ("none", "full", "dots", "offload")
GDN_IMPLS = ("jnp", "pallas")                 # gated delta rule: kernels.py (lax.scan) | gdn_pallas.py


class ConfigError(ValueError):
    """A bad configuration value; the message names the field and the fix."""


@dataclasses.dataclass(frozen=True)
class Qwen3_5Config:
    # --- sizes -------------------------------------------------------------------------
    vocab_size: int = 248320
    hidden_size: int = 4096
    intermediate_size: int = 12288          # dense MLP width (ignored by MoE layers)
    num_hidden_layers: int = 32
    layer_types: tuple[str, ...] = ()       # empty -> 3 linear + 1 full, repeated
    # --- gated full attention ----------------------------------------------------------
    num_attention_heads: int = 16
    num_key_value_heads: int = 4
    head_dim: int = 256
    attention_bias: bool = False
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25
    mrope_section: tuple[int, ...] = (11, 11, 10)
    mrope_interleaved: bool = True
    max_position_embeddings: int = 32768
    # --- Gated DeltaNet ----------------------------------------------------------------
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    # --- MoE (num_experts == 0 means dense) ----------------------------------------------
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = True
    router_aux_loss_coef: float = 0.001
    # --- misc --------------------------------------------------------------------------
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    bos_token_id: Optional[int] = None
    eos_token_id: Optional[Union[int, tuple[int, ...]]] = None
    pad_token_id: Optional[int] = None
    # --- runtime knobs (not in HF) -----------------------------------------------------
    scan_layers: bool = False               # scan over repeated layer cycles (compile time O(1) in depth)
    remat: str = "none"                     # decoder-layer rematerialisation policy (REMAT_POLICIES; docs/model.md "Memory plan")
    gdn_chunk_size: int = 64                # chunked gated delta rule chunk length (numerics per size: docs/model.md)
    attention_impl: str = "reference"       # full-attention implementation (models/qwen3_5/attention.py: reference | xla | splash | pallas_gpu)
    attention_block_q: int = 0              # attention query tile (0 = the implementation's default)
    attention_block_kv: int = 0             # attention key/value tile (0 = the implementation's default)
    reduce_scatter_dtype: str = "float32"   # dtype gradients of FSDP-gathered weights are reduce-scattered in ("float32" | "bfloat16")
    gdn_impl: str = "jnp"                   # "jnp" (kernels.py lax.scan rule) | "pallas" (gdn_pallas.py kernels; interpret mode on CPU)
    moe_impl: str = "auto"                  # "auto" (ep on a multi-device mesh, else sorted) | "ep" | "sorted" | "dense" (moe.py)
    moe_capacity_factor: float = 0.0        # ep: rows per destination device = factor * local rows / ep (0 = dropless: exact)
    moe_dispatch: str = "all_to_all"        # ep: "all_to_all" (padded, runs everywhere) | "ragged" (ragged_all_to_all: TPU/GPU only)
    moe_gmm: str = "auto"                   # grouped matmul: "auto" (ragged_dot on TPU, else blocked) | "ragged_dot" | "blocked"

    def __post_init__(self):
        lt = tuple(self.layer_types) or default_layer_types(self.num_hidden_layers)
        object.__setattr__(self, "layer_types", lt)
        object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        if isinstance(self.eos_token_id, list):
            object.__setattr__(self, "eos_token_id", tuple(self.eos_token_id))
        self.validate()

    # ------------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:   # total q/k width of a Gated DeltaNet layer
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:  # total v width of a Gated DeltaNet layer
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:   # channels of the depthwise conv (q, k, v fused)
        return 2 * self.linear_key_dim + self.linear_value_dim

    def validate(self) -> None:
        def bad(field, msg):
            raise ConfigError(f"Qwen3_5Config.{field}: {msg}")

        if len(self.layer_types) != self.num_hidden_layers:
            bad("layer_types", f"has {len(self.layer_types)} entries but num_hidden_layers="
                f"{self.num_hidden_layers}; give one entry per layer")
        for i, t in enumerate(self.layer_types):
            if t not in (LINEAR, FULL):
                bad("layer_types", f"entry {i} is {t!r}; use {LINEAR!r} or {FULL!r}")
        if self.num_attention_heads % max(self.num_key_value_heads, 1):
            bad("num_key_value_heads", f"{self.num_key_value_heads} must divide num_attention_heads="
                f"{self.num_attention_heads}")
        if self.linear_num_value_heads % max(self.linear_num_key_heads, 1):
            bad("linear_num_value_heads", f"{self.linear_num_value_heads} must be a multiple of "
                f"linear_num_key_heads={self.linear_num_key_heads}")
        if self.rotary_dim % 2 or self.rotary_dim > self.head_dim:
            bad("partial_rotary_factor", f"head_dim*partial_rotary_factor={self.rotary_dim} must be even "
                f"and <= head_dim={self.head_dim}")
        if self.is_moe and not 0 < self.num_experts_per_tok <= self.num_experts:
            bad("num_experts_per_tok", f"{self.num_experts_per_tok} must be in [1, num_experts="
                f"{self.num_experts}]")
        if self.remat not in REMAT_POLICIES:
            bad("remat", f"{self.remat!r}; use one of {', '.join(REMAT_POLICIES)}")
        if self.attention_impl not in attention.names():
            bad("attention_impl", f"{self.attention_impl!r}; use one of {', '.join(attention.names())}")
        for f in ("attention_block_q", "attention_block_kv"):
            if getattr(self, f) < 0:
                bad(f, f"{getattr(self, f)} must be >= 0 (0 = the implementation's default)")
        if self.reduce_scatter_dtype not in ("float32", "bfloat16"):
            bad("reduce_scatter_dtype", f"{self.reduce_scatter_dtype!r}; use 'float32' or 'bfloat16'")
        if self.gdn_chunk_size < 1:
            bad("gdn_chunk_size", f"{self.gdn_chunk_size} must be >= 1")
        for field, allowed in (("gdn_impl", GDN_IMPLS), ("moe_impl", moe.IMPLS), ("moe_dispatch", moe.DISPATCHES),
                               ("moe_gmm", moe.GMMS)):
            if getattr(self, field) not in allowed:
                bad(field, f"{getattr(self, field)!r}; use one of {', '.join(map(repr, allowed))}")
        if not self.moe_capacity_factor >= 0:
            bad("moe_capacity_factor", f"{self.moe_capacity_factor} must be >= 0 (0 = dropless)")
        if self.hidden_act != "silu":
            bad("hidden_act", f"{self.hidden_act!r} is not supported; Qwen3.5 uses 'silu'")

    # ------------------------------------------------------------------------------------
    def _layer_params(self, layer_type: str, active: bool) -> tuple[int, int]:
        """(matmul weight params, other params) of one decoder layer."""
        D = self.hidden_size
        other = 2 * D  # input / post-attention norms
        if layer_type == LINEAR:
            C, Vd, Nv = self.linear_conv_dim, self.linear_value_dim, self.linear_num_value_heads
            mm = D * C + D * Vd + 2 * D * Nv + Vd * D
            other += C * self.linear_conv_kernel_dim + 2 * Nv + self.linear_value_head_dim
        else:
            N, Kv, H = self.num_attention_heads, self.num_key_value_heads, self.head_dim
            mm = D * (2 * N * H) + 2 * D * Kv * H + N * H * D
            other += 2 * H + (2 * N * H + 2 * Kv * H + D if self.attention_bias else 0)
        if self.is_moe:
            X = self.num_experts_per_tok if active else self.num_experts
            mm += self.num_experts * D + 3 * X * self.moe_intermediate_size * D
            mm += 3 * D * self.shared_expert_intermediate_size + D
        else:
            mm += 3 * D * self.intermediate_size
        return mm, other

    def num_params(self, active: bool = False, include_embeddings: bool = True) -> int:
        """Parameter count (analytic). ``active``: only the top-k experts of MoE layers count."""
        V, D = self.vocab_size, self.hidden_size
        total = D  # final norm
        for t in self.layer_types:
            mm, other = self._layer_params(t, active)
            total += mm + other
        if include_embeddings:
            total += V * D * (1 if self.tie_word_embeddings else 2)
        elif not self.tie_word_embeddings:
            total += V * D  # the LM head is a matmul, not an embedding lookup
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward = 3x forward) at sequence length ``seq_len``.

        ``6 * N_matmul`` over every weight matmul (active experts only, LM head included, the
        embedding lookup excluded) plus sequence-dependent terms: causal full attention
        ``3 * 2 * 2 * heads*head_dim * seq_len/2`` per layer (QK^T and PV over the average
        causal context), and for Gated DeltaNet layers the chunked delta rule
        (``3 * heads * (6*A*E + 2*L*(2*A + E) + L*(A + E))`` with chunk L = gdn_chunk_size:
        state read/write/update plus intra-chunk scores, solve and mixing) and the depthwise conv.
        """
        V, D = self.vocab_size, self.hidden_size
        mm = V * D  # LM head
        attn = 0.0
        for t in self.layer_types:
            m, _ = self._layer_params(t, active=True)
            mm += m
            if t == FULL:
                attn += 3 * 2 * 2 * self.num_attention_heads * self.head_dim * seq_len / 2
            else:
                A, E, Nv = self.linear_key_head_dim, self.linear_value_head_dim, self.linear_num_value_heads
                L = min(self.gdn_chunk_size, seq_len)
                attn += 3 * Nv * (6 * A * E + 2 * L * (2 * A + E) + L * (A + E))
                attn += 3 * 2 * self.linear_conv_dim * self.linear_conv_kernel_dim
        return 6.0 * mm + attn

    def replace(self, **kw) -> "Qwen3_5Config":
        return dataclasses.replace(self, **kw)

    # ------------------------------------------------------------------------------------
    @classmethod
    def from_hf(cls, path_or_config: Union[str, os.PathLike, Mapping[str, Any], Any], **overrides) -> "Qwen3_5Config":
        """From a checkpoint directory, a config.json path, a dict or an HF config object.

        Accepts flat text configs and nested ``text_config`` (Qwen3_5ForConditionalGeneration).
        """
        d = _as_dict(path_or_config)
        top_type = d.get("model_type")
        if "text_config" in d and d["text_config"] is not None:
            outer = d
            d = dict(_as_dict(d["text_config"]))
            if "tie_word_embeddings" in outer and "tie_word_embeddings" not in d:
                d["tie_word_embeddings"] = outer["tie_word_embeddings"]
            d.setdefault("model_type", (top_type or "") + "_text")
        model_type = d.get("model_type", top_type)
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"config.json: model_type={model_type!r} is not supported; harness_jax loads "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        rope = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
        if rope.get("rope_type", "default") not in ("default", None):
            raise ConfigError(f"config.json: rope_parameters.rope_type={rope.get('rope_type')!r} is not "
                              f"supported; only 'default' (Qwen3.5's) is")
        kw = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for k, v in d.items():
            if k in names:
                kw[k] = tuple(v) if isinstance(v, list) else v
        kw["rope_theta"] = rope.get("rope_theta", d.get("rope_theta", cls.rope_theta))
        kw["partial_rotary_factor"] = rope.get("partial_rotary_factor", d.get("partial_rotary_factor", 1.0))
        if "mrope_section" in rope:
            kw["mrope_section"] = tuple(rope["mrope_section"])
        if "mrope_interleaved" in rope:
            kw["mrope_interleaved"] = bool(rope["mrope_interleaved"])
        if model_type in DENSE_MODEL_TYPES:
            for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "shared_expert_intermediate_size"):
                kw[k] = 0
        elif not kw.get("num_experts"):
            raise ConfigError("config.json: a qwen3_5_moe model needs num_experts > 0")
        kw.update(overrides)
        return cls(**kw)

    def to_hf_dict(self, architecture: str = "auto") -> dict:
        """A flat text config.json that transformers loads (Qwen3_5ForCausalLM / MoE)."""
        if architecture == "auto":
            architecture = "Qwen3_5MoeForCausalLM" if self.is_moe else "Qwen3_5ForCausalLM"
        d = {
            "architectures": [architecture],
            "model_type": "qwen3_5_moe_text" if self.is_moe else "qwen3_5_text",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "layer_types": list(self.layer_types),
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "attention_bias": self.attention_bias,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": self.rope_theta,
                "partial_rotary_factor": self.partial_rotary_factor,
                "mrope_section": list(self.mrope_section),
                "mrope_interleaved": self.mrope_interleaved,
            },
            "max_position_embeddings": self.max_position_embeddings,
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "rms_norm_eps": self.rms_norm_eps,
            "hidden_act": self.hidden_act,
            "tie_word_embeddings": self.tie_word_embeddings,
            "initializer_range": self.initializer_range,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_id) if isinstance(self.eos_token_id, tuple) else self.eos_token_id,
            "pad_token_id": self.pad_token_id,
        }
        if self.is_moe:
            d.update(num_experts=self.num_experts, num_experts_per_tok=self.num_experts_per_tok,
                     moe_intermediate_size=self.moe_intermediate_size,
                     shared_expert_intermediate_size=self.shared_expert_intermediate_size,
                     router_aux_loss_coef=self.router_aux_loss_coef)
        else:
            d["intermediate_size"] = self.intermediate_size
        return d


def default_layer_types(n: int, interval: int = 4) -> tuple[str, ...]:
    return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(n))


def _as_dict(obj) -> dict:
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, (str, os.PathLike)):
        p = os.fspath(obj)
        if os.path.isdir(p):
            p = os.path.join(p, "config.json")
        if not os.path.exists(p):
            raise ConfigError(f"{p}: no config.json found; point at a Hugging Face checkpoint directory")
        with open(p) as f:
            return json.load(f)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise ConfigError(f"cannot read a Qwen3.5 config from {type(obj).__name__}; pass a directory, "
                      f"a config.json path, a dict or a transformers config")
