"""The engine's device programs: pure functions of (graphdef, state, cache, ...), jitted by the
engine. No host state here; every argument is an array or a static graph definition."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from harness_jax.sampling.sampler import sample_tokens


def extend_and_sample(graphdef, state, cache, tokens_BT, num_new_B, temp_B, top_p_B, top_k_B,
                      min_p_B, seed_B, step_B):
    """One extend call; samples from the logits at each row's last new position."""
    model = nnx.merge(graphdef, state)
    hidden_BTD, cache = model.extend_hidden(tokens_BT, cache, num_new_B)
    last_B = jnp.maximum(num_new_B - 1, 0)
    # project only each row's last new position: no [B, T, V] prefill logits
    hidden_BD = jnp.take_along_axis(hidden_BTD, last_B[:, None, None], axis=1)[:, 0]
    logits_BV = model.lm_logits(hidden_BD)
    tok_B, lp_B = sample_tokens(logits_BV, temp_B, top_p_B, top_k_B, min_p_B, seed_B, step_B)
    return tok_B, lp_B, cache


def decode_loop(graphdef, n_steps, state, cache, tok_B, active_B, budget_B, stop_BS, temp_B,
                top_p_B, top_k_B, min_p_B, seed_B, step0_B):
    """``n_steps`` decode steps; a row stops (feeds nothing more) after a stop id or its budget."""
    model = nnx.merge(graphdef, state)

    def body(carry, j):
        cache, tok_B, active_B, budget_B = carry
        logits_BTV, cache = model.extend(tok_B[:, None], cache, active_B.astype(jnp.int32))
        new_B, lp_B = sample_tokens(logits_BTV[:, 0], temp_B, top_p_B, top_k_B, min_p_B, seed_B,
                                    step0_B + j)
        emitted_B = active_B
        budget_B = budget_B - active_B.astype(jnp.int32)
        hit_B = jnp.any(new_B[:, None] == stop_BS, axis=-1)
        active_B = active_B & ~hit_B & (budget_B > 0)
        tok_B = jnp.where(emitted_B, new_B, tok_B)
        return (cache, tok_B, active_B, budget_B), (new_B, lp_B, emitted_B)

    (cache, _, _, _), (tok_NB, lp_NB, emitted_NB) = jax.lax.scan(
        body, (cache, tok_B, active_B, budget_B), jnp.arange(n_steps, dtype=jnp.int32))
    return tok_NB, lp_NB, emitted_NB, cache
