"""Paged KV cache: ragged paged attention (XLA fallback and both Pallas kernels in interpret
mode against the gather-everything reference), the model's paged extend against the contiguous
one, the engine's page allocator, step planning under a token budget, and preemption."""
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from harness_jax.models import qwen3_5
from harness_jax.models.qwen3_5 import attention
from harness_jax.models.qwen3_5 import paged_attention as PA
from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams
from harness_jax.sampling.pages import PagePool

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)


def _ragged_case(dtype, T=3, P=32, Z=4, M=7):
    """Rows of different lengths: a prefill chunk, a decode row, an empty row, a row whose
    last page is partly filled; pages shuffled through the pool."""
    rng = np.random.default_rng(0)
    B, N, K, H = 4, 4, 2, 16
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), dtype)
    k = jnp.asarray(rng.normal(size=(P, Z, K, H)), dtype)
    v = jnp.asarray(rng.normal(size=(P, Z, K, H)), dtype)
    bt = jnp.asarray(rng.permutation(P)[:B * M].reshape(B, M), jnp.int32)
    lens = jnp.asarray([10, 23, 0, 6], jnp.int32)
    qpos = jnp.asarray([[7, 8, 9], [22, -1, -1], [-1, -1, -1], [3, 4, 5]], jnp.int32)
    return q, k, v, bt, lens, qpos


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 2e-6), (jnp.bfloat16, 3e-2)])
def test_paged_attention_implementations_match_the_reference(dtype, tol):
    case = _ragged_case(dtype)
    ref = np.asarray(PA.paged_attention_jit(*case, scale=0.25, impl="reference"), np.float32)
    assert np.all(ref[2] == 0) and np.all(ref[1, 1:] == 0)          # padding queries / empty row
    assert np.abs(ref).max() > 0.1
    for impl in ("xla", "pallas_tpu", "pallas_gpu"):
        out = PA.paged_attention_jit(*case, scale=0.25, impl=impl, pages_per_block=2, interpret=True)
        np.testing.assert_allclose(np.asarray(out, np.float32), ref, atol=tol, rtol=0, err_msg=impl)


def test_pallas_gpu_kernel_lowers_to_triton():
    """The GPU kernel lowers for CUDA on this CPU host (Triton); odd query counts are padded to a
    power of two. (TPU lowering needs a TPU: Mosaic reads the device kind.)"""
    args = (jax.ShapeDtypeStruct((3, 5, 8, 64), jnp.bfloat16), jax.ShapeDtypeStruct((40, 16, 2, 64), jnp.bfloat16),
            jax.ShapeDtypeStruct((40, 16, 2, 64), jnp.bfloat16), jax.ShapeDtypeStruct((3, 6), jnp.int32),
            jax.ShapeDtypeStruct((3,), jnp.int32), jax.ShapeDtypeStruct((3, 5), jnp.int32))
    with attention.pallas_interpret(False):
        text = PA.paged_attention_jit.trace(*args, scale=0.125, impl="pallas_gpu", interpret=False).lower(
            lowering_platforms=("cuda",)).as_text()
    assert "triton" in text.lower()
    with pytest.raises(ValueError, match="powers of 2"):
        PA.paged_attention_jit(*_ragged_case(jnp.float32, Z=3), scale=0.25, impl="pallas_gpu", interpret=True)


