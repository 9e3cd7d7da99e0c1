"""Test-wide set-up: 8 fake CPU devices so every sharding test runs here, one persistent JAX
compilation cache for the session and every process it starts, a per-test watchdog, the
grouping and order of tests under pytest-xdist, and the closing summaries (tests skipped for a
missing service, test time per directory).

XLA_FLAGS and the cache variables must be set before jax is imported anywhere, which is why this
happens at the top of the root conftest (pytest imports it before any test module).
"""
import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# torch (the numerical reference) runs one thread per process: with two xdist workers on two cores
# its OpenMP pool spun against the other worker. Measured on the 2-core machine under load:
# tests/models/test_gdn_numerics.py's stress grid at 128 tokens spent 47 s in torch with the
# default pool and 1.7 s with one thread; test_gdn_numerics + test_parity + test_attention (fresh
# compilation cache each) 287 s -> 191 s wall, the same 29 passed.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# JAX's persistent compilation cache (harness_jax.compile_cache: JAX_COMPILATION_CACHE_DIR, else
# HARNESS_JAX_COMPILATION_CACHE, else ~/.cache/harness_jax/jax_compilation; .ci/run points it at
# the run's temp dir). Exported as jax's own variables, so every launcher subprocess a test starts
# (and every xdist worker) reads and fills the same cache.
from harness_jax import compile_cache  # noqa: E402  (imports no jax)

compile_cache.export_env()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)
# the watchdog, xdist scheduling and the closing summaries (tests/ci_plugin.py)
pytest_plugins = ["tests.ci_plugin"]


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a few minutes on 2 cores; still part of CI")


# --------------------------------------------------------------------------------------------
# Tiny random Qwen3.5 checkpoints (owned by the model package; shared by every area's tests).
# Made by transformers itself (torch fp32, fixed seed) and written with save_pretrained, so a
# test that loads them exercises the real on-disk format. Layers mix linear (Gated DeltaNet)
# and full attention. The zero-centred RMSNorm weights, gated-norm weights, A_log and dt_bias
# are perturbed away from their HF init values so parity tests see every term of the math.
# --------------------------------------------------------------------------------------------

TINY_LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "full_attention"]


def _tiny_text_kwargs():
    return dict(
        vocab_size=512, hidden_size=64, num_hidden_layers=4, layer_types=list(TINY_LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        max_position_embeddings=1024, initializer_range=0.05, rms_norm_eps=1e-6,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )


def _perturb_hf_norms(model, torch, seed):
    """Move norm weights, A_log and dt_bias off their constant init so they matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("dt_bias") or name.endswith("A_log"):
                p.add_(0.2 * torch.randn(p.shape, generator=g))


def tiny_hf_model(moe: bool, seed: int):
    """The tiny random transformers model behind the fixtures below (eval mode, not saved)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    kw = _tiny_text_kwargs()
    if moe:
        cfg = transformers.Qwen3_5MoeTextConfig(
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, tie_word_embeddings=True, **kw)
        model = transformers.Qwen3_5MoeForCausalLM(cfg)
    else:
        cfg = transformers.Qwen3_5TextConfig(intermediate_size=128, tie_word_embeddings=False, **kw)
        model = transformers.Qwen3_5ForCausalLM(cfg)
    _perturb_hf_norms(model, torch, seed + 1)
    return model.eval()


def _save_tiny_hf(out_dir, moe: bool, seed: int):
    tiny_hf_model(moe, seed).save_pretrained(str(out_dir))
    return str(out_dir)


@pytest.fixture(scope="session")
def tiny_hf_dense_dir(tmp_path_factory):
    """A tiny random dense Qwen3.5 checkpoint dir (Qwen3_5ForCausalLM, vocab 512, hidden 64,
    4 layers [linear, full, linear, full], untied LM head), written by transformers."""
    return _save_tiny_hf(tmp_path_factory.mktemp("tiny_hf_dense"), moe=False, seed=0)


@pytest.fixture(scope="session")
def tiny_hf_moe_dir(tmp_path_factory):
    """A tiny random MoE Qwen3.5 checkpoint dir (Qwen3_5MoeForCausalLM, 4 experts top-2, shared
    expert, vocab 512, hidden 64, 4 layers [linear, full, linear, full], tied embeddings)."""
    return _save_tiny_hf(tmp_path_factory.mktemp("tiny_hf_moe"), moe=True, seed=1)
