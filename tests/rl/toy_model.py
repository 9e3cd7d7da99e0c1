"""A small stand-in causal LM (test double) with the contract's learner-facing API.

Used where compiling the real Qwen3.5 model would dominate a test's time (checkpoint resume,
multi-process, mini-batch plumbing). It follows docs/contracts.md: ``hidden_states(ids,
segment_ids, positions)``, ``lm_logits(hidden)``, ``__call__``, parameters with logical axis
names. Attention is causal and never crosses packed segments.
"""
import jax
import jax.numpy as jnp
from flax import nnx


def _param(rngs, shape, names, scale):
    return nnx.Param(jax.random.normal(rngs.params(), shape, jnp.float32) * scale,
                     sharding_names=names, eager_sharding=False)


class ToyLM(nnx.Module):
    def __init__(self, vocab=64, d=32, layers=2, max_len=64, *, rngs: nnx.Rngs):
        self.vocab, self.d = vocab, d
        self.embed = _param(rngs, (vocab, d), ("vocab", "embed"), 0.5)
        self.pos = _param(rngs, (max_len, d), (None, "embed"), 0.1)
        self.wqkv = nnx.List([_param(rngs, (d, 3 * d), ("embed", "q_heads"), d ** -0.5) for _ in range(layers)])
        self.wo = nnx.List([_param(rngs, (d, d), ("q_heads", "embed"), d ** -0.5) for _ in range(layers)])
        self.up = nnx.List([_param(rngs, (d, 4 * d), ("embed", "mlp"), d ** -0.5) for _ in range(layers)])
        self.down = nnx.List([_param(rngs, (4 * d, d), ("mlp", "embed"), (4 * d) ** -0.5) for _ in range(layers)])
        self.norm = nnx.Param(jnp.ones((d,), jnp.float32), sharding_names=("embed",), eager_sharding=False)
        self.head = _param(rngs, (d, vocab), ("embed", "vocab"), d ** -0.5)

    def hidden_states(self, input_ids_BT, segment_ids=None, positions=None):
        B, T = input_ids_BT.shape
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(T), (B, T))
        if segment_ids is None:
            segment_ids = jnp.ones((B, T), jnp.int32)
        x_BTD = self.embed[...][input_ids_BT] + self.pos[...][positions]
        causal_TT = jnp.tril(jnp.ones((T, T), bool))
        mask_BTT = causal_TT[None] & (segment_ids[:, :, None] == segment_ids[:, None, :])
        for wqkv, wo, up, down in zip(self.wqkv, self.wo, self.up, self.down):
            h_BTD = _rms(x_BTD)
            q_BTD, k_BTD, v_BTD = jnp.split(h_BTD @ wqkv[...], 3, axis=-1)
            s_BTS = jnp.einsum("btd,bsd->bts", q_BTD, k_BTD) / jnp.sqrt(self.d)
            s_BTS = jnp.where(mask_BTT, s_BTS, -1e30)
            x_BTD = x_BTD + jnp.einsum("bts,bsd->btd", jax.nn.softmax(s_BTS, -1), v_BTD) @ wo[...]
            x_BTD = x_BTD + jax.nn.gelu(_rms(x_BTD) @ up[...]) @ down[...]
        return _rms(x_BTD) * self.norm[...]

    def lm_logits(self, hidden_BTD):
        return hidden_BTD @ self.head[...]

    def __call__(self, input_ids_BT, segment_ids=None, positions=None):
        return self.lm_logits(self.hidden_states(input_ids_BT, segment_ids, positions))


def _rms(x):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
