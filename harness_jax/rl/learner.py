"""Sharded GRPO / SFT learner: train state, jitted train step, mini-batches and epochs.

Layout of one ``Learner.update(batch)`` (one rollout batch, one policy version):

1. the packed ``TrainBatch`` is placed on the mesh (rows over the rules' ``batch`` axes:
   ``data``, ``fsdp`` and ``expert`` by default);
2. ``old_logp`` is recomputed with the current parameters (``recompute_old_logp``), else the
   rollout engine's log-probs are used; with one optimizer step per batch the old policy is the
   current one and the step takes its own log-probs (``on_policy_step``: no separate forward);
   the frozen reference's log-probs are added when a KL coefficient is set;
3. for each epoch the rows are shuffled (a key from the checkpointed train-state RNG) and cut
   into ``num_mini_batches`` mini-batches; each mini-batch is one optimizer step.

The train step is one ``jax.jit`` with explicit in/out shardings and the state donated. Inside,
``lax.scan`` accumulates float32 gradients over ``num_micro_batches`` micro-batches; each
micro-batch's loss is its unnormalised sum divided by the *global* mini-batch denominator, so
the accumulated gradient equals the full mini-batch gradient for every aggregation mode.
Parameters and the AdamW moments share the parameters' FSDP/TP shardings (logical axis names on
the ``nnx.Param`` metadata mapped onto the mesh by a rules table).

Dtypes: the model object decides its compute and parameter dtypes (``Qwen3_5ForCausalLM(...,
dtype=jnp.bfloat16, param_dtype=jnp.float32)`` is the accelerator default: fp32 master weights,
bf16 matmuls); log-probs, losses, gradients accumulation and optimizer math are float32.
Rematerialisation of decoder blocks is the model config's ``remat`` knob; the LM head is always
computed in rematerialised chunks (``LearnerConfig.logit_chunk``).
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from harness_jax import sharding as hsharding
from harness_jax.rl import losses, perf
from harness_jax.rl.batch import TrainBatch
from harness_jax.rl.logprobs import logprobs_from_hidden, token_logprobs



# ----------------------------------------------------------------------------------------------
# configuration
# ----------------------------------------------------------------------------------------------
SCHEDULES = ("constant", "cosine", "linear")   # learning-rate schedules after the linear warm-up (``make_schedule``)


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    learning_rate: float = 1e-6
    schedule: str = "constant"        # one of SCHEDULES (all with linear warm-up)
    warmup_steps: int = 0
    total_steps: int = 1000           # cosine/linear decay horizon (optimizer steps)
    end_lr_ratio: float = 0.0         # final lr / peak lr for cosine/linear
    b1: float = 0.9
    b2: float = 0.98
    eps: float = 1e-8
    weight_decay: float = 0.1
    decay_1d: bool = False            # also decay norms/biases (ndim < 2)
    clip_norm: Optional[float] = 1.0  # global-norm gradient clipping; None = off

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"OptimizerConfig.schedule: {self.schedule!r}; use one of {SCHEDULES}")
        if self.learning_rate < 0:
            raise ValueError(f"OptimizerConfig.learning_rate: {self.learning_rate} must be >= 0")
        if self.warmup_steps < 0 or self.total_steps < 1:
            raise ValueError("OptimizerConfig.warmup_steps must be >= 0 and total_steps >= 1")
        if self.clip_norm is not None and self.clip_norm <= 0:
            raise ValueError(f"OptimizerConfig.clip_norm: {self.clip_norm} must be > 0 (or None)")
        if self.eps <= 0:
            raise ValueError(f"OptimizerConfig.eps: {self.eps} must be > 0")
        if not 0 <= self.end_lr_ratio <= 1:
            raise ValueError(f"OptimizerConfig.end_lr_ratio: {self.end_lr_ratio} must be in [0, 1]")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    mode: str = "grpo"                         # "grpo" | "sft"
    loss: losses.PolicyLossConfig = losses.PolicyLossConfig()
    opt: OptimizerConfig = OptimizerConfig()
    num_micro_batches: int = 1                 # gradient accumulation inside one optimizer step
    num_mini_batches: int = 1                  # optimizer steps per epoch over a rollout batch
    num_epochs: int = 1                        # passes over a rollout batch
    shuffle: bool = True                       # shuffle rows between epochs (checkpointed RNG)
    recompute_old_logp: bool = True            # False: old_logp = rollout engine's log-probs
    temperature: float = 1.0                   # the rollout engine's sampling temperature
    logit_chunk: int = 512                     # positions per LM-head chunk (0 = all at once)
    compute_entropy: bool = False              # log entropy (costs one more pass over the vocab)
    router_aux_coef: float = 0.0               # MoE: coefficient of the router load-balancing loss (rl.losses.load_balancing_loss); its metrics are logged either way
    reference_kl: bool = False                 # keep the starting policy to log the KL to it (kl_to_ref)
    skip_no_signal: bool = True                # no optimizer step on a batch whose advantages are all 0
    peak_flops_per_device: float = 0.0         # for MFU; 0 = not reported
    seed: int = 0

    def __post_init__(self):
        if self.mode not in ("grpo", "sft"):
            raise ValueError(f"LearnerConfig.mode: {self.mode!r}; use 'grpo' or 'sft'")
        for f in ("num_micro_batches", "num_mini_batches", "num_epochs"):
            if getattr(self, f) < 1:
                raise ValueError(f"LearnerConfig.{f}: {getattr(self, f)} must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"LearnerConfig.temperature: {self.temperature} must be >= 0")

    @property
    def rows_multiple(self) -> int:
        """Rows of a TrainBatch must be a multiple of this times the batch-axis device count."""
        return self.num_mini_batches * self.num_micro_batches


def make_schedule(opt: OptimizerConfig) -> optax.Schedule:
    peak, w = opt.learning_rate, opt.warmup_steps
    decay_steps = max(opt.total_steps - w, 1)
    if opt.schedule == "constant":
        main = optax.constant_schedule(peak)
    elif opt.schedule == "cosine":
        main = optax.cosine_decay_schedule(peak, decay_steps, alpha=opt.end_lr_ratio)
    else:
        main = optax.linear_schedule(peak, peak * opt.end_lr_ratio, decay_steps)
    if w == 0:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, peak, w), main], [w])


def decayed_params(params_state) -> dict:
    """Which parameters weight decay applies to, as a pure dict of bools shaped like
    ``nnx.to_pure_dict(params_state)``: matrices (rank >= 2), counted WITHOUT the leading stacked
    ``layers`` axes a scanned decoder adds (``scan_layers``), so a norm or a gate parameter stays
    undecayed whether or not the layers are scanned."""
    def one(var):
        axes = hsharding.var_logical_axes(var)
        return var.replace(sum(1 for a in axes if a != "layers") >= 2)

    return nnx.to_pure_dict(jax.tree.map(one, params_state, is_leaf=lambda x: isinstance(x, nnx.Variable)))


def make_optimizer(opt: OptimizerConfig, matrices=None) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """AdamW (after global-norm clipping) on ``opt``'s schedule. ``matrices``: the parameters that
    decay (``decayed_params``); default every array of rank >= 2 (right only for unstacked trees).
    ``opt.decay_1d`` decays everything."""
    sched = make_schedule(opt)

    def decay_mask(params):
        if opt.decay_1d:
            return jax.tree.map(lambda p: True, params)
        if matrices is not None:
            return matrices
        return jax.tree.map(lambda p: p.ndim >= 2, params)

    parts = []
    if opt.clip_norm is not None:
        parts.append(optax.clip_by_global_norm(opt.clip_norm))
    parts.append(optax.adamw(sched, b1=opt.b1, b2=opt.b2, eps=opt.eps, weight_decay=opt.weight_decay,
                             mask=decay_mask))
    return optax.chain(*parts), sched


# ----------------------------------------------------------------------------------------------
# shardings and host <-> global arrays
# ----------------------------------------------------------------------------------------------
def put_global(x, sharding: NamedSharding):
    """Host value (identical on every process) -> global array with ``sharding``.

    Works single- and multi-process (each process fills only its addressable shards).
    """
    if isinstance(x, jax.Array) and x.is_fully_addressable and len(jax.devices()) == len(jax.local_devices()):
        # never alias the caller's buffers: the train state is donated to the step
        return jax.device_put(x, sharding, may_alias=False)
    x = np.asarray(x)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])


def fetch(x):
    """Global array -> numpy on any process (sharded arrays spanning processes are gathered,
    which is a collective: every process must call it)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if x.sharding.is_fully_replicated:
            return np.asarray(x.addressable_data(0))
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _abstract(x, sharding=None):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


