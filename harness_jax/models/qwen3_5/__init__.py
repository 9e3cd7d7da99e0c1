"""Qwen3.5 text decoder (dense and MoE) in Flax NNX with Hugging Face parity.

See docs/contracts.md for the interface other packages use.
"""
from . import attention, kernels, paged_attention, presets
from .cache import (Qwen3_5Cache, Qwen3_5PagedCache, init_cache, init_paged_cache, reset_cache_rows,
                    reset_paged_rows, shard_cache)
from .checkpoint import CheckpointError, load_hf, save_hf
from .config import FULL, LINEAR, REMAT_POLICIES, ConfigError, Qwen3_5Config
from .model import Qwen3_5ForCausalLM, decode_layout

__all__ = [
    "Qwen3_5Config", "ConfigError", "CheckpointError", "Qwen3_5ForCausalLM", "Qwen3_5Cache", "Qwen3_5PagedCache",
    "decode_layout", "init_cache", "init_paged_cache", "reset_cache_rows", "reset_paged_rows", "shard_cache",
    "paged_attention", "load_hf", "save_hf", "presets", "kernels", "attention", "LINEAR", "FULL", "REMAT_POLICIES",
]
