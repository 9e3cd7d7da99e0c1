"""Rollout engines: embedded JAX engine, SGLang client, SGLang-compatible server, chat client.

``JaxEngine`` needs jax/flax (always installed). Imports are lazy so that
``from harness_jax.sampling import SGLangClient`` does not build an engine or compile anything.
"""
from harness_jax.lazy import lazy_getattr
from harness_jax.sampling.types import (FINISH_ABORT, FINISH_LENGTH, FINISH_STOP, GenerateRequest,
                                        GenerateResult, RolloutEngine, SamplingParams, StreamChunk)

__all__ = ["JaxEngine", "SamplingParams", "SGLangClient", "GenerateRequest", "GenerateResult",
           "RolloutEngine", "StreamChunk", "EngineServer", "OpenAIChatClient", "ChatClientConfig",
           "WeightSyncReport", "FINISH_STOP", "FINISH_LENGTH", "FINISH_ABORT"]

_LAZY = {
    "JaxEngine": "harness_jax.sampling.engine",
    "SGLangClient": "harness_jax.sampling.sglang_client",
    "WeightSyncReport": "harness_jax.sampling.sglang_sync",
    "EngineServer": "harness_jax.sampling.server",
    "OpenAIChatClient": "harness_jax.sampling.openai_client",
    "ChatClientConfig": "harness_jax.sampling.openai_client",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
