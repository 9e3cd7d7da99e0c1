"""Learner throughput and MFU on CPU vs this machine's fp32 matmul peak and vs transformers.

    python -m benchmarks.bench_learner --preset medium_80m --rows 4 --seq 512 --steps 2

Measures, in one process and on the same batch:
  1. the fp32 matmul peak of this machine (jnp.dot of 2048^2 matrices, best of several);
  2. the harness_jax GRPO train step (one device; fwd + bwd + AdamW; chunked log-probs);
  3. the forward+backward of the transformers Qwen3.5 model (torch, CPU) with the same config
     and batch: no optimizer, so an upper bound for a torch trainer's throughput.
Prints one JSON object. MFU = training FLOPs (``flops_per_token``: 6 x matmul parameters +
attention and Gated-DeltaNet terms) x tokens/s / measured peak.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def matmul_peak(n=2048, reps=5):
    import jax
    import jax.numpy as jnp
    a = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def flops_per_token(cfg, T: int, matmul_params: int) -> float:
    """fwd+bwd training FLOPs per token (the model config's own formula when it has one)."""
    if hasattr(cfg, "flops_per_token"):
        return float(cfg.flops_per_token(T))
    full = sum(t == "full_attention" for t in cfg.layer_types)
    linear = len(cfg.layer_types) - full
    attn = full * 6 * T * cfg.num_attention_heads * cfg.head_dim                 # QK^T + AV, causal avg T/2
    gdn = linear * 6 * 4 * cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim
    return 6.0 * matmul_params + attn + gdn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="medium_80m")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--micro", type=int, default=1)
    ap.add_argument("--logit_chunk", type=int, default=128)
    ap.add_argument("--skip_torch", action="store_true")
    ap.add_argument("--single_thread", action="store_true",
                    help="XLA flag --xla_cpu_multi_thread_eigen=false and torch.set_num_threads(1). Not a "
                         "like-for-like setting: XLA:CPU's YNNPACK matmuls still use every core (jaxlib 0.10.2), "
                         "so the default runs both sides multi-threaded. Kept because multi-threaded Eigen "
                         "deadlocked once on the small_10m train step on a loaded machine.")
    args = ap.parse_args()
    if args.single_thread:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

    import jax
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.rl import batch as rlbatch
    from harness_jax import sharding as shd
    from harness_jax.rl import learner as L
    from harness_jax.types import TokenSegment

    out = {"preset": args.preset, "rows": args.rows, "seq": args.seq, "devices": 1,
           "cpu_count": os.cpu_count(), "jax": jax.__version__}
    peak = matmul_peak()
    out["matmul_peak_gflops"] = peak / 1e9

    cfg = qwen3_5.presets.get(args.preset)
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    emb = cfg.vocab_size * cfg.hidden_size
    matmul_params = n_params - (0 if cfg.tie_word_embeddings else emb)   # the lookup is not a matmul
    fpt = flops_per_token(cfg, args.seq, matmul_params)
    out.update(params=n_params, flops_per_token=fpt)

    rng = np.random.default_rng(0)
    T = args.seq + 1
    segs = [TokenSegment(token_ids=[int(t) for t in rng.integers(3, cfg.vocab_size, T)],
                         loss_mask=[0] * 16 + [1] * (T - 16),
                         rollout_logprobs=[0.0] * 16 + [-5.0] * (T - 16), advantage=float(i % 2) - 0.5)
            for i in range(args.rows)]
    batch = rlbatch.pack_segments(segs, rlbatch.PackConfig(buckets=(args.seq,)))
    lcfg = L.LearnerConfig(num_micro_batches=args.micro, shuffle=False, logit_chunk=args.logit_chunk,
                           peak_flops_per_device=peak, recompute_old_logp=False)
    lr = L.Learner(model, lcfg, mesh=shd.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1]),
                   flops_per_token=lambda t: fpt)
    arrays = dict(batch.arrays())
    arrays["old_logp"] = arrays["rollout_logp"].copy()
    t = time.perf_counter()
    lr.train_step(arrays)                                          # compile + first step
    out["jax_compile_and_first_step_s"] = time.perf_counter() - t
    times = []
    for _ in range(args.steps):
        m = lr.train_step(arrays)
        times.append(m["step_time_s"])
    dt = min(times)
    tokens = args.rows * args.seq
    out["jax_step_s"] = dt
    out["jax_tokens_per_s"] = tokens / dt
    out["jax_mfu_vs_measured_peak"] = fpt * tokens / dt / peak

    if not args.skip_torch:
        import torch
        import transformers
        torch.manual_seed(0)
        if args.single_thread:
            torch.set_num_threads(1)
        hf_cfg = cfg.to_hf_dict()
        cls = transformers.Qwen3_5MoeForCausalLM if cfg.is_moe else transformers.Qwen3_5ForCausalLM
        conf_cls = transformers.Qwen3_5MoeTextConfig if cfg.is_moe else transformers.Qwen3_5TextConfig
        hf_cfg = {k: v for k, v in hf_cfg.items() if k not in ("architectures", "model_type")}
        tm = cls(conf_cls(**hf_cfg)).float().train()
        ids = torch.as_tensor(np.asarray(batch.input_ids), dtype=torch.long)
        tg = torch.as_tensor(np.asarray(batch.target_ids), dtype=torch.long)

        def fwd_bwd():
            tm.zero_grad(set_to_none=True)
            logits = tm(input_ids=ids).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tg.reshape(-1))
            loss.backward()

        fwd_bwd()
        tt = []
        for _ in range(args.steps):
            t = time.perf_counter()
            fwd_bwd()
            tt.append(time.perf_counter() - t)
        out["torch_threads"] = torch.get_num_threads()
        out["torch_fwd_bwd_s"] = min(tt)
        out["torch_tokens_per_s"] = tokens / min(tt)
        out["torch_mfu_vs_measured_peak"] = fpt * tokens / min(tt) / peak
        out["jax_speedup_vs_torch"] = out["jax_tokens_per_s"] / out["torch_tokens_per_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
