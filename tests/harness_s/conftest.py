"""Shared fixtures of the Harness-S tests."""
import pytest

from .doubles import ChatServer


@pytest.fixture(scope="session")
def qwen_tok():
    from harness_jax.sampling.tokenizer import load_tokenizer

    return load_tokenizer()


@pytest.fixture()
def chat_server():
    """A scripted OpenAI-compatible server (test double, real HTTP); set ``.handler``."""
    srv = ChatServer()
    yield srv
    srv.close()
