"""Embedded JaxEngine on the tiny random Qwen3.5 checkpoints (dense and MoE), every test on
both cache kinds (paged, the default, and contiguous)."""
import concurrent.futures
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams
from harness_jax.sampling.sampler import token_logprobs
from tests.sampling.conftest import ENGINE_KW

# ragged on purpose: 1..40 tokens (40 > the 32-token prefill chunk), more prompts than slots
PROMPTS = [[5, 6, 7], list(range(10, 50)), [3], [4, 5, 100, 200, 7, 8, 9], list(range(300, 312))]


def _hf_greedy(hf, prompt, n):
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                          pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def contiguous_engine(dense_model, tokenizer):
    eng = JaxEngine(dense_model, tokenizer=tokenizer, cache_kind="contiguous", **ENGINE_KW)
    yield eng
    eng.close()


@pytest.fixture(scope="module", params=["paged", "contiguous"])
def engine(request, dense_engine):
    """The shared (paged) dense engine, or a contiguous-cache one."""
    if request.param == "paged":
        assert dense_engine.cache_kind == "paged"
        return dense_engine
    return request.getfixturevalue("contiguous_engine")


@pytest.fixture(scope="module", params=["paged", "contiguous"])
def moe_setup(request, tiny_hf_moe_dir):
    import transformers
    from harness_jax.models import qwen3_5
    eng = JaxEngine(qwen3_5.load_hf(tiny_hf_moe_dir, dtype="float32"), cache_kind=request.param, **ENGINE_KW)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_hf_moe_dir, dtype=torch.float32).eval()
    yield eng, hf
    eng.close()


@pytest.mark.slow
def test_greedy_matches_transformers_dense(engine, hf_dense):
    outs = engine.generate_batch(PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0))
    for p, o in zip(PROMPTS, outs):
        assert o.token_ids == _hf_greedy(hf_dense, p, 10), p
        assert o.finish_reason in ("stop", "length") and len(o.logprobs) == len(o.token_ids)


@pytest.mark.slow
def test_greedy_matches_transformers_moe(moe_setup):
    eng, hf = moe_setup
    outs = eng.generate_batch(PROMPTS, SamplingParams(max_new_tokens=10, temperature=0.0))
    for p, o in zip(PROMPTS, outs):
        assert o.token_ids == _hf_greedy(hf, p, 10), p


@pytest.fixture(scope="module")
def learner_logits(dense_model):
    """The learner's path: one jitted full forward (no cache) over right-padded sequences."""
    from flax import nnx
    graphdef, state = nnx.split(dense_model)
    fwd = jax.jit(lambda st, ids: nnx.merge(graphdef, st)(ids))
    return lambda ids_BT: fwd(state, ids_BT)


def _teacher_forced(learner_logits, prompt, toks, temperature, pad_to=64):
    seq = list(prompt) + list(toks)
    ids = jnp.asarray([seq + [0] * (pad_to - len(seq))])     # causal: padding never leaks back
    logits = learner_logits(ids)[:, len(prompt) - 1:len(seq) - 1]
    return np.asarray(token_logprobs(logits, jnp.asarray([toks]), temperature))[0]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_teacher_forced(engine, learner_logits, temperature):
    params = SamplingParams(max_new_tokens=16, temperature=temperature, seed=11, ignore_eos=True)
    outs = engine.generate_batch(PROMPTS[:3], params)
    for p, o in zip(PROMPTS[:3], outs):
        ref = _teacher_forced(learner_logits, p, o.token_ids, temperature)
        np.testing.assert_allclose(np.asarray(o.logprobs), ref, atol=1e-4, rtol=0)


def test_continuation_equals_reprefill(engine):
    g = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    prompt = [9, 8, 7, 6, 5]
    r1 = engine.generate_sync(GenerateRequest(prompt, g, "t1", episode_id="ep"))
    turn2 = prompt + r1.token_ids + [40, 41, 42]
    s = SamplingParams(max_new_tokens=8, temperature=0.8, seed=5, ignore_eos=True)
    r2 = engine.generate_sync(GenerateRequest(turn2, s, "t2", episode_id="ep"))
    assert r2.cached_tokens == len(prompt) + len(r1.token_ids) - 1
    assert engine.flush_cache()
    r2b = engine.generate_sync(GenerateRequest(turn2, s, "t2b"))
    assert r2b.cached_tokens == 0
    assert r2.token_ids == r2b.token_ids
    np.testing.assert_allclose(r2.logprobs, r2b.logprobs, atol=1e-4)


def test_results_independent_of_batch_composition(engine):
    s = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.95, seed=123, ignore_eos=True)
    alone = engine.generate_batch([PROMPTS[3]], s)[0]
    others = [dataclasses.replace(s, seed=i) for i in range(3)]
    futs = [engine.submit(GenerateRequest(p, q, f"o{i}"))
            for i, (p, q) in enumerate(zip([PROMPTS[1], PROMPTS[0], PROMPTS[4]], others))]
    mixed = engine.submit(GenerateRequest(PROMPTS[3], s, "mixed"))
    concurrent.futures.wait(futs)
    mixed = mixed.result()
    assert mixed.token_ids == alone.token_ids
    np.testing.assert_allclose(mixed.logprobs, alone.logprobs, atol=1e-4)


