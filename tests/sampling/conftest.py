"""Shared, compiled engines for the sampling tests (compilation dominates their cost).

One dense engine serves every module (session scope); tests that change its state (weights,
pause) restore it before they return.
"""
import pytest

ENGINE_KW = dict(max_slots=4, max_len=512, prefill_buckets=(32,), decode_steps=4, prefill_rows=1)


@pytest.fixture(scope="session")
def dense_model(tiny_hf_dense_dir):
    from harness_jax.models import qwen3_5
    return qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32")


@pytest.fixture(scope="session")
def tokenizer():
    from harness_jax.sampling.tokenizer import load_tokenizer
    return load_tokenizer()


@pytest.fixture(scope="session")
def dense_engine(dense_model, tokenizer):
    from harness_jax.sampling import JaxEngine
    eng = JaxEngine(dense_model, tokenizer=tokenizer, **ENGINE_KW)
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def hf_dense(tiny_hf_dense_dir):
    import torch
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_hf_dense_dir, dtype=torch.float32).eval()
