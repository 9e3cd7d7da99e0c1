"""Tiny dense and MoE checkpoints made by transformers: our loader + forward/caches vs HF torch.

The checkpoints come from the session fixtures ``tiny_hf_dense_dir`` / ``tiny_hf_moe_dir``
(tests/conftest.py): random fp32 Qwen3.5 models with mixed linear/full attention layers.
To keep compile time low every test reuses three compiled shapes per model: one forward of
``[2, 160]`` (with segment ids), one extend of ``T = 37`` and one single-token extend, all on a
``[2, 128]`` cache.
"""
import numpy as np
import pytest
import torch
import jax
import jax.numpy as jnp
from flax import nnx

from harness_jax.models import qwen3_5

VOCAB, T_FWD, T_EXT, MAX_LEN = 512, 160, 37, 128
PACKED = [40, 9, 71]  # three sequences packed in row 1, then padding


@nnx.jit
def _forward(model, ids, seg):
    return model(ids, segment_ids=seg)


@nnx.jit
def _extend(model, ids, cache, num_new):
    return model.extend(ids, cache, num_new)


def _hf(path):
    import transformers
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _hf_logits(hf, ids_1d):
    with torch.no_grad():
        return hf(torch.tensor(np.asarray(ids_1d)[None])).logits[0].numpy()


@pytest.fixture(scope="module", params=["dense", "moe"])
def case(request, tiny_hf_dense_dir, tiny_hf_moe_dir):
    """(kind, our model, hf model, inputs, our [2,160] logits)."""
    path = tiny_hf_dense_dir if request.param == "dense" else tiny_hf_moe_dir
    model, hf = qwen3_5.load_hf(path), _hf(path)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, size=(2, T_FWD))
    seg = np.ones((2, T_FWD), np.int32)
    o = 0
    for i, n in enumerate(PACKED):
        seg[1, o:o + n] = i + 1
        o += n
    seg[1, o:] = len(PACKED) + 1  # padding tail: its own segment
    logits = np.asarray(_forward(model, jnp.asarray(ids), jnp.asarray(seg)))
    return request.param, model, hf, ids, logits


def test_logits_match_hf(case):
    """fp32 logits within 1e-4 of transformers over 160 tokens."""
    kind, _, hf, ids, ours = case
    ref = _hf_logits(hf, ids[0])
    err = np.abs(ours[0] - ref).max()
    assert err <= 1e-4, f"{kind}: max abs diff {err}"
    assert ref.std() > 0.1  # non-trivial logits, so the tolerance means something


def test_packed_rows_equal_separate_hf_forwards(case):
    """Packed row (segments restart positions and GDN state) == each sequence alone in HF."""
    kind, _, hf, ids, ours = case
    o = 0
    for n in PACKED:
        ref = _hf_logits(hf, ids[1, o:o + n])
        err = np.abs(ours[1, o:o + n] - ref).max()
        assert err <= 1e-4, f"{kind}: segment at {o} max abs diff {err}"
        o += n


def test_greedy_decode_matches_generate(case):
    """Ragged prefill then 32 single-token decode steps == transformers generate(), token for token."""
    kind, model, hf, _, _ = case
    from transformers import GenerationConfig
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, VOCAB, size=n) for n in (T_EXT, 21)]
    B, N = 2, 32
    cache = qwen3_5.init_cache(model.config, B, MAX_LEN)
    ids = np.zeros((B, T_EXT), np.int64)
    for b, p in enumerate(prompts):
        ids[b, :len(p)] = p
    num = jnp.asarray([len(p) for p in prompts], jnp.int32)
    logits, cache = _extend(model, jnp.asarray(ids), cache, num)
    last = np.asarray(logits)[np.arange(B), np.asarray(num) - 1]
    toks = [np.argmax(last, -1)]
    for _ in range(N - 1):
        logits, cache = _extend(model, jnp.asarray(toks[-1][:, None]), cache, jnp.ones((B,), jnp.int32))
        toks.append(np.argmax(np.asarray(logits)[:, 0], -1))
    ours = np.stack(toks, 1)
    assert list(np.asarray(cache.lengths_B)) == [len(p) + N - 1 for p in prompts]
    gc = GenerationConfig(max_new_tokens=N, do_sample=False, eos_token_id=None, pad_token_id=0)
    for b, p in enumerate(prompts):
        with torch.no_grad():
            out = hf.generate(torch.tensor(p[None]), generation_config=gc,
                              attention_mask=torch.ones(1, len(p), dtype=torch.long))
        ref = out[0, len(p):].numpy()
        assert len(ref) == N
        np.testing.assert_array_equal(ours[b], ref, err_msg=f"{kind} row {b}")


