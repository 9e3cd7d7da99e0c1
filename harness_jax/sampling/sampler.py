"""Pure sampling math shared by the embedded engine (jit-friendly, one row per request).

Definitions (SGLang's, so that learner and sampler agree):
  * the returned log-probability is ``log_softmax(logits / T)`` over the FULL vocabulary at the
    sampled token; at ``T == 0`` (greedy) it is ``log_softmax(logits)`` at the argmax;
  * top-k, then top-p, then min-p restrict the support; the sample is drawn from the
    renormalised restricted distribution, but the log-probability is NOT renormalised;
  * the random key of a row depends only on (request seed, index of the generated token), so a
    request's samples do not depend on which other requests share the batch.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def row_keys(seed_B: jax.Array, step_B: jax.Array) -> jax.Array:
    """One PRNG key per row: fold the generated-token index into the request's seed."""
    def one(seed, step):
        return jax.random.fold_in(jax.random.key(seed), step)
    return jax.vmap(one)(seed_B.astype(jnp.uint32), step_B.astype(jnp.uint32))


def _support_mask(scaled_BV: jax.Array, top_k_B: jax.Array, top_p_B: jax.Array,
                  min_p_B: jax.Array) -> jax.Array:
    """Boolean mask of the tokens kept by top-k -> top-p -> min-p (sorts the vocabulary)."""
    V = scaled_BV.shape[-1]
    probs_BV = jax.nn.softmax(scaled_BV, axis=-1)
    sorted_BV = -jnp.sort(-probs_BV, axis=-1)                    # descending
    rank_V = jnp.arange(V)
    k_B = jnp.where(top_k_B < 1, V, jnp.minimum(top_k_B, V))
    keep_k_BV = rank_V[None, :] < k_B[:, None]
    topk_BV = jnp.where(keep_k_BV, sorted_BV, 0.0)
    topk_BV = topk_BV / jnp.sum(topk_BV, axis=-1, keepdims=True)
    cum_BV = jnp.cumsum(topk_BV, axis=-1)
    # keep a token if the mass strictly before it is below top_p (always keeps the first)
    keep_p_BV = (cum_BV - topk_BV) < top_p_B[:, None]
    keep_m_BV = sorted_BV >= (min_p_B[:, None] * sorted_BV[:, :1])
    keep_sorted_BV = keep_k_BV & keep_p_BV & keep_m_BV
    # smallest kept probability per row = threshold for the unsorted vocabulary
    thresh_B = jnp.min(jnp.where(keep_sorted_BV, sorted_BV, jnp.inf), axis=-1)
    return probs_BV >= thresh_B[:, None]


def sample_tokens(logits_BV: jax.Array, temperature_B: jax.Array, top_p_B: jax.Array,
                  top_k_B: jax.Array, min_p_B: jax.Array, seed_B: jax.Array,
                  step_B: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Samples one token per row; returns (token_B int32, logprob_B float32).

    Rows with ``temperature == 0`` are greedy. ``top_k < 1`` means off. The vocabulary sort
    for top-k/top-p/min-p runs only when some row actually restricts its support.
    """
    logits_BV = logits_BV.astype(jnp.float32)
    greedy_B = temperature_B <= 0.0
    safe_t_B = jnp.where(greedy_B, 1.0, temperature_B).astype(jnp.float32)
    scaled_BV = logits_BV / safe_t_B[:, None]
    logp_BV = jax.nn.log_softmax(scaled_BV, axis=-1)

    needs_filter = jnp.any(~greedy_B & ((top_k_B >= 1) | (top_p_B < 1.0) | (min_p_B > 0.0)))
    keep_BV = jax.lax.cond(
        needs_filter,
        lambda: _support_mask(scaled_BV, top_k_B, top_p_B, min_p_B),
        lambda: jnp.ones(scaled_BV.shape, dtype=bool))
    argmax_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)

    def draw():
        masked_BV = jnp.where(keep_BV, scaled_BV, -jnp.inf)
        keys = row_keys(seed_B, step_B)
        return jax.vmap(lambda k, l: jax.random.categorical(k, l))(keys, masked_BV).astype(jnp.int32)

    # the random draw costs B x V random bits; skip it when every row is greedy
    sampled_B = jax.lax.cond(jnp.all(greedy_B), lambda: argmax_B, draw)
    token_B = jnp.where(greedy_B, argmax_B, sampled_B).astype(jnp.int32)
    logprob_B = jnp.take_along_axis(logp_BV, token_B[:, None], axis=-1)[:, 0]
    return token_B, logprob_B


def token_logprobs(logits_BTV: jax.Array, targets_BT: jax.Array, temperature: float = 1.0) -> jax.Array:
    """Teacher-forced log-probabilities under the engine's definition (learner-side helper).

    ``logits_BTV[:, t]`` scores ``targets_BT[:, t]``; temperature 0 is treated as 1.
    """
    t = 1.0 if temperature <= 0 else float(temperature)
    logp_BTV = jax.nn.log_softmax(logits_BTV.astype(jnp.float32) / t, axis=-1)
    return jnp.take_along_axis(logp_BTV, targets_BT[..., None].astype(jnp.int32), axis=-1)[..., 0]
