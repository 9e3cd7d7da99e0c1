"""Rematerialisation of the decoder layers (``Qwen3_5Config.remat``): the ``jax.checkpoint``
policy of "dots", and ``ordered_remat`` for "full" and "offload" (a custom VJP per layer that
keeps only the layer input and recomputes each layer only once its output's cotangent exists)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

LAYER_INPUT = "decoder_layer_input"   # checkpoint name of every decoder layer's input ("dots" keeps it too)


def remat_policy(name: str):
    """The ``jax.checkpoint`` policy of remat "dots" (None for "none"). "full" and "offload" are
    ``ordered_remat`` (they keep only the layer input, and recompute in order)."""
    cp = jax.checkpoint_policies
    if name == "none":
        return None
    if name == "dots":
        return cp.dots_with_no_batch_dims_saveable
    if name in ("full", "offload"):
        return cp.nothing_saveable
    raise ValueError(f"remat {name!r}: use one of none, full, dots, offload")


def _after(x, g):
    """``x``, made data-dependent on the cotangent ``g`` (plus ``0 * tanh(g[0])``: exact, and
    finite for any finite or infinite ``g``), so no scheduler can start the recomputation early."""
    g0 = g.reshape(-1)[0].astype(jnp.float32)
    return x + (0.0 * jnp.tanh(g0)).astype(x.dtype)


def ordered_remat(run, offload: bool = False):
    """``run(static, state, x, ctx, None)`` rematerialised in the backward pass, keeping only the
    layer input ``x`` (and, with ``offload``, keeping it in pinned host memory).

    Unlike ``jax.checkpoint``, the recomputation waits for the cotangent of the layer's output
    (``_after``). With ``jax.checkpoint`` every recomputation in a scanned layer cycle depends
    only on saved inputs, so XLA may run them all before the cycle's first backward: XLA:CPU
    recomputed the three Gated DeltaNet layers of a Qwen3.5 cycle side by side (an
    ``optimization_barrier`` does not survive its pipeline). Here one layer's activations are
    alive at a time. The layer's MoE router statistics (None for a dense layer) come out beside
    its output and are differentiated through the same recomputation."""
    def fwd_only(static, state, x, ctx):
        out, _, stats = run(static, state, x, ctx, None)
        return out, stats

    @functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
    def layer(static, state, x, ctx):
        return fwd_only(static, state, x, ctx)

    def fwd(static, state, x, ctx):
        saved = jax.device_put(x, jax.memory.Space.Host) if offload else x
        return fwd_only(static, state, x, ctx), (state, saved, ctx)

    def bwd(static, res, g):
        state, x, ctx = res
        if offload:
            x = jax.device_put(x, jax.memory.Space.Device)
        x = _after(x, g[0])
        _, vjp = jax.vjp(lambda s, x, c: fwd_only(static, s, x, c), state, x, ctx)
        return vjp(g)

    layer.defvjp(fwd, bwd)

    def call(static, state, x, ctx, cache):
        if cache is not None:          # the engine's cached calls are never differentiated
            return run(static, state, x, ctx, cache)
        out, stats = layer(static, state, x, ctx)
        return out, None, stats
    return call