def test_seeds_reproduce_and_differ(engine):
    s = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7, ignore_eos=True)
    a = engine.generate_batch([PROMPTS[0]], s)[0].token_ids
    b = engine.generate_batch([PROMPTS[0]], s)[0].token_ids
    c = engine.generate_batch([PROMPTS[0]], dataclasses.replace(s, seed=8))[0].token_ids
    assert a == b and a != c
    g1, g2 = engine.generate_batch([PROMPTS[0], PROMPTS[0]], s)   # a GRPO group: seeds s, s+1
    assert g1.token_ids == a and g2.token_ids == c


def test_stop_ids_and_strings(engine, tokenizer):
    base = engine.generate_batch([PROMPTS[1]], SamplingParams(max_new_tokens=12, temperature=0.0,
                                                                    ignore_eos=True))[0].token_ids
    k = next(i for i in range(3, 12) if base[i] not in base[:i])
    r = engine.generate_batch([PROMPTS[1]], SamplingParams(
        max_new_tokens=12, temperature=0.0, stop_token_ids=(base[k],), ignore_eos=True))[0]
    assert r.token_ids == base[:k + 1] and r.finish_reason == "stop" and r.stop_reason == base[k]
    stop = tokenizer.decode(base[k - 1:k + 1])
    r = engine.generate_batch([PROMPTS[1]], SamplingParams(
        max_new_tokens=12, temperature=0.0, stop=(stop,), ignore_eos=True))[0]
    assert r.finish_reason == "stop" and r.stop_reason == stop
    assert stop in tokenizer.decode(r.token_ids) and r.token_ids == base[:len(r.token_ids)]
    assert len(r.token_ids) <= k + 1
    r = engine.generate_batch([PROMPTS[1]], SamplingParams(max_new_tokens=5, temperature=0.0,
                                                                 ignore_eos=True))[0]
    assert r.finish_reason == "length" and len(r.token_ids) == 5


def test_stream_yields_deltas_that_add_up_to_the_result(engine, tokenizer):
    """Streaming: one chunk per scheduler step (decode_steps=4 tokens at most), deltas whose
    concatenation is the final result, equal to the unstreamed request; stop strings still
    trim what is streamed; closing the stream early aborts the request."""
    g = SamplingParams(max_new_tokens=18, temperature=0.0, ignore_eos=True)
    ref = engine.generate_batch([PROMPTS[1]], g)[0]
    chunks = list(engine.stream(GenerateRequest(PROMPTS[1], g, "streamed"), timeout=120))
    assert len(chunks) >= 18 // 4 and chunks[-1].result is not None
    assert all(c.result is None for c in chunks[:-1]) and all(len(c.token_ids) <= 4 for c in chunks)
    toks = [t for c in chunks for t in c.token_ids]
    lps = [x for c in chunks for x in c.logprobs]
    res = chunks[-1].result
    assert toks == res.token_ids == ref.token_ids and res.finish_reason == "length"
    np.testing.assert_allclose(lps, ref.logprobs, atol=1e-6)
    assert all(v == res.weight_version for c in chunks for v in c.token_versions)
    # a stop string: the streamed tokens end where the request ends
    stop = tokenizer.decode(ref.token_ids[5:7])
    chunks = list(engine.stream(GenerateRequest(
        PROMPTS[1], dataclasses.replace(g, stop=(stop,)), "streamed-stop"), timeout=120))
    res = chunks[-1].result
    assert res.finish_reason == "stop" and [t for c in chunks for t in c.token_ids] == res.token_ids
    # closing early aborts: the engine frees the row and the future reports the abort
    long = SamplingParams(max_new_tokens=400, temperature=0.0, ignore_eos=True)
    it = engine.stream(GenerateRequest(PROMPTS[2], long, "streamed-closed"), timeout=120)
    first = next(it)
    assert first.token_ids and first.result is None
    it.close()
    deadline = time.time() + 60
    while engine.num_running() and time.time() < deadline:
        time.sleep(0.01)
    assert engine.num_running() == 0


def test_retract_pause_and_abort(engine):
    g = SamplingParams(max_new_tokens=60, temperature=0.0, ignore_eos=True)
    ref = engine.generate_batch([PROMPTS[2]], g)[0]
    fut = engine.submit(GenerateRequest(PROMPTS[2], g, "retracted"))
    engine.pause("retract")      # wherever it was, it is recomputed after resume
    engine.resume()
    assert fut.result().token_ids == ref.token_ids
    engine.pause("in_place")
    fut = engine.submit(GenerateRequest(PROMPTS[2], g, "held"))
    engine.abort("held")
    res = fut.result()
    engine.resume()
    assert res.finish_reason == "abort" and res.token_ids == [] and "before prefill" in res.message


