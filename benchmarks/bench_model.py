"""Qwen3.5 model benchmark on this machine (CPU): ours (JAX) vs transformers (torch), same run.

Prints, per Qwen3.5-shaped config (presets ``small_10m`` and ``medium_80m``):
  * forward and forward+backward tokens/s of our model and of transformers on the same inputs and
    weights, and the ratio (the figure that matters; absolute numbers depend on the machine);
  * achieved FLOP/s as a fraction of the fp32 matmul peak measured in this script;
plus a Gated DeltaNet cost-vs-sequence-length table (512...8192, should grow linearly), compile
time of a 32-layer config unrolled vs scanned, and the peak RSS of a streaming ``load_hf``.

  python benchmarks/bench_model.py                    # everything (several minutes on 2 cores)
  python benchmarks/bench_model.py --sections gdn     # one section: speed,gdn,compile,rss
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

# measure this checkout's package, not whichever copy of harness_jax happens to be installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _timeit(fn, warmup=1, iters=3):
    for _ in range(warmup):
        fn()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) / iters


def matmul_peak(n=1024):
    import jax
    import jax.numpy as jnp
    import torch
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    t_jax = _timeit(lambda: f(a).block_until_ready(), iters=10)
    ta = torch.ones(n, n)
    t_torch = _timeit(lambda: ta @ ta, iters=10)
    flops = 2 * n ** 3
    return max(flops / t_jax, flops / t_torch), flops / t_jax, flops / t_torch


def bench_speed(preset, batch, seq, peak, iters):
    import jax
    import jax.numpy as jnp
    import torch
    import transformers
    from flax import nnx
    from harness_jax.models import qwen3_5
    from harness_jax.rl.logprobs import logprobs_from_hidden

    cfg = qwen3_5.presets.get(preset)
    torch.manual_seed(0)
    hf_cfg = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.to_hf_dict().items() if k != "architectures"})
    hf = (transformers.Qwen3_5MoeForCausalLM if cfg.is_moe else transformers.Qwen3_5ForCausalLM)(hf_cfg).eval()
    with tempfile.TemporaryDirectory() as d:
        hf.save_pretrained(d)
        model = qwen3_5.load_hf(d)
    ids = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(batch, seq))
    tokens = batch * seq
    fwd_flops = cfg.flops_per_token(seq) / 3 * tokens
    train_flops = cfg.flops_per_token(seq) * tokens

    gd, st = nnx.split(model)

    @jax.jit
    def fwd(st, x):
        return nnx.merge(gd, st)(x)

    def loss(st, x):
        # next-token cross-entropy over positions 0..T-2 (what HF's ``labels=`` loss computes),
        # through the learner's own log-prob path on the unsliced logits
        m = nnx.merge(gd, st)
        logp, _ = logprobs_from_hidden(m.lm_logits, m.hidden_states(x), jnp.roll(x, -1, axis=1))
        w = (jnp.arange(x.shape[1]) < x.shape[1] - 1).astype(jnp.float32)
        return -jnp.sum(logp * w) / (x.shape[0] * (x.shape[1] - 1))

    grad = jax.jit(jax.grad(loss))
    x = jnp.asarray(ids)
    t_fwd = _timeit(lambda: fwd(st, x).block_until_ready(), iters=iters)
    t_train = _timeit(lambda: jax.block_until_ready(grad(st, x)), iters=iters)

    tx = torch.tensor(ids)
    with torch.no_grad():
        t_hf_fwd = _timeit(lambda: hf(tx).logits, iters=iters)
    hf.train()

    def hf_step():
        hf.zero_grad(set_to_none=True)
        out = hf(tx, labels=tx)
        out.loss.backward()
    t_hf_train = _timeit(hf_step, iters=iters)
    row = dict(preset=preset, params_M=round(cfg.num_params() / 1e6, 1), batch=batch, seq=seq,
               ours_fwd_tok_s=tokens / t_fwd, hf_fwd_tok_s=tokens / t_hf_fwd,
               ours_train_tok_s=tokens / t_train, hf_train_tok_s=tokens / t_hf_train,
               fwd_ratio=t_hf_fwd / t_fwd, train_ratio=t_hf_train / t_train,
               ours_fwd_frac_peak=fwd_flops / t_fwd / peak, hf_fwd_frac_peak=fwd_flops / t_hf_fwd / peak,
               ours_train_frac_peak=train_flops / t_train / peak,
               hf_train_frac_peak=train_flops / t_hf_train / peak)
    return row


def bench_gdn(lengths, heads=8, dk=64, dv=64, chunk=64):
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import kernels as K
    rows = []
    f = jax.jit(lambda q, k, v, g, b: K.chunk_gated_delta_rule(q, k, v, g, b, chunk_size=chunk)[0])
    for T in lengths:
        rng = np.random.default_rng(T)
        q = jnp.asarray(rng.normal(size=(1, T, heads // 2, dk)), jnp.float32)
        k = jnp.asarray(rng.normal(size=(1, T, heads // 2, dk)), jnp.float32)
        v = jnp.asarray(rng.normal(size=(1, T, heads, dv)), jnp.float32)
        g = -jnp.abs(jnp.asarray(rng.normal(size=(1, T, heads)), jnp.float32)) * 0.1
        b = jax.nn.sigmoid(jnp.asarray(rng.normal(size=(1, T, heads)), jnp.float32))
        t = _timeit(lambda: f(q, k, v, g, b).block_until_ready(), iters=3)
        rows.append(dict(seq=T, ms=t * 1e3, us_per_token=t / T * 1e6))
    return rows


def bench_compile(layers=32):
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from harness_jax.models import qwen3_5
    out = {}
    for scan in (False, True):
        cfg = qwen3_5.presets.get("small_10m", num_hidden_layers=layers, layer_types=(), scan_layers=scan)
        model = nnx.eval_shape(lambda: qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0)))
        gd, st = nnx.split(model)
        f = jax.jit(lambda st, x: nnx.merge(gd, st)(x))
        t = time.perf_counter()
        f.lower(st, jax.ShapeDtypeStruct((1, 256), jnp.int32)).compile()
        out["scan" if scan else "unrolled"] = time.perf_counter() - t
    return out


_RSS_CHILD = r"""
import json, sys, time
import jax
from flax import nnx
from harness_jax.models import qwen3_5

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024

