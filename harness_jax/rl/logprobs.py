"""Token log-probabilities from a causal LM, computed in vocabulary-sized chunks.

The full ``[B, T, V]`` logits of a 248k-vocabulary model do not fit next to the activations, so
log-probs are computed from ``model.hidden_states`` and ``model.lm_logits`` one chunk of
positions at a time (``lax.scan`` over chunks, each chunk rematerialised in the backward pass).
Everything after the LM head is float32. The temperature matches the rollout engine's
definition (``log_softmax(logits / temperature)``; temperature 0 means greedy, i.e. 1.0 here).
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def _chunk_len(T: int, chunk_size: int) -> int:
    if chunk_size <= 0 or chunk_size >= T:
        return T
    c = chunk_size
    while T % c:                      # largest divisor of T not above chunk_size
        c -= 1
    return c


def logprobs_from_hidden(lm_logits: Callable, hidden_BTD, target_ids_BT, *, temperature: float = 1.0,
                         chunk_size: int = 0, with_entropy: bool = False):
    """``(logp_BT, entropy_BT or None)`` of ``target_ids_BT`` under ``lm_logits(hidden)``."""
    inv_temp = 1.0 / (temperature if temperature and temperature > 0 else 1.0)
    B, T, D = hidden_BTD.shape
    C = _chunk_len(T, chunk_size)
    N = T // C

    def chunk(h_BCD, t_BC):
        logits_BCV = lm_logits(h_BCD).astype(jnp.float32) * inv_temp
        lse_BC = jax.nn.logsumexp(logits_BCV, axis=-1)
        tgt_BC = jnp.take_along_axis(logits_BCV, t_BC[..., None], axis=-1)[..., 0]
        logp_BC = tgt_BC - lse_BC
        if with_entropy:
            p_BCV = jnp.exp(logits_BCV - lse_BC[..., None])
            ent_BC = lse_BC - jnp.sum(p_BCV * logits_BCV, axis=-1)
        else:
            ent_BC = jnp.zeros_like(logp_BC)
        return logp_BC, ent_BC

    if N == 1:
        logp_BT, ent_BT = chunk(hidden_BTD, target_ids_BT)
    else:
        h_NBCD = hidden_BTD.reshape(B, N, C, D).swapaxes(0, 1)
        t_NBC = target_ids_BT.reshape(B, N, C).swapaxes(0, 1)
        # remat: only one chunk's logits are alive at a time, in the forward and the backward.
        body = jax.checkpoint(lambda _, xs: (None, chunk(*xs)))
        _, (logp_NBC, ent_NBC) = jax.lax.scan(body, None, (h_NBCD, t_NBC))
        logp_BT = logp_NBC.swapaxes(0, 1).reshape(B, T)
        ent_BT = ent_NBC.swapaxes(0, 1).reshape(B, T)
    return logp_BT, (ent_BT if with_entropy else None)


def token_logprobs(model, input_ids_BT, target_ids_BT, *, segment_ids_BT=None, positions_BT=None,
                   temperature: float = 1.0, chunk_size: int = 0, with_entropy: bool = False):
    """Log-probs of ``target_ids_BT`` given ``input_ids_BT`` (see ``logprobs_from_hidden``)."""
    hidden_BTD = model.hidden_states(input_ids_BT, segment_ids=segment_ids_BT, positions=positions_BT)
    return logprobs_from_hidden(model.lm_logits, hidden_BTD, target_ids_BT, temperature=temperature,
                                chunk_size=chunk_size, with_entropy=with_entropy)