def test_model_paged_extend_equals_contiguous():
    """Ragged prefill then one step with two row groups (a decode row beside prefill chunks,
    padding rows, slots addressed out of order): paged and contiguous caches agree. Scanned
    layers here; the engine tests run the unscanned model on both caches."""
    cfg = qwen3_5.presets.get("tiny", scan_layers=True)
    gd, st = nnx.split(qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0)))

    class m:   # the model's two entry points, jitted (eager dispatch is slow)
        extend = staticmethod(jax.jit(lambda ids, cache, n, paged_impl="auto": nnx.merge(gd, st).extend(
            ids, cache, n, paged_impl=paged_impl), static_argnames="paged_impl"))
        extend_groups_hidden = staticmethod(jax.jit(lambda groups, cache, paged_impl="auto": nnx.merge(
            gd, st).extend_groups_hidden(groups, cache, paged_impl), static_argnames="paged_impl"))

    rng = np.random.default_rng(1)
    ids = rng.integers(3, 500, size=(3, 40))
    c = qwen3_5.init_cache(cfg, 3, 64)
    pc = qwen3_5.init_paged_cache(cfg, 3, 64, num_pages=50, page_size=4)
    pc = dataclasses.replace(pc, block_tables_BM=jnp.asarray(rng.permutation(50)[:48].reshape(3, 16), jnp.int32))
    n = jnp.asarray([30, 7, 19])
    la, c = m.extend(jnp.asarray(ids[:, :30]), c, n)
    lb, pc = m.extend(jnp.asarray(ids[:, :30]), pc, n, paged_impl="xla")
    last = (np.asarray(n) - 1)[:, None, None]
    np.testing.assert_allclose(np.take_along_axis(np.asarray(la), last, 1),
                               np.take_along_axis(np.asarray(lb), last, 1), atol=1e-5)
    dec = (jnp.asarray(ids[:, 30:31]), jnp.asarray([0, 1, 0]), jnp.asarray([3, 1, 3]))   # slot 3: padding
    pre = (jnp.asarray(ids[np.array([2, 0]), 30:35]), jnp.asarray([5, 4]), jnp.asarray([2, 0]))
    ha, c = m.extend_groups_hidden((dec, pre), c)
    hb, pc = m.extend_groups_hidden((dec, pre), pc, paged_impl="xla")
    np.testing.assert_allclose(np.asarray(ha[0])[1], np.asarray(hb[0])[1], atol=1e-5)
    np.testing.assert_allclose(np.asarray(ha[1])[0], np.asarray(hb[1])[0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(ha[1])[1, :4], np.asarray(hb[1])[1, :4], atol=1e-5)
    assert np.asarray(c.lengths_B).tolist() == np.asarray(pc.lengths_B).tolist() == [34, 8, 24]


def test_moe_model_row_groups_equal_separate_calls_and_route_only_valid_tokens():
    """An MoE model (scanned) on a paged cache: one call with two row groups (decode rows with a
    padding slot beside right-padded prefill chunks) equals the groups' separate calls, and the
    routers count exactly the valid tokens of every MoE layer (padding is masked out)."""
    cfg = qwen3_5.presets.get("tiny_moe", scan_layers=True)
    gd, st = nnx.split(qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0)))

    @jax.jit
    def groups_call(groups, cache):
        m = nnx.merge(gd, st)
        ctxs = tuple(m._cache_ctx(jnp.asarray(ids), cache, n, s, "xla")[0] for ids, n, s in groups)
        xs = tuple(m.model.embed(jnp.asarray(ids)) for ids, _, _ in groups)
        _, _, stats = m.model.decoder(xs, ctxs, cache)
        return m.extend_groups_hidden(groups, cache, "xla"), stats

    one = jax.jit(lambda g, cache: nnx.merge(gd, st).extend_groups_hidden((g,), cache, "xla"))
    rng = np.random.default_rng(2)
    ids = rng.integers(3, 500, size=(3, 12))
    pc = qwen3_5.init_paged_cache(cfg, 3, 32, num_pages=30, page_size=4)
    pc = dataclasses.replace(pc, block_tables_BM=jnp.asarray(rng.permutation(30)[:24].reshape(3, 8), jnp.int32))
    _, pc = one((jnp.asarray(ids[:, :6]), jnp.asarray([6, 3, 5]), jnp.asarray([0, 1, 2])), pc)
    dec = (jnp.asarray(ids[:, 6:7]), jnp.asarray([1, 0, 0]), jnp.asarray([1, 3, 3]))   # slot 3: padding
    pre = (jnp.asarray(ids[np.array([2, 0]), 6:10]), jnp.asarray([4, 2]), jnp.asarray([2, 0]))
    (h, c), stats = groups_call((dec, pre), pc)
    (hd,), c1 = one(dec, pc)
    (hp,), c2 = one(pre, c1)
    np.testing.assert_allclose(np.asarray(h[0])[0], np.asarray(hd)[0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(h[1])[0], np.asarray(hp)[0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(h[1])[1, :2], np.asarray(hp)[1, :2], atol=1e-5)
    assert np.asarray(c.lengths_B).tolist() == np.asarray(c2.lengths_B).tolist() == [8, 4, 9]
    assert float(stats.tokens) == (1 + 4 + 2) * cfg.num_hidden_layers
    assert float(stats.counts_X.sum()) == (1 + 4 + 2) * cfg.num_hidden_layers * cfg.num_experts_per_tok


def test_page_pool_grows_releases_and_refuses():
    pool = PagePool(num_pages=5, page_size=4, max_slots=3, pages_per_slot=4)
    assert pool.grow(0, 9) and pool.owned[0] == [0, 1, 2] and pool.table[0, :3].tolist() == [0, 1, 2]
    assert pool.grow(0, 12) and len(pool.owned[0]) == 3          # already holds 12 tokens
    assert not pool.grow(1, 12) and pool.owned[1] == [] and pool.free == 2   # nothing taken
    assert pool.grow(1, 8) and pool.free == 0 and pool.peak_used == 5
    assert pool.release(0) == 3 and pool.free == 3
    assert pool.grow(2, 5) and pool.owned[2] == [0, 1]          # low page ids first


def test_mixed_step_plan_respects_the_token_budget():
    """Host-side planning: decode rows ride along with one token each; prompt chunks fill the
    rest of the budget first come first served; shapes round up to the buckets."""
    from harness_jax.sampling.planner import Planner
    from harness_jax.sampling.scheduler import Scheduler
    sched = Scheduler(6, 256, vocab_size=512, eos_token_ids=(), tokenizer=None, seed=0, state=None, version=0,
                      pool=PagePool(64, 16, 6, 16))
    planner = Planner(sched, max_slots=6, max_len=256, decode_steps=4, chunk_buckets=(16, 64),
                      row_buckets=(1, 4), token_budget=80)
    p = SamplingParams(max_new_tokens=8)
    sched.waiting = [sched.prepare(GenerateRequest([5] * n, p, f"r{i}")) for i, n in enumerate([1, 1, 100, 30, 50])]
    sched.admit(planner.fits)
    plan = planner.plan(None, 0)
    assert [s.idx for s, _ in plan.decode] == [0, 1] and [n for _, _, n in plan.prefill] == [64, 14]
    toks, num, slots = plan.arrays["groups"][1]
    assert toks.shape == (4, 64) and num.tolist() == [64, 14, 0, 0] and slots.tolist() == [2, 3, 6, 6]
    assert sum(num) + len(plan.decode) <= 80
    assert len(sched.pool.owned[2]) == 4 and len(sched.pool.owned[0]) == 1


@pytest.fixture(scope="module")
def small_pool_engine(dense_model):
    """A paged engine whose pool holds two requests of max_len: concurrent requests preempt."""
    eng = JaxEngine(dense_model, max_slots=4, max_len=64, prefill_buckets=(16,), decode_steps=4,
                    page_size=8, num_pages=16, prefill_rows=1)
    yield eng
    eng.close()


def test_preemption_requeues_and_never_corrupts(small_pool_engine, dense_engine):
    """Four 40-token requests need 4 x 5 pages of a 16-page pool: the youngest is preempted
    (its pages freed, recomputed later from prompt + partial output) and every result equals
    the one a roomy engine gives; an episode still continues from its kept state."""
    eng = small_pool_engine
    prompts = [[7 + i] + list(range(20 + i, 32 + i)) for i in range(4)]
    g = SamplingParams(max_new_tokens=28, temperature=0.0, ignore_eos=True)
    ref = dense_engine.generate_batch(prompts, g)
    before = eng.stats["preemptions"]
    got = eng.generate_batch(prompts, g)
    assert eng.stats["preemptions"] > before
    for a, b in zip(ref, got):
        assert a.token_ids == b.token_ids
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    mem = eng.kv_memory()
    assert mem["pages"] == 16 and mem["peak_pages_used"] == 16
    # an episode's second turn on the tight pool continues its first (prefix reuse)
    short = dataclasses.replace(g, max_new_tokens=6)
    r1 = eng.generate_sync(GenerateRequest(prompts[1], short, "turn1", episode_id="e"))
    turn2 = prompts[1] + r1.token_ids + [40, 41]
    r2 = eng.generate_sync(GenerateRequest(turn2, short, "turn2", episode_id="e"))
    ref2 = dense_engine.generate_sync(GenerateRequest(turn2, short, "turn2-ref"))
    assert r2.token_ids == ref2.token_ids and r2.cached_tokens == len(prompts[1]) + 5


def test_paged_and_contiguous_agree_with_continuation(dense_engine, dense_model):
    """The same requests on the paged (default) and contiguous caches: identical tokens,
    log-probs within 1e-5, including an episode's second turn continuing its first."""
    cont = JaxEngine(dense_model, max_slots=4, max_len=512, prefill_buckets=(32,), decode_steps=4, prefill_rows=1,
                     cache_kind="contiguous")
    try:
        s = SamplingParams(max_new_tokens=10, temperature=1.0, seed=4, ignore_eos=True)
        for e in (dense_engine, cont):
            e.flush_cache()
        outs = {}
        for name, e in (("paged", dense_engine), ("contiguous", cont)):
            r1 = e.generate_sync(GenerateRequest([3, 9, 27, 81], s, f"{name}-1", episode_id="ep"))
            r2 = e.generate_sync(GenerateRequest([3, 9, 27, 81] + r1.token_ids + [5, 6], s, f"{name}-2",
                                                 episode_id="ep"))
            assert r2.cached_tokens == 4 + len(r1.token_ids) - 1
            outs[name] = (r1, r2)
        for a, b in zip(outs["paged"], outs["contiguous"]):
            assert a.token_ids == b.token_ids
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5, rtol=0)
        mem_p, mem_c = dense_engine.kv_memory(), cont.kv_memory()
        assert mem_p["token_bytes"] == mem_c["token_bytes"] and mem_c["held_bytes"] == 4 * 512 * mem_c["token_bytes"]
    finally:
        cont.close()


def test_decode_overlaps_and_prefill_chunks_beside_decode(dense_engine):
    """A long prompt arriving while a request decodes is prefilled in budgeted chunks beside
    it (mixed steps, never a stall); long decodes chain steps (dispatched before the previous
    one is read back). Results equal the requests run alone."""
    g = SamplingParams(max_new_tokens=40, temperature=0.0, ignore_eos=True)
    alone = dense_engine.generate_batch([[11, 12, 13], list(range(50, 150))], g)
    stats0 = dict(dense_engine.stats)
    first = dense_engine.submit(GenerateRequest([11, 12, 13], g, "early"))
    while dense_engine.stats["tokens_generated"] - stats0["tokens_generated"] < 4:
        time.sleep(0.001)
    late = dense_engine.submit(GenerateRequest(list(range(50, 150)), g, "late"))
    assert first.result().token_ids == alone[0].token_ids and late.result().token_ids == alone[1].token_ids
    d = {k: dense_engine.stats[k] - stats0[k] for k in stats0}
    assert d["steps_prefill"] >= 100 // 32 and d["steps_chained"] > 0
