"""Config: HF round trip, analytic parameter count, FLOPs, presets."""
import pytest
import torch

from harness_jax.models import qwen3_5


@pytest.mark.parametrize("which", ["dense", "moe"])
def test_num_params_equals_transformers_and_config_roundtrip(which, tiny_hf_dense_dir, tiny_hf_moe_dir):
    import transformers
    path = tiny_hf_dense_dir if which == "dense" else tiny_hf_moe_dir
    cfg = qwen3_5.Qwen3_5Config.from_hf(path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert cfg.num_params() == sum(p.numel() for p in hf.parameters())
    assert qwen3_5.Qwen3_5Config.from_hf(cfg.to_hf_dict()) == cfg
    if cfg.is_moe:
        assert cfg.num_params(active=True) < cfg.num_params()


def test_flops_per_token_and_presets():
    cfg = qwen3_5.presets.get("9b")
    n = cfg.num_params(include_embeddings=False)
    f = cfg.flops_per_token(4096)
    assert 6 * n <= f <= 6 * n * 1.2          # matmuls dominate; attention/GDN add a few percent
    assert cfg.flops_per_token(8192) > f      # sequence-dependent terms grow
    assert 8.5e9 < cfg.num_params() < 9.5e9   # the transformers default text config is the 9B
    moe = qwen3_5.presets.get("35b_a3b")
    assert 30e9 < moe.num_params() < 40e9 and 2.5e9 < moe.num_params(active=True) < 4e9
    assert qwen3_5.presets.get("tiny", scan_layers=True).scan_layers
    with pytest.raises(KeyError, match="from_hf"):
        qwen3_5.presets.get("13b")
    with pytest.raises(qwen3_5.ConfigError, match="remat"):
        qwen3_5.presets.get("tiny", remat="sometimes")
