"""The engine's device programs: pure functions of (graphdef, state, cache, ...), jitted by the
``DeviceRunner``. No host state here; every argument is an array or a static setting."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from harness_jax.sampling.sampler import sample_tokens


def mixed_step(graphdef, paged_impl, state, cache, groups, sampling):
    """One call over row groups (``(tokens_BT, num_new_B, slots_B)`` each: decode rows and/or
    prefill chunks); samples one token per row from its last new position. ``sampling``: the
    (temperature, top_p, top_k, min_p, seed, step) arrays of all groups' rows, concatenated.
    Returns ``(tok_R, lp_R, cache)`` over the concatenated rows."""
    model = nnx.merge(graphdef, state)
    hidden, cache = model.extend_groups_hidden(groups, cache, paged_impl)
    last = []
    for h_BTD, (_, num_new_B, _) in zip(hidden, groups):
        i_B = jnp.maximum(num_new_B - 1, 0)
        # project only each row's last new position: no [B, T, V] prefill logits
        last.append(jnp.take_along_axis(h_BTD, i_B[:, None, None], axis=1)[:, 0])
    logits_RV = model.lm_logits(jnp.concatenate(last, axis=0))
    tok_R, lp_R = sample_tokens(logits_RV, *sampling)
    return tok_R, lp_R, cache


def decode_loop(graphdef, n_steps, paged_impl, state, cache, tok_B, active_B, budget_B, stop_BS, sampling):
    """``n_steps`` decode steps over every slot; a row stops (feeds nothing more) after a stop id
    or its budget. Returns the tokens, log-probs and emitted flags per step, the carry a next
    decode step continues from (last token, active, budget, step of each row) and the cache."""
    model = nnx.merge(graphdef, state)
    temp_B, top_p_B, top_k_B, min_p_B, seed_B, step0_B = sampling

    def body(carry, j):
        cache, tok_B, active_B, budget_B = carry
        logits_BTV, cache = model.extend(tok_B[:, None], cache, active_B.astype(jnp.int32), paged_impl=paged_impl)
        new_B, lp_B = sample_tokens(logits_BTV[:, 0], temp_B, top_p_B, top_k_B, min_p_B, seed_B,
                                    step0_B + j)
        emitted_B = active_B
        budget_B = budget_B - active_B.astype(jnp.int32)
        hit_B = jnp.any(new_B[:, None] == stop_BS, axis=-1)
        active_B = active_B & ~hit_B & (budget_B > 0)
        tok_B = jnp.where(emitted_B, new_B, tok_B)
        return (cache, tok_B, active_B, budget_B), (new_B, lp_B, emitted_B)

    (cache, tok_B, active_B, budget_B), (tok_NB, lp_NB, emitted_NB) = jax.lax.scan(
        body, (cache, tok_B, active_B, budget_B), jnp.arange(n_steps, dtype=jnp.int32))
    carry = dict(tok=tok_B, active=active_B, budget=budget_B, step=step0_B + n_steps)
    return tok_NB, lp_NB, emitted_NB, carry, cache
