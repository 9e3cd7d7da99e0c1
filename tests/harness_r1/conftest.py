"""Shared fixtures of the Harness-R1 tests."""
import pytest


@pytest.fixture(scope="session")
def qwen_tok():
    from harness_jax.sampling.tokenizer import load_tokenizer

    return load_tokenizer()