def test_weight_update_in_place_switches_outputs(engine, dense_model):
    from flax import nnx
    g = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    before = engine.generate_batch([PROMPTS[0]], g)[0]
    v0 = engine.weight_version
    state = nnx.state(dense_model)
    noisy = jax.tree_util.tree_map(lambda a: a + 0.05 * jax.random.normal(jax.random.key(0), a.shape, a.dtype)
                                   if jnp.issubdtype(a.dtype, jnp.floating) else a, state)
    v1 = engine.update_weights(noisy)
    after = engine.generate_batch([PROMPTS[0]], g)[0]
    assert v1 == v0 + 1 and after.weight_version == v1 and after.token_ids != before.token_ids
    engine.update_weights(state, version=v0)          # restore for the other tests
    assert engine.generate_batch([PROMPTS[0]], g)[0].token_ids == before.token_ids
    with pytest.raises(ValueError, match="parameter tree"):
        engine.update_weights({"x": jnp.zeros(2)})


@pytest.mark.slow
def test_weight_layouts_agree(engine, dense_model):
    """The CPU default serves the ``[in, out]`` decode copy; the HF layout (the model's own
    arrays, the accelerator default) samples the same tokens with the same log-probs."""
    assert engine.weight_layout == "in_out"
    g = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
    t = SamplingParams(max_new_tokens=12, temperature=1.0, seed=3, ignore_eos=True)
    eng = JaxEngine(dense_model, weight_layout="hf", cache_kind=engine.cache_kind, **ENGINE_KW)
    try:
        for p in (g, t):
            a = engine.generate_batch(PROMPTS[:3], p)
            b = eng.generate_batch(PROMPTS[:3], p)
            for x, y in zip(a, b):
                assert x.token_ids == y.token_ids
                np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-5)
        leaf = jax.tree_util.tree_leaves(eng.served_state)[0]
        assert any(leaf is w for w in jax.tree_util.tree_leaves(nnx.state(dense_model)))   # no copy
    finally:
        eng.close()
    with pytest.raises(ValueError, match="weight_layout"):
        JaxEngine(dense_model, weight_layout="transposed", **ENGINE_KW)


def test_bad_requests_name_the_problem(engine):
    g = SamplingParams(max_new_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        engine.submit(GenerateRequest([], g, "e"))
    with pytest.raises(ValueError, match="max_len"):
        engine.submit(GenerateRequest([1] * 600, g, "long"))
    with pytest.raises(ValueError, match="outside"):
        engine.submit(GenerateRequest([1, 10**6], g, "oov"))
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)


def _wait_running(engine, timeout=60.0):
    import time
    t0 = time.monotonic()
    while engine.num_running() == 0:
        assert time.monotonic() - t0 < timeout, "request never started"
        time.sleep(0.0005)


def test_update_policies_for_in_flight_requests(engine, dense_model):
    from flax import nnx
    state = nnx.state(dense_model)
    v0 = engine.weight_version
    g = SamplingParams(max_new_tokens=200, temperature=0.0, ignore_eos=True)
    ref = engine.generate_batch([PROMPTS[0]], g)[0]
    # "finish": the running request completes on the old weights, single version
    fut = engine.submit(GenerateRequest(PROMPTS[0], g, "fin"))
    _wait_running(engine)
    engine.update_weights(state, version=v0 + 1, in_flight="finish")
    res = fut.result()
    assert res.token_ids == ref.token_ids and res.token_versions is None and res.weight_version == v0
    # "abort": partial tokens come back at once, all from the old version
    fut = engine.submit(GenerateRequest(PROMPTS[0], g, "abt"))
    _wait_running(engine)
    engine.update_weights(state, version=v0 + 2, in_flight="abort")
    res = fut.result()
    assert res.finish_reason == "abort" and res.token_ids == ref.token_ids[:len(res.token_ids)]
    assert engine.generate_batch([PROMPTS[0]], g)[0].weight_version == v0 + 2
    engine.update_weights(state, version=v0)


@pytest.mark.slow
def test_sharded_engine_matches_single_device(engine, tiny_hf_dense_dir):
    """Parameters on a data=2 x tensor=2 mesh (4 of the 8 fake CPU devices): the engine picks
    the mesh up from the parameters, shards its cache by logical axes, and decodes the same."""
    from harness_jax import sharding as shd
    from harness_jax.models import qwen3_5
    mesh = shd.make_mesh((2, 1, 2))
    model = qwen3_5.load_hf(tiny_hf_dense_dir, dtype="float32", mesh=mesh, rules=shd.SAMPLE_RULES)
    eng = JaxEngine(model, max_slots=4, max_len=64, prefill_buckets=(16,), decode_steps=4,
                    cache_kind=engine.cache_kind, mesh=mesh)
    try:
        assert eng.mesh is not None and eng.cache_shardings.lengths_B.spec[0] == "data"
        g = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
        prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
        got = [o.token_ids for o in eng.generate_batch(prompts, g)]
        assert got == [o.token_ids for o in engine.generate_batch(prompts, g)]
    finally:
        eng.close()
