"""Pure sampling math: support restriction, logprob definition, per-row seeding."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness_jax.sampling.sampler import sample_tokens, token_logprobs

_sample = jax.jit(sample_tokens)


def _rows(logits, n, temp=1.0, top_p=1.0, top_k=-1, min_p=0.0, seed0=0, step=0):
    logits_BV = jnp.tile(jnp.asarray(logits, jnp.float32)[None], (n, 1))
    f = lambda v, d: jnp.full((n,), v, d)
    return _sample(logits_BV, f(temp, jnp.float32), f(top_p, jnp.float32), f(top_k, jnp.int32),
                   f(min_p, jnp.float32), jnp.arange(seed0, seed0 + n, dtype=jnp.uint32),
                   f(step, jnp.int32))


PROBS = np.array([0.5, 0.3, 0.15, 0.05])
LOGITS = np.log(PROBS)


def test_greedy_is_argmax_with_plain_logprob():
    logits = np.array([[0.1, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0]], np.float32)
    tok, lp = _sample(jnp.asarray(logits), jnp.zeros(2), jnp.ones(2), jnp.full(2, -1),
                      jnp.zeros(2), jnp.arange(2, dtype=jnp.uint32), jnp.zeros(2, jnp.int32))
    np.testing.assert_array_equal(np.asarray(tok), [1, 0])
    ref = jax.nn.log_softmax(jnp.asarray(logits))[jnp.arange(2), jnp.asarray([1, 0])]
    np.testing.assert_allclose(np.asarray(lp), np.asarray(ref), atol=1e-6)


@pytest.mark.parametrize("kw,support", [
    (dict(top_k=2), {0, 1}),
    (dict(top_p=0.7), {0, 1}),
    (dict(top_p=0.85), {0, 1, 2}),
    (dict(min_p=0.2), {0, 1, 2}),
    (dict(min_p=0.7), {0}),
    (dict(min_p=0.5), {0, 1}),
    (dict(top_k=3, top_p=0.6), {0, 1}),
    (dict(top_k=1), {0}),
])
def test_support_restriction(kw, support):
    tok, _ = _rows(LOGITS, 512, **kw)
    assert set(np.asarray(tok).tolist()) == support


def test_logprob_is_full_vocab_at_temperature_not_renormalised():
    t = 0.7
    tok, lp = _rows(LOGITS, 64, temp=t, top_k=2)
    full = np.asarray(jax.nn.log_softmax(jnp.asarray(LOGITS) / t))
    np.testing.assert_allclose(np.asarray(lp), full[np.asarray(tok)], atol=1e-6)


def test_sampling_frequencies_follow_tempered_distribution():
    t = 0.7
    tok, _ = _rows(LOGITS, 8000, temp=t)
    freq = np.bincount(np.asarray(tok), minlength=4) / 8000
    expect = np.exp(LOGITS / t) / np.exp(LOGITS / t).sum()
    np.testing.assert_allclose(freq, expect, atol=0.025)


def test_seed_and_step_determine_sample_independent_of_other_rows():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 50)).astype(np.float32)
    seeds = np.array([7, 8, 9, 10], np.uint32)
    args = lambda lg, sd: _sample(jnp.asarray(lg), jnp.ones(4), jnp.full(4, 0.9), jnp.full(4, 20),
                                  jnp.zeros(4), jnp.asarray(sd), jnp.full(4, 3, jnp.int32))
    tok_a, lp_a = args(logits, seeds)
    other = logits.copy()
    other[1:] = rng.normal(size=(3, 50))
    tok_b, lp_b = args(other, np.array([7, 1, 2, 3], np.uint32))
    assert int(tok_a[0]) == int(tok_b[0]) and float(lp_a[0]) == float(lp_b[0])
    # a different step index gives a different stream
    toks = {int(_sample(jnp.asarray(logits[:1]), jnp.ones(1), jnp.ones(1), jnp.full(1, -1),
                        jnp.zeros(1), jnp.asarray([7], jnp.uint32), jnp.asarray([s], jnp.int32))[0][0])
            for s in range(20)}
    assert len(toks) > 3


def test_token_logprobs_helper():
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.normal(size=(2, 3, 11)), jnp.float32)
    tgt = jnp.asarray(rng.integers(0, 11, size=(2, 3)))
    lp = token_logprobs(logits, tgt, 0.5)
    ref = jax.nn.log_softmax(logits / 0.5)[jnp.arange(2)[:, None], jnp.arange(3)[None], tgt]
    np.testing.assert_allclose(np.asarray(lp), np.asarray(ref), atol=1e-6)
