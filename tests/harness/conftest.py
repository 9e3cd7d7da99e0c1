"""Shared fixtures of the harness tests (the tokenizer is loaded once per session)."""
import pytest


@pytest.fixture(scope="session")
def qwen_tok():
    from harness_jax.sampling.tokenizer import load_tokenizer

    return load_tokenizer()
