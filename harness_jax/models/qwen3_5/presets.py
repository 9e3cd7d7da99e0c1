"""Named Qwen3.5 configurations.

Public sizes are included only where the hyperparameters are known from a source we can cite:
``9b`` is transformers' default ``Qwen3_5TextConfig`` (documented there as "Qwen3.5-9B style")
and ``35b_a3b`` is its default ``Qwen3_5MoeTextConfig`` ("Qwen3.5-35B-A3B style"). For any
other released size load the config from the checkpoint: ``Qwen3_5Config.from_hf(dir)``.
The small presets are Qwen3.5-shaped (3 linear + 1 full attention, GQA, partial RoPE, the
same head-size ratios) for tests and CPU benchmarks.
"""
from __future__ import annotations

from .config import FULL, LINEAR, Qwen3_5Config

_TINY_TYPES = (LINEAR, FULL, LINEAR, FULL)


def _tiny(**kw):
    base = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                layer_types=_TINY_TYPES, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                partial_rotary_factor=0.5, mrope_section=(2, 1, 1), linear_key_head_dim=16,
                linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                max_position_embeddings=1024, initializer_range=0.05, bos_token_id=1, eos_token_id=2,
                pad_token_id=0)
    base.update(kw)
    return Qwen3_5Config(**base)


PRESETS = {
    # same shapes as the tests/conftest.py tiny checkpoints
    "tiny": lambda: _tiny(),
    "tiny_moe": lambda: _tiny(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                              shared_expert_intermediate_size=48, tie_word_embeddings=True),
    # ~10M parameters (Qwen3.5-shaped, 8 layers = 2 cycles of 3 linear + 1 full)
    "small_10m": lambda: Qwen3_5Config(
        vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=1, head_dim=64, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_num_key_heads=4, linear_num_value_heads=8,
        mrope_section=(3, 3, 2), tie_word_embeddings=True, gdn_chunk_size=32),
    # ~80M parameters (12 layers = 3 cycles)
    "medium_80m": lambda: Qwen3_5Config(
        vocab_size=16384, hidden_size=640, intermediate_size=1920, num_hidden_layers=12,
        num_attention_heads=8, num_key_value_heads=2, head_dim=64, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8,
        mrope_section=(3, 3, 2), tie_word_embeddings=True, gdn_chunk_size=32),
    # transformers' default Qwen3_5TextConfig ("Qwen3.5-9B style")
    "9b": lambda: Qwen3_5Config(
        vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
        num_attention_heads=16, num_key_value_heads=4, head_dim=256, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
        partial_rotary_factor=0.25, mrope_section=(11, 11, 10), rope_theta=10000.0,
        max_position_embeddings=32768, tie_word_embeddings=False),
    # transformers' default Qwen3_5MoeTextConfig ("Qwen3.5-35B-A3B style")
    "35b_a3b": lambda: Qwen3_5Config(
        vocab_size=248320, hidden_size=2048, num_hidden_layers=40, num_attention_heads=16,
        num_key_value_heads=2, head_dim=256, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_num_key_heads=16, linear_num_value_heads=32, partial_rotary_factor=0.25,
        mrope_section=(11, 11, 10), num_experts=256, num_experts_per_tok=8, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, max_position_embeddings=32768, tie_word_embeddings=False),
}


def names() -> list[str]:
    return sorted(PRESETS)


def get(name: str, **overrides) -> Qwen3_5Config:
    """A preset config by name, with optional field overrides (e.g. ``scan_layers=True``)."""
    key = name.lower().replace("-", "_").replace(".", "_")
    key = {"0_8b": "0.8b"}.get(key, key)
    if key not in PRESETS:
        raise KeyError(f"Qwen3.5 preset {name!r} is not defined; known presets: {', '.join(names())}. For other "
                       f"released sizes use Qwen3_5Config.from_hf(<checkpoint dir or config.json>)")
    cfg = PRESETS[key]()
    return cfg.replace(**overrides) if overrides else cfg
