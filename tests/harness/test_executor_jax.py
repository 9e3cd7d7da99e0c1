"""Token exactness with the real JaxEngine on the tiny random Qwen3.5 checkpoint.

The tiny model has a 512-token vocabulary, so the episode uses a small byte-level tokenizer
built here (256 byte tokens + the chat special tokens + padding up to 512) instead of the
248k-token Qwen vocabulary; the executor only needs encode/decode and the special-token ids.
The environment is the scripted test double (the tiny model's output is random bytes).
"""
import asyncio

import numpy as np
import pytest

from harness_jax.envs.base import Task
from harness_jax.harness.executor import ExecutorConfig, run_episodes
from harness_jax.harness.specs import ExecutionRules, HarnessSpec, MemoryPolicy
from harness_jax.sampling.types import RolloutEngine

from .doubles import ScriptedEnv

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<tool_response>", "</tool_response>"]


@pytest.fixture(scope="module")
def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from harness_jax.sampling.tokenizer import _byte_to_unicode

    b2u = _byte_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS + [f"<|pad_{i}|>" for i in range(512 - 256 - len(SPECIALS))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    assert len(fast) == 512
    return fast


class Recording(RolloutEngine):
    """Forwards to the real engine and keeps what it returned (to compare with the trajectory)."""

    def __init__(self, inner):
        self.inner = inner
        self.results = {}

    @property
    def weight_version(self):
        return self.inner.weight_version

    async def generate(self, request):
        res = await self.inner.generate(request)
        self.results[request.request_id] = (list(request.input_ids), res)
        return res

    async def end_episode(self, episode_id):
        await self.inner.end_episode(episode_id)


@pytest.mark.slow
def test_recorded_tokens_are_exactly_what_the_engine_returned(tiny_hf_dense_dir, byte_tokenizer):
    import jax.numpy as jnp

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import JaxEngine

    model = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32")
    im_end = byte_tokenizer.convert_tokens_to_ids("<|im_end|>")
    inner = JaxEngine(model, max_slots=4, max_len=512, prefill_buckets=(64,), decode_steps=4,
                      eos_token_ids=[im_end], seed=0)
    try:
        eng = Recording(inner)
        h = HarnessSpec(system_prompt="Be brief.", temperature=1.0,
                        rules=ExecutionRules(max_turns=3, max_tokens_per_turn=12),
                        memory=MemoryPolicy(max_context_tokens=512))
        tasks = [Task("toy", {"q": "2+2?"}), Task("toy", {"q": "3+3?"})]
        trajs = asyncio.run(run_episodes(eng, lambda: ScriptedEnv("text"), tasks, h,
                                         n_per_task=1, tokenizer=byte_tokenizer,
                                         config=ExecutorConfig(concurrency=2, seed=7)))
    finally:
        inner.close()
    assert len(trajs) == 2 and not any(t.infra_error for t in trajs)
    for traj in trajs:
        seg = traj.segments[0]
        # walk the turns: each turn's sampled span is the engine result for that request,
        # and the request's input was exactly the segment prefix before it
        results = [eng.results[rid] for rid in sorted(eng.results) if rid.startswith(
            traj.episode_id)]
        assert len(results) == len(traj.turns) >= 1
        for ev, (inp, res) in zip(traj.turns, results):
            assert inp == seg.token_ids[:ev.start]
            span = slice(ev.start, ev.start + len(res.token_ids))
            assert seg.token_ids[span] == res.token_ids
            assert seg.loss_mask[span] == [1] * len(res.token_ids)
            assert seg.logprobs[span] == pytest.approx(res.logprobs)
        assert sum(seg.loss_mask) == sum(len(r.token_ids) for _, r in results)
        # the recorded log-probs are the model's log-softmax of the sampled tokens (T=1)
        ids = np.asarray(seg.token_ids, dtype=np.int32)[None]
        logits = np.asarray(model(jnp.asarray(ids)), dtype=np.float64)[0]
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1,
                                                                                 keepdims=True)) \
            - logits.max(-1, keepdims=True)
        pos = [i for i, m in enumerate(seg.loss_mask) if m]
        want = [logp[i - 1, seg.token_ids[i]] for i in pos]
        got = [seg.logprobs[i] for i in pos]
        assert np.allclose(got, want, atol=2e-3), np.max(np.abs(np.subtract(got, want)))
        ts = traj.to_token_segments()[0]
        assert ts.token_ids == seg.token_ids and ts.rollout_logprobs == seg.logprobs