jax.numpy.zeros(1).block_until_ready()
try:
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak-RSS high-water mark
except OSError:
    pass
base = status("VmRSS")
t = time.perf_counter()
m = qwen3_5.load_hf(sys.argv[1])
jax.block_until_ready(jax.tree.leaves(nnx.state(m)))
dt = time.perf_counter() - t
print(json.dumps(dict(base_MB=base, peak_MB=status("VmHWM"), after_MB=status("VmRSS"), load_s=dt)))
"""


def bench_rss(preset="medium_80m"):
    import jax
    from flax import nnx
    from harness_jax.models import qwen3_5
    cfg = qwen3_5.presets.get(preset)
    with tempfile.TemporaryDirectory() as d:
        model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
        qwen3_5.save_hf(model, d, max_shard_bytes=64 << 20)
        del model
        ckpt_mb = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2 ** 20
        env = dict(os.environ, JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", _RSS_CHILD, d], capture_output=True, text=True, env=env,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        r = json.loads(out.stdout.strip().splitlines()[-1])
    r["checkpoint_MB"] = ckpt_mb
    r["growth_MB"] = r["peak_MB"] - r["base_MB"]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="speed,gdn,compile,rss")
    ap.add_argument("--presets", default="small_10m,medium_80m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--gdn_lengths", default="512,1024,2048,4096,8192")
    args = ap.parse_args()
    sections = args.sections.split(",")
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    peak, pj, pt = max(matmul_peak(n) for n in (1024, 2048))
    print(f"fp32 matmul peak (best of 1024^3 / 2048^3): {peak / 1e9:.1f} GFLOP/s  (jax {pj / 1e9:.1f}, "
          f"torch {pt / 1e9:.1f})")
    if "speed" in sections:
        print("\n| preset | params | tokens | ours fwd tok/s | HF fwd tok/s | fwd ratio | ours fwd %peak | HF fwd %peak "
              "| ours fwd+bwd tok/s | HF fwd+bwd tok/s | fwd+bwd ratio | ours train %peak | HF train %peak |")
        print("|" + "---|" * 13)
        for p in args.presets.split(","):
            r = bench_speed(p, args.batch, args.seq, peak, args.iters)
            print(f"| {r['preset']} | {r['params_M']}M | {r['batch']}x{r['seq']} | {r['ours_fwd_tok_s']:.0f} | "
                  f"{r['hf_fwd_tok_s']:.0f} | {r['fwd_ratio']:.2f}x | {100 * r['ours_fwd_frac_peak']:.0f}% | "
                  f"{100 * r['hf_fwd_frac_peak']:.0f}% | {r['ours_train_tok_s']:.0f} | {r['hf_train_tok_s']:.0f} | "
                  f"{r['train_ratio']:.2f}x | {100 * r['ours_train_frac_peak']:.0f}% | "
                  f"{100 * r['hf_train_frac_peak']:.0f}% |", flush=True)
    if "gdn" in sections:
        print("\nGated DeltaNet chunked rule (1 row, 8 v-heads, 64x64 state, chunk 64), forward:")
        print("| seq | ms | us/token |\n|---|---|---|")
        for r in bench_gdn([int(x) for x in args.gdn_lengths.split(",")]):
            print(f"| {r['seq']} | {r['ms']:.1f} | {r['us_per_token']:.2f} |", flush=True)
    if "compile" in sections:
        c = bench_compile()
        print(f"\ncompile time, 32-layer forward: unrolled {c['unrolled']:.1f}s, scan over cycles {c['scan']:.1f}s")
    if "rss" in sections:
        r = bench_rss()
        print(f"\nstreaming load_hf of a {r['checkpoint_MB']:.0f} MB fp32 checkpoint: peak RSS grew by "
              f"{r['growth_MB']:.0f} MB during the load (the loaded weights themselves: "
              f"{r['after_MB'] - r['base_MB']:.0f} MB; base {r['base_MB']:.0f} MB), {r['load_s']:.1f}s")


if __name__ == "__main__":
    main()