# ----------------------------------------------------------------------------------------------
# the learner
# ----------------------------------------------------------------------------------------------
BATCH_KEYS = ("input_ids", "target_ids", "loss_mask", "rollout_logp", "old_logp", "advantages",
              "segment_ids", "positions")
_INT_KEYS = ("input_ids", "target_ids", "segment_ids", "positions")


class Learner:
    """Owns the sharded train state of one policy and updates it from packed rollout batches.

    ``state`` is a pytree ``{"params", "opt_state", "step", "rng"}`` (pure dicts of arrays,
    checkpointable as is); ``policy_version`` counts consumed rollout batches. With a KL term
    (``cfg.loss.kl_coef > 0``) the learner keeps one frozen copy of the parameters it starts
    from as the reference (``ref_params``); ``set_params(..., reset_reference=True)`` moves it,
    e.g. to the policy an SFT warm start produced.

    ``Learner(model, cfg, mesh=..., rules=...)`` places a concrete model's parameters on the
    mesh (as a copy: the train state is donated every step, the model keeps its buffers).
    ``Learner.abstract(model, ...)`` builds the same shardings and jitted step from an abstract
    model (``nnx.eval_shape``): ``state`` then holds ``ShapeDtypeStruct``s with their shardings,
    no device memory is used, and ``lower_train_step`` lowers the step for ahead-of-time checks.

    ``flops_per_token`` (``seq_len -> training FLOPs per token``) counts each step's model FLOPs
    for MFU: the caller's, who knows the model (``rl.policy.build_learner`` passes the config's
    analytic ``Qwen3_5Config.flops_per_token``); default the 6N rule from the parameter count.
    """

    def __init__(self, model: nnx.Module, cfg: LearnerConfig = LearnerConfig(), *, mesh: Optional[Mesh] = None,
                 rules=None, flops_per_token: Optional[Callable[[int], float]] = None,
                 abstract: bool = False):
        self.cfg = cfg
        self.mesh = mesh if mesh is not None else hsharding.make_mesh((1, -1, 1, 1))
        self.rules = rules if rules is not None else hsharding.TRAIN_RULES
        self.is_abstract = bool(abstract)
        self.batch_axes = hsharding.batch_axes(self.mesh, self.rules)
        self.graphdef, params_state, self.rest_state = nnx.split(model, nnx.Param, ...)
        self._abstract_params = jax.tree.map(_abstract, params_state)
        self.param_sharding = hsharding.param_shardings(params_state, self.mesh, self.rules)
        self.tx, self.schedule = make_optimizer(cfg.opt, decayed_params(params_state))
        self.replicated = NamedSharding(self.mesh, P())
        self.batch_sharding = NamedSharding(self.mesh, P(self.batch_axes or None, None))
        rest = nnx.to_pure_dict(self.rest_state)
        # non-parameter variables are small buffers: concrete zeros are enough to trace
        self.rest = (jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), rest) if abstract else
                     jax.tree.map(lambda x: put_global(x, self.replicated), rest))
        n_params = sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.to_pure_dict(params_state)))
        self.num_params = int(n_params)
        self.is_moe = bool(getattr(getattr(model, "config", None), "is_moe", False))
        self.flops_per_token = flops_per_token or (lambda seq_len, n=float(n_params): 6.0 * n)
        self.policy_version = 0

        params = nnx.to_pure_dict(params_state)
        params_abs = jax.tree.map(_abstract, params, self.param_sharding)
        self.state_sharding = self._state_shardings(params_abs)
        rng = jnp.asarray(jax.random.PRNGKey(cfg.seed), jnp.uint32)
        if abstract:
            shapes = jax.eval_shape(self._init_state, params_abs, _abstract(rng))
            self.state = jax.tree.map(_abstract, shapes, self.state_sharding)
        else:
            init = jax.jit(self._init_state, out_shardings=self.state_sharding)
            self.state = init(jax.tree.map(put_global, params, self.param_sharding), rng)

        self._copy = jax.jit(lambda p: jax.tree.map(jnp.copy, p), out_shardings=self.param_sharding)
        self.ref_params = None
        if cfg.mode == "grpo" and (cfg.loss.kl_coef > 0 or cfg.reference_kl):
            self.ref_params = (params_abs if abstract else self._copy_params(self.state["params"]))

        self._train_step = jax.jit(self._step, in_shardings=(self.state_sharding, self.batch_sharding),
                                   out_shardings=(self.state_sharding, self.replicated), donate_argnums=(0,))
        self._logp_fn = jax.jit(self._batch_logp, in_shardings=(self.param_sharding, self.batch_sharding),
                                out_shardings=self.replicated)

    @classmethod
    def abstract(cls, model: nnx.Module, cfg: LearnerConfig = LearnerConfig(), *, mesh: Optional[Mesh] = None,
                 rules=None, flops_per_token: Optional[Callable[[int], float]] = None) -> "Learner":
        """A weightless learner from an abstract model (``nnx.eval_shape(lambda: Model(...))``):
        the real learner's shardings and jitted step, ``state`` as sharded ShapeDtypeStructs."""
        return cls(model, cfg, mesh=mesh, rules=rules, flops_per_token=flops_per_token, abstract=True)

    # ---- state ---------------------------------------------------------------------------
    def _init_state(self, params, rng):
        return {"params": params, "opt_state": self.tx.init(params), "step": jnp.zeros((), jnp.int32),
                "rng": rng}

    def _state_shardings(self, params):
        abstract = jax.eval_shape(self.tx.init, params)
        opt_sh = optax.tree_map_params(self.tx, lambda _, s: s, abstract, self.param_sharding,
                                       transform_non_params=lambda _: self.replicated)
        return {"params": self.param_sharding, "opt_state": opt_sh, "step": self.replicated,
                "rng": self.replicated}

    def _require_concrete(self, what: str):
        if self.is_abstract:
            raise RuntimeError(f"Learner.{what}: this learner is abstract (no weights); build it with "
                               "Learner(model, ...) to train")

    def _copy_params(self, params):
        """Parameters (any global arrays, or host values) as fresh buffers on this learner's
        parameter shardings (never aliasing the donated train state)."""
        if all(isinstance(x, jax.Array) for x in jax.tree.leaves(params)):
            return self._copy(params)
        return jax.tree.map(put_global, params, self.param_sharding)

    def set_params(self, params, *, reset_reference: bool = False) -> None:
        """Replace the policy parameters (a pure dict like ``state["params"]``, e.g. another
        learner's); optimizer state, step and RNG are kept. ``reset_reference=True`` also makes
        them the KL reference (when the learner has one)."""
        self._require_concrete("set_params")
        self.state["params"] = self._copy_params(params)
        if reset_reference and self.ref_params is not None:
            self.ref_params = self._copy_params(self.state["params"])

    def set_reference(self, params) -> None:
        """Replace the frozen KL reference (no-op when the learner has no KL term)."""
        self._require_concrete("set_reference")
        if self.ref_params is not None:
            self.ref_params = self._copy_params(params)

    def params_copy(self):
        """A copy of the current parameters (safe to keep across updates, which donate the state)."""
        self._require_concrete("params_copy")
        return self._copy_params(self.state["params"])

    def model(self, params=None) -> nnx.Module:
        """An nnx model view of ``params`` (default: the current parameters, aliased: the next
        update invalidates them; use ``params_copy()`` for a model to keep)."""
        params = self.state["params"] if params is None else params
        ps = jax.tree.map(lambda x: x, self._abstract_params)   # fresh State, filled in place
        nnx.replace_by_pure_dict(ps, params)
        rest = jax.tree.map(lambda x: x, self.rest_state)
        nnx.replace_by_pure_dict(rest, self.rest)
        return nnx.merge(self.graphdef, ps, rest)

    # ---- pure functions traced under jit ---------------------------------------------------
    def _logp(self, params, mb, with_entropy=False):
        model = self.model(params)
        return token_logprobs(model, mb["input_ids"], mb["target_ids"], segment_ids_BT=mb["segment_ids"],
                              positions_BT=mb["positions"], temperature=self.cfg.temperature,
                              chunk_size=self.cfg.logit_chunk, with_entropy=with_entropy)

    def _logp_and_router(self, params, mb, with_entropy=False):
        """``(logp, entropy, router stats)``; the stats only for MoE models (None otherwise), with
        padding (segment id 0) left out of them."""
        model = self.model(params)
        if not self.is_moe:
            return (*self._logp(params, mb, with_entropy), None)
        hidden, stats = model.hidden_states_with_router_stats(mb["input_ids"], segment_ids=mb["segment_ids"],
                                                              positions=mb["positions"],
                                                              token_mask=mb["segment_ids"] > 0)
        logp, ent = logprobs_from_hidden(model.lm_logits, hidden, mb["target_ids"], temperature=self.cfg.temperature,
                                         chunk_size=self.cfg.logit_chunk, with_entropy=with_entropy)
        return logp, ent, stats

    def _micro(self, x, M):
        """[R, ...] -> [M, R/M, ...], micro-batch m = rows m, M+m, ... (keeps rows spread
        over the data-parallel devices)."""
        R = x.shape[0]
        y = x.reshape(R // M, M, *x.shape[1:]).swapaxes(0, 1)
        return jax.lax.with_sharding_constraint(
            y, NamedSharding(self.mesh, P(None, self.batch_axes or None, *([None] * (x.ndim - 1)))))

    def _batch_logp(self, params, batch):
        M = self.cfg.num_micro_batches
        mbs = {k: self._micro(v, M) for k, v in batch.items()}

        def body(_, mb):
            return None, self._logp(params, mb)[0]

        _, logp_MbT = jax.lax.scan(body, None, mbs)
        R = batch["input_ids"].shape[0]
        return logp_MbT.swapaxes(0, 1).reshape(R, -1)

    def _loss(self, params, mb, denom, cfg: Optional[LearnerConfig] = None):
        """Micro-batch loss (its sum over the global denominator) and metric terms."""
        cfg = self.cfg if cfg is None else cfg
        logp_BT, ent_BT, router = self._logp_and_router(params, mb,
                                                         with_entropy=cfg.compute_entropy or cfg.loss.entropy_coef > 0)
        if cfg.mode == "sft":
            mask = mb["loss_mask"]
            # the aggregation decides how tokens are weighted (token_mean: each batch's token
            # mean; dataset_token_mean: the data set's token mean, see rl.sft)
            w_BT, _ = losses.token_weights(mask, mb["segment_ids"], agg=cfg.loss.agg,
                                           norm_constant=cfg.loss.norm_constant)
            s, _ = losses.sft_loss_terms(logp_BT, w_BT, denom=denom)
            m = {"nll": (-jnp.sum(mask * logp_BT), jnp.sum(mask))}
            if ent_BT is not None:
                m["entropy"] = (jnp.sum(mask * jax.lax.stop_gradient(ent_BT)), jnp.sum(mask))
        else:
            s, _, m = losses.policy_loss_terms(
                logp_BT, mb["old_logp"], mb["rollout_logp"], mb["advantages"], mb["loss_mask"], cfg.loss,
                segment_ids_BT=mb["segment_ids"], ref_logp_BT=mb.get("ref_logp"), entropy_BT=ent_BT,
                denom=denom)
        loss = s / denom
        if router is not None:   # MoE: the micro-batch's load-balancing loss, averaged over micro-batches
            lb, rm = losses.router_terms(router.counts_X, router.probs_X, router.tokens, router.dropped)
            loss = loss + cfg.router_aux_coef * lb / cfg.num_micro_batches
            m.update(rm)
        return loss, m

    def _denominator(self, batch):
        _, d = losses.token_weights(batch["loss_mask"], batch["segment_ids"], agg=self.cfg.loss.agg,
                                    norm_constant=self.cfg.loss.norm_constant)
        return jnp.maximum(d, 1.0 if self.cfg.mode == "sft" else 1e-12)

    def _step(self, state, batch):
        M = self.cfg.num_micro_batches
        params = state["params"]
        denom = self._denominator(batch)
        mbs = {k: self._micro(v, M) for k, v in batch.items()}
        grad_fn = jax.value_and_grad(self._loss, has_aux=True)
        mb0 = jax.tree.map(lambda x: x[0], mbs)
        _, m_shape = jax.eval_shape(self._loss, params, mb0, denom)

        def zero_metric(k, v):
            if k.startswith("max/"):
                return jnp.full(v.shape, -3e38, jnp.float32)
            if k.startswith("min/"):
                return jnp.full(v.shape, 3e38, jnp.float32)
            return (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))

        m0 = {k: zero_metric(k, v) for k, v in m_shape.items()}
        g0 = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        g0 = jax.lax.with_sharding_constraint(g0, self.param_sharding)

        def body(carry, mb):
            g_acc, l_acc, m_acc = carry
            (l, m), g = grad_fn(params, mb, denom)
            g_acc = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), g_acc, g)
            g_acc = jax.lax.with_sharding_constraint(g_acc, self.param_sharding)
            return (g_acc, l_acc + l, losses.combine_metrics(m_acc, m)), None

        (grads, loss, msum), _ = jax.lax.scan(body, (g0, jnp.zeros((), jnp.float32), m0), mbs)
        grad_norm = optax.global_norm(grads)
        grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
        updates, opt_state = self.tx.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        new_params = jax.lax.with_sharding_constraint(new_params, self.param_sharding)
        metrics = losses.finalize_metrics(msum)
        leaves = jax.tree.leaves(new_params)
        n = float(sum(x.size for x in leaves))        # a float: > 2^31 parameters overflow int32
        metrics.update(
            loss=loss, grad_norm=grad_norm, learning_rate=self.schedule(state["step"]),
            param_rms=jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves) / n),
            update_rms=jnp.sqrt(sum(jnp.sum(jnp.square(u.astype(jnp.float32))) for u in jax.tree.leaves(updates)) / n),
            loss_tokens=jnp.sum(batch["loss_mask"]), tokens=jnp.sum((batch["segment_ids"] > 0).astype(jnp.float32)))
        metrics["update_ratio"] = metrics["update_rms"] / jnp.maximum(metrics["param_rms"], 1e-30)
        new_state = {"params": new_params, "opt_state": opt_state, "step": state["step"] + 1, "rng": state["rng"]}
        return new_state, metrics

    # ---- ahead-of-time lowering ------------------------------------------------------------
    def batch_spec(self, rows: int, seq_len: int) -> dict:
        """The train step's batch as sharded ShapeDtypeStructs (``rows`` x ``seq_len``)."""
        check_rows(rows, self.row_multiple // (self.cfg.num_mini_batches or 1))
        return {k: jax.ShapeDtypeStruct((rows, seq_len), jnp.int32 if k in _INT_KEYS else jnp.float32,
                                        sharding=self.batch_sharding) for k in BATCH_KEYS}

    def lower_train_step(self, rows: int, seq_len: int):
        """``jax.stages.Lowered`` of one optimizer step on a ``rows x seq_len`` mini-batch (works on
        abstract and concrete learners; ``.compile()`` reports per-device memory)."""
        state = jax.tree.map(lambda x, s: _abstract(x, s), self.state, self.state_sharding)
        return self._train_step.lower(state, self.batch_spec(rows, seq_len))

    # ---- host-side API -------------------------------------------------------------------
    @property
    def row_multiple(self) -> int:
        """Rows of every TrainBatch must be a multiple of this (``PackConfig.row_multiple``):
        mini-batches x micro-batches x the devices of the batch axes (``data``, ``fsdp``,
        ``expert`` under the default rules)."""
        return required_row_multiple(self.cfg, self.mesh, self.rules)

    def _check_batch(self, batch: TrainBatch):
        check_rows(batch.shape[0], self.row_multiple)

    def put_batch(self, arrays: Mapping[str, np.ndarray]) -> dict:
        return {k: put_global(v, self.batch_sharding) for k, v in arrays.items()}

    def compute_logp(self, batch: TrainBatch, params=None) -> np.ndarray:
        """Trainer log-probs of the batch's targets (host numpy ``[R, T]``)."""
        self._require_concrete("compute_logp")
        self._check_batch(batch)
        arr = {k: v for k, v in batch.arrays().items() if k in _INT_KEYS}
        return fetch(self._logp_fn(self.state["params"] if params is None else params, self.put_batch(arr)))

    def train_step(self, arrays: Mapping[str, np.ndarray]) -> dict:
        """One optimizer step on one mini-batch (host arrays incl. ``old_logp``); host metrics.

        ``model_flops`` is the step's training FLOPs (``flops_per_token``), ``mfu`` its
        utilisation of ``cfg.peak_flops_per_device`` (0 when the peak is unknown)."""
        self._require_concrete("train_step")
        t0 = time.perf_counter()
        self.state, metrics = self._train_step(self.state, self.put_batch(arrays))
        out = {k: float(fetch(v)) for k, v in metrics.items()}
        dt = time.perf_counter() - t0
        out["step_time_s"] = dt
        out["tokens_per_s"] = out["tokens"] / dt
        if self.flops_per_token is not None:
            out["model_flops"] = self.flops_per_token(arrays["input_ids"].shape[1]) * out["tokens"]
            out["mfu"] = perf.mfu(out["model_flops"], dt, self.cfg.peak_flops_per_device, self.mesh.size)
        return out

    def update(self, batch: TrainBatch) -> list[dict]:
        """Consume one rollout batch: old-logp recompute, then epochs x mini-batches of steps.

        Returns one metrics dict per optimizer step (prefix-free names; see docs/rl.md;
        ``summarize_update`` pools them). A GRPO batch without signal (every advantage of its
        loss tokens exactly 0) makes no optimizer step (``cfg.skip_no_signal``) and returns
        ``[]``: its gradient would be zero, yet AdamW's momentum would still move the weights.
        ``policy_version`` counts the batch either way. With a reference (a KL term or
        ``cfg.reference_kl``) each step also reports ``kl_to_ref``, the k3 estimate of
        KL(policy that sampled the batch || reference) on the batch's loss tokens.
        """
        cfg = self.cfg
        self._require_concrete("update")
        self._check_batch(batch)
        arrays = dict(batch.arrays())
        if cfg.mode == "grpo" and cfg.skip_no_signal and not has_signal(arrays["advantages"], arrays["loss_mask"]):
            self.policy_version += 1
            return []
        t0 = time.perf_counter()
        extra = {}
        if cfg.mode == "grpo":
            # credited tokens no sampler drew (``types.UNSAMPLED_LOGP``, NaN): the loss gives them TIS
            # weight 1 (losses.policy_loss_terms), which needs the trainer's own log-probs
            if np.isnan(arrays["rollout_logp"]).any() and not cfg.recompute_old_logp:
                raise ValueError("the batch has credited tokens without sampling log-probabilities "
                                 "(Harness-S credit 'executed_action'); they need recompute_old_logp=True")
            if self.on_policy_step:   # NaN: the train step's own log-probs (losses.policy_loss_terms)
                arrays["old_logp"] = np.full_like(arrays["rollout_logp"], np.nan)
            else:
                arrays["old_logp"] = (self.compute_logp(batch) if cfg.recompute_old_logp
                                      else arrays["rollout_logp"].copy())
            if self.ref_params is not None:
                arrays["ref_logp"] = self.compute_logp(batch, self.ref_params)
                extra["kl_to_ref"] = masked_k3(arrays["ref_logp"], arrays["old_logp"], arrays["loss_mask"])
        else:
            arrays["old_logp"] = np.zeros_like(arrays["rollout_logp"])
        recompute_s = time.perf_counter() - t0
        R = batch.shape[0]
        per = R // cfg.num_mini_batches
        out = []
        for _ in range(cfg.num_epochs):
            if cfg.shuffle:
                rng = jnp.asarray(fetch(self.state["rng"]), jnp.uint32)
                rng, sub = jax.random.split(rng)
                perm = np.asarray(jax.random.permutation(sub, R))
                self.state["rng"] = put_global(np.asarray(rng), self.replicated)
            else:
                perm = np.arange(R)
            for k in range(cfg.num_mini_batches):
                idx = perm[k * per:(k + 1) * per]
                m = self.train_step({n: v[idx] for n, v in arrays.items()})
                m["logp_recompute_s"] = recompute_s
                m["policy_version"] = self.policy_version
                m.update(extra)
                out.append(m)
        self.policy_version += 1
        return out

    @property
    def on_policy_step(self) -> bool:
        """Whether ``update`` leaves ``old_logp`` to the train step: one optimizer step per batch
        (``num_mini_batches x num_epochs == 1``) with ``recompute_old_logp``, so the old policy is
        the current one and its log-probs are the step's own forward (no separate recompute
        program, no second forward per batch), unless a reference needs them on the host for
        ``kl_to_ref``."""
        cfg = self.cfg
        return (cfg.mode == "grpo" and cfg.recompute_old_logp and cfg.num_mini_batches * cfg.num_epochs == 1
                and self.ref_params is None)

    @property
    def step(self) -> int:
        return int(fetch(self.state["step"]))

    def params_numpy(self) -> dict:
        return jax.tree.map(fetch, self.state["params"])


def has_signal(advantages_BT, loss_mask_BT) -> bool:
    """Whether any loss token of a packed batch carries a non-zero advantage."""
    return bool(np.any(np.asarray(advantages_BT)[np.asarray(loss_mask_BT) > 0] != 0))


def masked_k3(ref_logp_BT, logp_BT, mask_BT) -> float:
    """Mean over the mask of the k3 estimator of KL(pi || ref) on tokens sampled from pi:
    ``exp(d) - 1 - d`` with ``d = ref_logp - logp`` (non-negative, unbiased)."""
    m = np.asarray(mask_BT) > 0
    if not m.any():
        return 0.0
    d = np.clip(np.asarray(ref_logp_BT, np.float64)[m] - np.asarray(logp_BT, np.float64)[m],
                -losses.LOG_RATIO_CLIP, losses.LOG_RATIO_CLIP)
    return float(np.mean(np.exp(d) - 1.0 - d))


# how summarize_update pools per-step metrics: sums, means over optimizer steps, batch-level
# values taken once; "max/" and "min/" names are extrema; every other metric is a mean over
# loss tokens, so it is pooled weighted by each step's loss tokens
_SUMMED = ("tokens", "loss_tokens", "model_flops", "step_time_s")
_STEP_MEANS = ("loss", "grad_norm", "learning_rate", "param_rms", "update_rms", "update_ratio", "mfu")
_ONCE = ("logp_recompute_s", "policy_version", "kl_to_ref")


def summarize_update(steps: list[dict]) -> dict:
    """One rollout batch's metrics from ``Learner.update``'s per-step dicts, pooled over every
    mini-batch and epoch (not the last step's): token-weighted means of the loss metrics
    (ratio, clip fractions, KL, entropy, ...), extrema over steps, sums of tokens/time/FLOPs,
    means over steps of loss, gradient norm and update size (plus ``max/grad_norm``),
    ``optimizer_steps``. ``[]`` (a batch without signal) gives ``skipped_no_signal = 1``."""
    if not steps:
        return {"optimizer_steps": 0.0, "skipped_no_signal": 1.0}
    out = {"optimizer_steps": float(len(steps)), "skipped_no_signal": 0.0,
           "max/grad_norm": max(float(m["grad_norm"]) for m in steps)}
    w = np.asarray([float(m.get("loss_tokens", 0.0)) for m in steps])
    for k in steps[0]:
        vals = np.asarray([float(m[k]) for m in steps])
        if k in _SUMMED:
            out[k] = float(vals.sum())
        elif k in _ONCE:
            out[k] = float(vals[0])
        elif k.startswith("max/"):
            out[k] = float(vals.max())
        elif k.startswith("min/"):
            out[k] = float(vals.min())
        elif k in _STEP_MEANS or w.sum() <= 0:
            out[k] = float(vals.mean())
        else:
            out[k] = float(np.sum(vals * w) / w.sum())
    out["tokens_per_s"] = out.get("tokens", 0.0) / max(out.get("step_time_s", 0.0), 1e-9)
    return out


def required_row_multiple(cfg: LearnerConfig, mesh: Mesh, rules=None) -> int:
    """num_mini_batches x num_micro_batches x devices on the batch axes."""
    return cfg.num_mini_batches * cfg.num_micro_batches * hsharding.batch_devices(mesh, rules)


def check_rows(rows: int, multiple: int) -> None:
    if rows % multiple:
        raise ValueError(
            f"TrainBatch has {rows} rows; the learner needs a multiple of num_mini_batches x "
            f"num_micro_batches x batch-axis devices = {multiple}. Pack with "
            f"PackConfig(row_multiple={multiple}).")