def test_continuation_untouched_rows_and_reset(case):
    """Prefill + continuation chunks == one forward; num_new=0 rows untouched; reset reuses a slot."""
    kind, model, _, ids, full = case
    row = ids[0]  # full[0] = forward logits of this 160-token sequence
    cache = qwen3_5.init_cache(model.config, 2, MAX_LEN)
    chunk = lambda a, b: jnp.asarray(np.stack([row[a:a + T_EXT], row[b:b + T_EXT]]))
    l1, cache = _extend(model, chunk(0, 0), cache, jnp.asarray([T_EXT, T_EXT]))
    np.testing.assert_allclose(np.asarray(l1)[0], full[0, :T_EXT], atol=1e-4, err_msg=kind)
    np.testing.assert_allclose(np.asarray(l1)[1], full[0, :T_EXT], atol=1e-4, err_msg=kind)
    # row 1 gets no tokens this call: every array of row 1 must stay bit-identical
    row1 = lambda c: jax.tree.map(lambda a: np.asarray(a)[:, 1] if a.ndim > 1 else np.asarray(a)[1], c)
    before = row1(cache)
    l2, cache = _extend(model, chunk(T_EXT, T_EXT), cache, jnp.asarray([T_EXT, 0]))
    jax.tree.map(np.testing.assert_array_equal, before, row1(cache))
    np.testing.assert_allclose(np.asarray(l2)[0], full[0, T_EXT:2 * T_EXT], atol=1e-4, err_msg=kind)
    # ragged continuation: row 1 catches up with 20 tokens (right-padded), then single-token steps
    l3, cache = _extend(model, chunk(0, T_EXT), cache, jnp.asarray([0, 20]))
    np.testing.assert_allclose(np.asarray(l3)[1, :20], full[0, T_EXT:T_EXT + 20], atol=1e-4, err_msg=kind)
    assert list(np.asarray(cache.lengths_B)) == [2 * T_EXT, T_EXT + 20]
    pos = np.asarray(cache.lengths_B)
    for _ in range(3):
        step = jnp.asarray(row[pos][:, None])
        ls, cache = _extend(model, step, cache, jnp.ones((2,), jnp.int32))
        np.testing.assert_allclose(np.asarray(ls)[:, 0], full[0, pos], atol=1e-4, err_msg=kind)
        pos = pos + 1
    # slot reuse: reset row 0 -> a new prompt there equals a fresh forward; row 1 unaffected
    cache = qwen3_5.reset_cache_rows(cache, jnp.asarray([True, False]))
    assert list(np.asarray(cache.lengths_B)) == [0, pos[1]]
    l4, cache = _extend(model, chunk(0, 0), cache, jnp.asarray([T_EXT, 0]))
    np.testing.assert_allclose(np.asarray(l4)[0], full[0, :T_EXT], atol=1e-4, err_msg=kind)


def test_decode_layout_computes_the_same_and_converts_learner_states(case, tiny_hf_moe_dir):
    """``decode_layout`` (the engine's ``[in, out]`` serving copy; the MoE checkpoint has tied
    embeddings, so its LM head becomes a transposed copy) gives the same logits in a forward
    and in cached decode, and ``convert`` maps a learner state onto exactly that copy; the
    same holds for scanned layer stacks."""
    kind, model, _, ids, full = case
    graphdef, state, convert = qwen3_5.decode_layout(model)
    served = nnx.merge(graphdef, state)
    assert served.lm_head is not None and served.lm_head.in_out
    ref_lm = model.lm_head.weight[...] if model.lm_head is not None else model.model.embed_tokens.weight[...]
    np.testing.assert_array_equal(np.asarray(served.lm_head.weight[...]), np.asarray(ref_lm).T)
    seg = np.ones((2, T_FWD), np.int32)
    np.testing.assert_allclose(np.asarray(_forward(served, jnp.asarray(ids), jnp.asarray(seg)))[0], full[0],
                               atol=1e-4, err_msg=kind)
    cache = qwen3_5.init_cache(model.config, 2, MAX_LEN)
    step = jnp.asarray(ids[:, :1])
    a, _ = _extend(model, step, cache, jnp.ones((2,), jnp.int32))
    b, _ = _extend(served, step, cache, jnp.ones((2,), jnp.int32))
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, err_msg=kind)
    jax.tree.map(np.testing.assert_array_equal, convert(nnx.state(model)), state)
    if kind == "moe":   # scanned layer cycles: transposes keep the leading layer axis
        scanned = qwen3_5.load_hf(tiny_hf_moe_dir, config_overrides={"scan_layers": True})
        sg, ss, _ = qwen3_5.decode_layout(scanned)
        c, _ = _extend(nnx.merge(sg, ss), step, cache, jnp.ones((2,), jnp.int32))
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), atol=1e-5)
