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


@pytest.fixture(scope="session")
def loop_world(qwen_tok, tmp_path_factory):
    """Tasks of three categories, the scripted policy and a frozen pool of H0 + four operator
    siblings whose validation results are real runs (``loopkit``)."""
    from . import loopkit
    return loopkit.world(qwen_tok, tmp_path_factory.mktemp("pool"))
