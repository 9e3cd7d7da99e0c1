"""Accelerator probe: one command, one JSON object, on one H200 / H100 or one TPU host.

Sections (a registry: other benchmarks add theirs with ``@section("name")``, e.g. the Gated
DeltaNet kernel, expert-parallel MoE or the engine, and ``--sections`` picks them):

* ``attention``: every attention implementation that runs natively on this platform (plus the
  reference where it fits) at 8k and 32k tokens (``--smoke``: 128), forward and forward+backward:
  median time and peak device memory (``memory_stats``; on CPU the compiled temporaries).
* ``gdn`` / ``moe``: the Gated DeltaNet kernels against the jnp rule at 8k and 32k, and the MoE
  block's tokens/s expert parallel against dense (``benchmarks/bench_gdn.py`` /
  ``bench_moe.py``'s ``PROBE_SECTIONS`` functions).
* ``train_step``: the GRPO train step of a depth-truncated Qwen3.5-9B (one layer cycle: 3 Gated
  DeltaNet + 1 gated attention, full width, bf16 compute, fp32 master weights) at 8k tokens under
  the chosen memory plan (``--remat``, ``--attention``): tokens/s, MFU against the chip's bf16
  dense peak (``flops_per_token`` of the truncated model), peak memory.
* ``engine``: the embedded engine on the same depth-truncated 9B in bf16 (64 requests of 512
  tokens + 256 generated, paged KV, then prefills arriving mid-decode): tokens/s, decode tokens/s;
  and a 4B-sized policy's bf16 weight export to a memory-backed dir, its reload, and the fp32
  ``save_hf`` it replaces (``bench_engine.probe``).

    python benchmarks/accel_probe.py                      # on the accelerator (< 8 minutes)
    python benchmarks/accel_probe.py --smoke              # tiny shapes on CPU (CI runs this)
    python benchmarks/accel_probe.py --sections=attention --seq_lens=8192

Timings on the shared CPU box are for smoke only (never compare them across runs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# bf16 dense peak FLOP/s per chip, by substring of jax's device_kind
CHIP_PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "v5p": 459e12, "v6": 918e12,
                  "v5 lite": 197e12, "v5e": 197e12, "v4": 275e12}

SECTIONS: dict[str, tuple[Callable, str]] = {}


def section(name: str, doc: str = ""):
    """Register ``fn(args) -> dict`` as section ``name`` (its result goes under that key)."""
    def deco(fn):
        SECTIONS[name] = (fn, doc or (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return deco


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def platform_info() -> dict:
    import jax
    d = jax.devices()[0]
    kind = getattr(d, "device_kind", "cpu")
    peak = next((v for k, v in CHIP_PEAK_BF16.items() if k.lower() in kind.lower()), None)
    return {"platform": d.platform, "device_kind": kind, "devices": jax.device_count(),
            "bf16_peak_flops": peak, "jax": jax.__version__}


def _peak_memory(compiled) -> dict:
    """Device peak since the last reset where the runtime reports it; else the compiled figures."""
    import jax
    stats = jax.devices()[0].memory_stats() or {}
    out = {}
    if "peak_bytes_in_use" in stats:
        out["peak_bytes_in_use"] = int(stats["peak_bytes_in_use"])
    ma = compiled.memory_analysis()
    if ma is not None:
        out["compiled_temp_bytes"] = int(ma.temp_size_in_bytes)
        out["compiled_total_bytes"] = int(ma.argument_size_in_bytes + ma.output_size_in_bytes
                                          + ma.temp_size_in_bytes - ma.alias_size_in_bytes)
    return out


def _time(fn, args, iters: int) -> float:
    """Median seconds of ``fn(*args)`` (compiled, warmed up)."""
    import jax
    jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


def native_impls(platform: str) -> list:
    from harness_jax.models.qwen3_5 import attention as A
    if platform == "cpu":        # CPU: every implementation (Pallas interpreted), for the smoke run
        return list(A.IMPLS)
    plat = "gpu" if platform in ("gpu", "cuda", "rocm") else platform
    return [n for n in A.IMPLS if plat in A.get(n).platforms]


# ---------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------
@section("attention")
def attention_section(args) -> dict:
    """Each attention implementation: forward and forward+backward time and peak memory."""
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import attention as A

    info = platform_info()
    N, K, H = (4, 2, 32) if args.smoke else (16, 4, 256)        # Qwen3.5-9B attention shape
    lens = [int(x) for x in args.seq_lens.split(",")] if args.seq_lens else ([128] if args.smoke else [8192, 32768])
    impls = args.impls.split(",") if args.impls else native_impls(info["platform"])
    dtype = jnp.float32 if args.smoke else jnp.bfloat16
    out = {}
    for T in lens:
        ks = jax.random.split(jax.random.key(0), 3)
        q = jax.random.normal(ks[0], (1, T, N, H), dtype)
        k = jax.random.normal(ks[1], (1, T, K, H), dtype)
        v = jax.random.normal(ks[2], (1, T, K, H), dtype)
        seg = jnp.repeat(jnp.arange(1, 5, dtype=jnp.int32), -(-T // 4))[:T][None]   # 4 packed segments
        for impl in impls:
            if impl == "reference" and T * T * N * 4 > args.reference_max_bytes:
                out[f"{impl}@{T}"] = {"skipped": "the [B, K, G, T, S] fp32 scores exceed --reference_max_bytes"}
                continue
            fwd = jax.jit(lambda q, k, v, impl=impl: A.attention(q, k, v, impl=impl, segment_ids_BT=seg))
            grad = jax.jit(jax.grad(lambda q, k, v, impl=impl: jnp.sum(
                A.attention(q, k, v, impl=impl, segment_ids_BT=seg).astype(jnp.float32)), argnums=(0, 1, 2)))
            row = {}
            try:
                for name, f in (("fwd", fwd), ("fwd_bwd", grad)):
                    c = f.lower(q, k, v).compile()
                    row[f"{name}_s"] = _time(c, (q, k, v), args.iters)
                    row[f"{name}_memory"] = _peak_memory(c)
                # causal attention FLOPs (4 * T^2/2 * N * H forward; backward 2.5x)
                row["fwd_tflops_per_s"] = 2 * T * T * N * H / row["fwd_s"] / 1e12
            except Exception as e:        # a kernel that does not lower here: say which and why
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            out[f"{impl}@{T}"] = row
    return out


@section("train_step")
def train_step_section(args) -> dict:
    """GRPO train step of a depth-truncated Qwen3.5-9B (one cycle) in bf16: tokens/s, MFU, memory."""
    import jax
    import numpy as np
    from harness_jax import sharding
    from harness_jax.models import qwen3_5
    from harness_jax.rl.learner import Learner, LearnerConfig

    info = platform_info()
    if args.smoke:
        cfg = qwen3_5.presets.get("tiny", scan_layers=True)
        T = 64
    else:
        cfg = qwen3_5.presets.get("9b", num_hidden_layers=4, layer_types=(), scan_layers=True)
        T = args.train_seq_len
    attn = args.attention or {"tpu": "splash", "gpu": "pallas_gpu"}.get(info["platform"], "xla")
    cfg = cfg.replace(remat=args.remat, attention_impl=attn, reduce_scatter_dtype=args.reduce_scatter_dtype)
    mesh = sharding.make_mesh((1, 1, 1, 1), devices=jax.devices()[:1])
    from flax import nnx
    dtype = "float32" if args.smoke else "bfloat16"
    model = sharding.init_sharded(lambda: qwen3_5.Qwen3_5ForCausalLM(
        cfg, rngs=nnx.Rngs(0), dtype=dtype, param_dtype="float32"), mesh).set_mesh(mesh)
    ln = Learner(model, LearnerConfig(logit_chunk=1024 if not args.smoke else 0), mesh=mesh)
    rng = np.random.default_rng(0)
    R = 1
    seg = np.repeat(np.arange(1, 5, dtype=np.int32), T // 4)[None].repeat(R, 0)
    pos = np.tile(np.arange(T // 4, dtype=np.int32), 4)[None].repeat(R, 0)
    ids = rng.integers(0, cfg.vocab_size, (R, T)).astype(np.int32)
    arrays = {"input_ids": ids, "target_ids": np.roll(ids, -1, 1), "loss_mask": np.ones((R, T), np.float32),
              "rollout_logp": np.full((R, T), -1.0, np.float32), "old_logp": np.full((R, T), -1.0, np.float32),
              "advantages": rng.normal(size=(R, T)).astype(np.float32), "segment_ids": seg, "positions": pos}
    compiled = ln.lower_train_step(R, T).compile()
    ln.train_step(arrays)                                # warm-up (and compile of the real call)
    times = []
    for _ in range(args.iters):
        m = ln.train_step(arrays)
        times.append(m["step_time_s"])
    dt = sorted(times)[len(times) // 2]
    tokens = R * T
    flops = cfg.flops_per_token(T) * tokens
    peak = info["bf16_peak_flops"]
    return {"model": "qwen3.5-9b x 1 cycle" if not args.smoke else "tiny", "seq_len": T, "rows": R,
            "num_params": ln.num_params, "remat": cfg.remat, "attention": attn, "dtype": dtype,
            "step_s": dt, "tokens_per_s": tokens / dt, "model_flops_per_step": flops,
            "mfu": (flops / dt / peak) if peak else None,
            "mfu_note": None if peak else "no bf16 peak known for this device (CPU): MFU not reported",
            "memory": _peak_memory(compiled)}


@section("engine")
def engine_section(args) -> dict:
    """Engine tokens/s of a depth-truncated 9B in bf16 (paged KV, mixed steps) and the weight sync of a 4B-sized export."""
    from benchmarks import bench_engine
    return bench_engine.probe(args.smoke)


@section("gdn")
def gdn_section(args) -> dict:
    """Gated DeltaNet, one 9B layer (bf16): Pallas kernels vs the jnp rule, fwd and fwd+bwd time."""
    from benchmarks import bench_gdn
    lens = tuple(int(x) for x in args.seq_lens.split(",")) if args.seq_lens else (8192, 32768)
    rows = bench_gdn.probe_gdn(smoke=args.smoke, repeats=args.iters, lengths=lens)
    return {f"{r['impl']}@{r['seq']}": r for r in rows}


@section("moe")
def moe_section(args) -> dict:
    """MoE routed experts (35B-A3B layer shape, bf16), fwd+bwd tokens/s: expert parallel vs dense."""
    from benchmarks import bench_moe
    return {r["path"]: r for r in bench_moe.probe_moe_block(smoke=args.smoke, repeats=args.iters)}


# ---------------------------------------------------------------------------------------------
def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny shapes (CPU, CI)")
    p.add_argument("--sections", default="", help=f"comma-separated subset of {', '.join(SECTIONS)}")
    p.add_argument("--impls", default="", help="attention implementations (default: native to the platform)")
    p.add_argument("--seq_lens", default="", help="attention lengths (default 8192,32768; smoke 128)")
    p.add_argument("--reference_max_bytes", type=float, default=40e9, help="skip the reference above this")
    p.add_argument("--iters", type=int, default=5, help="timed repetitions (median)")
    p.add_argument("--train_seq_len", type=int, default=8192, help="train_step tokens per row")
    p.add_argument("--remat", default="full", help="memory plan: remat policy of the train step")
    p.add_argument("--attention", default="", help="train_step attention (default: native kernel)")
    p.add_argument("--reduce_scatter_dtype", default="float32", help="train_step gradient reduction dtype")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    if args.smoke:
        args.iters = min(args.iters, 2)
    names = [s for s in args.sections.split(",") if s] or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise SystemExit(f"--sections: unknown {unknown}; known: {', '.join(SECTIONS)}")
    t0 = time.perf_counter()
    result = {"platform": platform_info(), "smoke": bool(args.smoke)}
    for n in names:
        t = time.perf_counter()
        result[n] = SECTIONS[n][0](args)
        result[n]["section_s"] = time.perf_counter() - t
    result["total_s"] = time.perf_counter() - t0
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
