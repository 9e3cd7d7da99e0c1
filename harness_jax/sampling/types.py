"""Request/response types shared by every rollout engine (embedded JAX, SGLang client, server).

A log-probability here always means ``log_softmax(logits / temperature)`` of the sampled token
over the full vocabulary (SGLang's definition); at temperature 0 (greedy) it is the plain
``log_softmax(logits)``.
"""
from __future__ import annotations

import abc
import asyncio
import dataclasses
from typing import Optional, Sequence

FINISH_STOP = "stop"      # a stop token id or stop string was produced
FINISH_LENGTH = "length"  # max_new_tokens (or the engine's max_len) was reached
FINISH_ABORT = "abort"    # aborted (weight update, explicit abort, shutdown); tokens are partial


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0          # 0.0 means greedy
    top_p: float = 1.0
    top_k: int = -1                   # -1: disabled
    min_p: float = 0.0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()        # stop strings (need a detokenizer on the engine)
    seed: Optional[int] = None        # per-request seed; None = engine-chosen
    ignore_eos: bool = False          # True: the model's EOS ids do not end the request

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"SamplingParams.top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1), got {self.min_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        object.__setattr__(self, "stop", tuple(self.stop))


@dataclasses.dataclass
class GenerateRequest:
    input_ids: Sequence[int]
    params: SamplingParams
    request_id: str
    # Multi-turn episodes: requests with the same episode_id continue the same cached state
    # (the engine may append only the new tokens); None means a one-off request.
    episode_id: Optional[str] = None


@dataclasses.dataclass
class GenerateResult:
    request_id: str
    token_ids: list[int]
    logprobs: list[float]             # one per generated token, aligned with token_ids
    finish_reason: str                # FINISH_STOP | FINISH_LENGTH | FINISH_ABORT
    weight_version: int               # version that produced the tokens (the last one if mixed)
    token_versions: Optional[list[int]] = None  # per-token weight version when it changed mid-request
    stop_reason: Optional[object] = None        # the stop token id / string that matched, if any
    prompt_tokens: int = 0
    cached_tokens: int = 0            # prompt tokens whose state was reused (continuation)
    message: str = ""                 # why it aborted, when it did


@dataclasses.dataclass
class StreamChunk:
    """What a streaming request produced since the previous chunk.

    ``token_ids`` / ``logprobs`` / ``token_versions`` are the *new* tokens (a delta); the last
    chunk of a request carries the final ``result`` (its delta may be empty, e.g. an abort).
    """
    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    token_versions: list[int]
    result: Optional[GenerateResult] = None


class RolloutEngine(abc.ABC):
    """Async token-in/token-out generation with behaviour log-probabilities."""

    @abc.abstractmethod
    async def generate(self, request: GenerateRequest) -> GenerateResult:
        ...

    async def end_episode(self, episode_id: str) -> None:
        """Releases whatever cached state belongs to an episode (no-op by default)."""

    @property
    @abc.abstractmethod
    def weight_version(self) -> int:
        ...

    def generate_sync(self, request: GenerateRequest) -> GenerateResult:
        return asyncio.run(self.generate(request))
