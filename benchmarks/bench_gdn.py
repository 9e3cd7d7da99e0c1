"""Gated DeltaNet chunked rule: stability and speed, this checkout's kernel vs the old one (same run).

  python benchmarks/bench_gdn.py                          # error table + timings 512..8192
  python benchmarks/bench_gdn.py --sections accuracy      # only the error table (issue #19)
  python benchmarks/bench_gdn.py --sections chunks        # error vs an fp64 recurrence per chunk size
  python benchmarks/bench_gdn.py --sections speed --lengths 512,2048 --repeats 7
  python benchmarks/bench_gdn.py --trsm                   # also time a LAPACK triangular solve
  python benchmarks/bench_gdn.py --sections pallas,cost   # Pallas kernels: parity, FLOPs and bytes
  python benchmarks/bench_gdn.py --smoke                  # tiny shapes of pallas and cost (CI)

"Old" is ``harness_jax/models/qwen3_5/kernels.py`` at ``--old_ref`` (default abf0342, the last
commit with the doubling-product triangular inverse), read with ``git show`` and executed as a
private module: the library itself has one kernel only. Needs the git history (a clone).

* accuracy: max |chunked - recurrent| of the outputs (fp32, T=256) on the input families of the
  issue's table plus saturated cases; "new grad" is the largest gradient error (q, k, v, g, beta)
  of the new chunked rule against autodiff of the recurrent rule, relative to the gradient's max.
* chunks: max output error against an fp64 numpy recurrence, per chunk size, on "resets" rows
  (near-1 decays with g = -100 on 10% of the tokens: large in-chunk cumulative log-decays, the
  one case where the chunked form loses digits the recurrence keeps), next to transformers'
  chunked torch function and our recurrent rule.
* speed: forward and forward+backward (grad of a weighted sum of the outputs) of one layer's
  rule, 1 row, 4 key / 8 value heads, 64x64 state, chunk 64 (the shapes of bench_model's GDN
  table). Old and new alternate inside one process, ``--repeats`` times; medians are printed,
  with the load average before and after, because this machine is shared and not quiet.
  ``--trsm`` adds the new kernel with its inverse swapped for ``lax.linalg.triangular_solve``
  (the LAPACK / cuBLAS custom call, autodiff backward) for comparison.
* pallas: the Pallas kernels (``gdn_pallas``, interpret mode on CPU) against the recurrent rule
  on the accuracy rows, fp32 and bf16 inputs: max output / state errors and the largest
  gradient error relative to the gradient's max. Interpret mode says nothing about speed.
* cost: FLOPs and HBM bytes of one 9B-sized layer's rule (16 key / 32 value heads, 128 x 128
  state, chunk 64) at ``--cost_lengths``: XLA ``cost_analysis`` of the jnp rule (forward, forward
  + backward) against the kernels' analytic cost (``gdn_pallas.kernel_cost``, the estimate the
  pallas calls give XLA): what the kernel saves is the intra-chunk matrices' HBM round trips.

``PROBE_SECTIONS`` are for ``benchmarks/accel_probe.py`` (the accelerator probe): forward and
forward + backward time of the Pallas kernels against the jnp rule at 8k and 32k tokens.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # measure this checkout's package, not an installed copy
KERNELS = "harness_jax/models/qwen3_5/kernels.py"


def old_kernels(ref: str):
    """The kernels module as of git ``ref`` (a private module object, not importable by name)."""
    try:
        src = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:{KERNELS}"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"bench_gdn: cannot read {KERNELS} at --old_ref={ref} ({e}); run from a git "
                         "clone that has that commit, or pass --old_ref")
    mod = types.ModuleType(f"kernels_at_{ref}")
    exec(compile(src, f"{ref}:{KERNELS}", "exec"), mod.__dict__)
    return mod


def stress_inputs(T, A, E, rho, beta, decay, heads=2, seed=0):
    """One row: keys with pairwise cosine ~rho (a shared direction plus noise), constant beta,
    decay 'none' (g=0), 'small' (g=-0.01), 'strong' (g ~ -U(0, 4)), 'resets' (g ~ -U(0, 0.01)
    with a -100 every ~10 tokens: large in-chunk cumulative sums)."""
    rng = np.random.default_rng(seed)
    k = np.sqrt(rho) * rng.normal(size=(1, 1, heads, A)) + np.sqrt(1 - rho) * rng.normal(size=(1, T, heads, A))
    q = rng.normal(size=(1, T, heads, A))
    v = rng.normal(size=(1, T, heads, E))
    g = {"none": np.zeros((1, T, heads)), "small": np.full((1, T, heads), -0.01),
         "strong": -rng.uniform(0, 4, size=(1, T, heads)),
         "resets": -rng.uniform(0, 0.01, size=(1, T, heads))}[decay]
    if decay == "resets":
        g[:, ::10] = -100.0
    b = np.full((1, T, heads), beta)
    return [np.asarray(x, np.float32) for x in (q, k, v, g, b)]


ACCURACY_ROWS = [  # (rho, beta, decay, head dim): the table, then saturated cases
    (0.0, 0.5, "none", 128), (0.0, 0.99, "none", 128), (0.9, 0.5, "none", 128), (0.9, 0.99, "none", 128),
    (0.99, 0.99, "small", 32), (0.999, 1.0, "none", 128), (0.999, 1.0, "strong", 64),
    (0.9, 0.99, "resets", 64),
]


def accuracy(old, new, T=256):
    import jax
    import jax.numpy as jnp
    rec = jax.jit(new.recurrent_gated_delta_rule)
    chunk = {(name, L): jax.jit(lambda *a, m=m, L=L: m.chunk_gated_delta_rule(*a, chunk_size=L)[0])
             for name, m in (("old", old), ("new", new)) for L in (32, 64)}

    def grad_err(x, L=64):
        w = jnp.asarray(np.random.default_rng(1).normal(size=x[2].shape), jnp.float32)
        f_c = lambda *a: jnp.sum(new.chunk_gated_delta_rule(*a, chunk_size=L)[0] * w)
        f_r = lambda *a: jnp.sum(new.recurrent_gated_delta_rule(*a)[0] * w)
        gc = jax.jit(jax.grad(f_c, argnums=tuple(range(5))))(*x)
        gr = jax.jit(jax.grad(f_r, argnums=tuple(range(5))))(*x)
        return max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in zip(gc, gr))

    print(f"\nchunked vs recurrent, max abs output error (fp32, T={T}; outputs are O(0.1..1)):")
    print("| keys cos | beta | decay | head dim | old chunk 32 | old chunk 64 | new chunk 32 | new chunk 64 "
          "| new grad (chunk 64, rel.) |")
    print("|" + "---|" * 9)
    for rho, beta, decay, A in ACCURACY_ROWS:
        x = [jnp.asarray(a) for a in stress_inputs(T, A, A, rho, beta, decay)]
        ref = np.asarray(rec(*x)[0])
        errs = []
        for key in (("old", 32), ("old", 64), ("new", 32), ("new", 64)):
            o = np.asarray(chunk[key](*x))
            errs.append("NaN" if not np.all(np.isfinite(o)) else f"{np.abs(o - ref).max():.1e}")
        print(f"| {rho} | {beta} | {decay} | {A} | " + " | ".join(errs) + f" | {grad_err(x):.1e} |", flush=True)


def trsm_inverse(a_XLL):
    """(I + N)^-1 by the backend's triangular solve (comparison only; autodiff backward)."""
    import jax.numpy as jnp
    from jax import lax
    eye = jnp.broadcast_to(jnp.eye(a_XLL.shape[-1], dtype=a_XLL.dtype), a_XLL.shape)
    return lax.linalg.triangular_solve(a_XLL, eye, left_side=True, lower=True, unit_diagonal=True)


def recurrent_fp64(q, k, v, g, beta):
    """The gated delta rule token by token in float64 numpy (equal q/k/v head counts)."""
    f = lambda x: np.asarray(x, np.float64)
    q, k, v, g, beta = map(f, (q, k, v, g, beta))
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(q.shape[-1])
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    S = np.zeros(q.shape[:1] + q.shape[2:] + v.shape[-1:])
    o = np.zeros(v.shape)
    for t in range(q.shape[1]):
        S = S * np.exp(g[:, t])[..., None, None]
        u = (v[:, t] - np.einsum("bnae,bna->bne", S, k[:, t])) * beta[:, t][..., None]
        S = S + np.einsum("bna,bne->bnae", k[:, t], u)
        o[:, t] = np.einsum("bnae,bna->bne", S, q[:, t])
    return o


def chunk_errors(new, T=100, chunks=(16, 32, 64)):
    import jax
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf
    print(f"\nmax |o - fp64 recurrence| on resets rows (beta 0.99 / 1.0, key cos 0 / 0.9, T={T}):")
    print("| head dim | " + " | ".join(f"chunk {L}" for L in chunks) + " | transformers chunked (64) | recurrent |")
    print("|" + "---|" * (len(chunks) + 3))
    for A in (32, 128):
        rows = [stress_inputs(T, A, 32, rho, beta, "resets", seed=i)
                for i, (rho, beta) in enumerate([(0.0, 0.99), (0.0, 1.0), (0.9, 0.99), (0.9, 1.0)])]
        x = [np.concatenate(parts) for parts in zip(*rows)]
        ref = recurrent_fp64(*x)
        err = lambda o: f"{np.abs(np.asarray(o, np.float64) - ref).max():.1e}"
        cells = [err(jax.jit(lambda *a, L=L: new.chunk_gated_delta_rule(*a, chunk_size=L)[0])(*x)) for L in chunks]
        o_hf, _ = hf.torch_chunk_gated_delta_rule(*(torch.from_numpy(a) for a in x), chunk_size=64,
                                                  use_qk_l2norm_in_kernel=True)
        cells += [err(o_hf.numpy()), err(jax.jit(new.recurrent_gated_delta_rule)(*x)[0])]
        print(f"| {A} | " + " | ".join(cells) + " |", flush=True)


def _time(fn, *args):
    import jax
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def speed(kernels: dict, lengths, repeats, chunk=64, k_heads=4, v_heads=8, dk=64, dv=64):
    import jax
    import jax.numpy as jnp
    print(f"\none layer's chunked rule (1 row, {k_heads} key / {v_heads} value heads, {dk}x{dv} state, "
          f"chunk {chunk}); median of {repeats} interleaved runs, ms:")
    names = list(kernels)
    head = " | ".join(f"{n} fwd | {n} fwd+bwd" for n in names)
    ratios = " | ".join(f"{n}/{names[0]} fwd | {n}/{names[0]} fwd+bwd" for n in names[1:])
    print(f"| seq | {head} | {ratios} |")
    print("|" + "---|" * (1 + 2 * len(names) + 2 * (len(names) - 1)))
    out = []
    for T in lengths:
        rng = np.random.default_rng(T)
        q = jnp.asarray(rng.normal(size=(1, T, k_heads, dk)), jnp.float32)
        k = jnp.asarray(rng.normal(size=(1, T, k_heads, dk)), jnp.float32)
        v = jnp.asarray(rng.normal(size=(1, T, v_heads, dv)), jnp.float32)
        g = -jnp.abs(jnp.asarray(rng.normal(size=(1, T, v_heads)), jnp.float32)) * 0.1
        b = jax.nn.sigmoid(jnp.asarray(rng.normal(size=(1, T, v_heads)), jnp.float32))
        w = jnp.asarray(rng.normal(size=(1, T, v_heads, dv)), jnp.float32)
        fns = {}
        for n, (mod, setup) in kernels.items():
            setup()
            fwd = jax.jit(lambda q, k, v, g, b, m=mod: m.chunk_gated_delta_rule(q, k, v, g, b, chunk_size=chunk)[0])
            loss = lambda q, k, v, g, b, m=mod: jnp.sum(m.chunk_gated_delta_rule(q, k, v, g, b, chunk_size=chunk)[0] * w)
            grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
            fwd(q, k, v, g, b).block_until_ready()        # compile (traced with this setup)
            jax.block_until_ready(grad(q, k, v, g, b))
            fns[n] = (fwd, grad)
        times = {n: ([], []) for n in names}
        for r in range(repeats):
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                fwd, grad = fns[n]
                times[n][0].append(_time(fwd, q, k, v, g, b))
                times[n][1].append(_time(grad, q, k, v, g, b))
        med = {n: (1e3 * float(np.median(a)), 1e3 * float(np.median(b))) for n, (a, b) in times.items()}
        cells = " | ".join(f"{med[n][0]:.1f} | {med[n][1]:.1f}" for n in names)
        rat = " | ".join(f"{med[n][0] / med[names[0]][0]:.2f}x | {med[n][1] / med[names[0]][1]:.2f}x"
                         for n in names[1:])
        print(f"| {T} | {cells} | {rat} |", flush=True)
        out.append(dict(seq=T, **{f"{n}_fwd_ms": med[n][0] for n in names},
                        **{f"{n}_fwdbwd_ms": med[n][1] for n in names}))
    return out


def _layer_inputs(T, k_heads, v_heads, dk, dv, dtype, seed=0):
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(1, T, k_heads, dk)), dtype)
    k = jnp.asarray(rng.normal(size=(1, T, k_heads, dk)), dtype)
    v = jnp.asarray(rng.normal(size=(1, T, v_heads, dv)), dtype)
    g = -jnp.abs(jnp.asarray(rng.normal(size=(1, T, v_heads)), jnp.float32)) * 0.1
    b = jax.nn.sigmoid(jnp.asarray(rng.normal(size=(1, T, v_heads)), jnp.float32))
    return q, k, v, g, b


def pallas_parity(T=256, rows=ACCURACY_ROWS, chunk=64):
    """Max errors of the Pallas kernels against the recurrent rule (fp32; bf16 inputs)."""
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import gdn_pallas as P
    from harness_jax.models.qwen3_5 import kernels as K
    print(f"\nPallas kernels (interpret mode) vs the recurrent rule, T={T}, chunk {chunk}: max |out err|, "
          "max |state err|, max gradient error / gradient max (q, k, v, g, beta):")
    print("| keys cos | beta | decay | head dim | fp32 out | fp32 state | fp32 grad | bf16 out / max|out| "
          "| bf16 state |")
    print("|" + "---|" * 9)
    out = []
    for rho, beta, decay, A in rows:
        x = [jnp.asarray(a) for a in stress_inputs(T, A, A, rho, beta, decay)]
        w = jnp.asarray(np.random.default_rng(1).normal(size=x[2].shape), jnp.float32)
        f_rec = lambda *a: K.recurrent_gated_delta_rule(*a)
        f_pal = lambda *a: P.chunk_gated_delta_rule(*a, chunk_size=chunk)
        (o_r, s_r), (o_p, s_p) = jax.jit(f_rec)(*x), jax.jit(f_pal)(*x)
        grads = [jax.jit(jax.grad(lambda *a, f=f: jnp.sum(f(*a)[0].astype(jnp.float32) * w),
                                  argnums=tuple(range(5))))(*x) for f in (f_rec, f_pal)]
        g_err = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b))) for a, b in zip(grads[1], grads[0]))
        xb = [a.astype(jnp.bfloat16) for a in x[:3]] + x[3:]
        o_rb, s_rb = jax.jit(f_rec)(*[a.astype(jnp.float32) for a in xb])
        o_b, s_b = jax.jit(f_pal)(*xb)
        r = dict(rho=rho, beta=beta, decay=decay, A=A, out=float(jnp.max(jnp.abs(o_p - o_r))),
                 state=float(jnp.max(jnp.abs(s_p - s_r))), grad=g_err,
                 bf16_out=float(jnp.max(jnp.abs(o_b.astype(jnp.float32) - o_rb)) / jnp.max(jnp.abs(o_rb))),
                 bf16_state=float(jnp.max(jnp.abs(s_b - s_rb))))
        print(f"| {rho} | {beta} | {decay} | {A} | {r['out']:.1e} | {r['state']:.1e} | {r['grad']:.1e} | "
              f"{r['bf16_out']:.1e} | {r['bf16_state']:.1e} |", flush=True)
        out.append(r)
    return out


def cost(lengths, k_heads=16, v_heads=32, dk=128, dv=128, chunk=64):
    """XLA cost analysis of the jnp rule vs the Pallas kernels' analytic cost, one layer, bf16."""
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import gdn_pallas as P
    from harness_jax.models.qwen3_5 import kernels as K
    print(f"\none layer's rule, {k_heads} key / {v_heads} value heads, {dk}x{dv} state, chunk {chunk}, bf16 inputs: "
          "GFLOP and GB of HBM traffic (jnp: XLA cost_analysis on CPU of one chunk x chunks, since XLA counts a "
          "scan body once; pallas: kernel_cost, recompute policy):")
    print("| seq | jnp fwd GFLOP | jnp fwd GB | pallas fwd GFLOP | pallas fwd GB | jnp fwd+bwd GFLOP | jnp fwd+bwd GB "
          "| pallas fwd+bwd GFLOP | pallas fwd+bwd GB |")
    print("|" + "---|" * 9)
    out = []
    args = [jax.ShapeDtypeStruct((1, chunk) + a.shape[2:], a.dtype)
            for a in _layer_inputs(8, k_heads, v_heads, dk, dv, jnp.bfloat16)]
    fwd = lambda *a: K.chunk_gated_delta_rule(*a, chunk_size=chunk)[0]
    bwd = jax.grad(lambda *a: jnp.sum(fwd(*a).astype(jnp.float32)), argnums=tuple(range(5)))
    one = [jax.jit(f).lower(*args).compile().cost_analysis() for f in (fwd, bwd)]
    for T in lengths:
        M = -(-T // chunk)
        cj = [{k: M * c.get(k, 0.0) for k in ("flops", "bytes accessed")} for c in one]
        kc = {k: P.kernel_cost(1, v_heads, k_heads, T, dk, dv, chunk, 2, k) for k in ("forward", "states", "backward")}
        pf = (kc["forward"]["flops"], kc["forward"]["bytes_accessed"])
        pb = tuple(sum(kc[k][f] for k in kc) for f in ("flops", "bytes_accessed"))   # recompute policy
        row = dict(seq=T, jnp_fwd_flops=cj[0]["flops"], jnp_fwd_bytes=cj[0].get("bytes accessed", 0.0),
                   pallas_fwd_flops=pf[0], pallas_fwd_bytes=pf[1], jnp_fwdbwd_flops=cj[1]["flops"],
                   jnp_fwdbwd_bytes=cj[1].get("bytes accessed", 0.0), pallas_fwdbwd_flops=pb[0],
                   pallas_fwdbwd_bytes=pb[1])
        print(f"| {T} | {row['jnp_fwd_flops'] / 1e9:.2f} | {row['jnp_fwd_bytes'] / 1e9:.3f} | {pf[0] / 1e9:.2f} | "
              f"{pf[1] / 1e9:.3f} | {row['jnp_fwdbwd_flops'] / 1e9:.2f} | {row['jnp_fwdbwd_bytes'] / 1e9:.3f} | "
              f"{pb[0] / 1e9:.2f} | {pb[1] / 1e9:.3f} |", flush=True)
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# accelerator probe sections (benchmarks/accel_probe.py imports these)
# ---------------------------------------------------------------------------------------------
def probe_gdn(smoke: bool = False, repeats: int = 5, lengths=(8192, 32768)) -> list:
    """Forward and forward + backward seconds of one 9B-sized layer's rule (1 row, 16 key / 32
    value heads, 128 x 128 state, chunk 64, bf16), Pallas kernels against the jnp rule, on the
    default backend. ``smoke``: 2 / 4 heads, 32 x 32 state, 128 tokens (CPU interpret mode)."""
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import gdn_pallas as P
    from harness_jax.models.qwen3_5 import kernels as K
    kh, vh, d = (2, 4, 32) if smoke else (16, 32, 128)
    lengths = (128,) if smoke else lengths
    impls = {"jnp": K.chunk_gated_delta_rule, "pallas": P.chunk_gated_delta_rule}
    out = []
    for T in lengths:
        x = _layer_inputs(T, kh, vh, d, d, jnp.bfloat16)
        for name, fn in impls.items():
            fwd = jax.jit(lambda *a, fn=fn: fn(*a, chunk_size=64)[0])
            fb = jax.jit(jax.grad(lambda *a, fn=fn: jnp.sum(fn(*a, chunk_size=64)[0].astype(jnp.float32)),
                                  argnums=tuple(range(5))))
            res = dict(section="gdn", impl=name, seq=T, platform=jax.default_backend())
            for key, f in (("fwd_s", fwd), ("fwdbwd_s", fb)):
                jax.block_until_ready(f(*x))
                res[key] = float(np.median([_time(f, *x) for _ in range(repeats)]))
            out.append(res)
    return out


PROBE_SECTIONS = {"gdn": probe_gdn}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="accuracy,chunks,speed")
    ap.add_argument("--cost_lengths", default="8192,32768")
    ap.add_argument("--smoke", action="store_true", help="tiny pallas and cost sections (CI)")
    ap.add_argument("--old_ref", default="abf0342")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--trsm", action="store_true", help="also time the new kernel with a triangular-solve inverse")
    args = ap.parse_args()
    from harness_jax.models.qwen3_5 import kernels as new
    print(f"load average at start: {os.getloadavg()}, cores: {os.cpu_count()} (shared machine: compare "
          "columns of one run, not runs)")
    if args.smoke:
        pallas_parity(T=64, rows=ACCURACY_ROWS[-2:-1], chunk=32)
        cost([256], k_heads=2, v_heads=4, dk=32, dv=32)
        return   # the probe section's smoke run is accel_probe.py --smoke
    if "pallas" in args.sections:
        pallas_parity()
    if "cost" in args.sections:
        cost([int(x) for x in args.cost_lengths.split(",")])
    if not {"accuracy", "chunks", "speed"} & set(args.sections.split(",")):
        return
    old = old_kernels(args.old_ref)
    if "accuracy" in args.sections:
        accuracy(old, new)
    if "chunks" in args.sections:
        chunk_errors(new)
    if "speed" in args.sections:
        ours = new.unit_lower_inverse

        def inverse(fn):  # the chunked rule looks unit_lower_inverse up when it is traced
            return lambda: setattr(new, "unit_lower_inverse", fn)

        kernels = {f"old@{args.old_ref}": (old, lambda: None), "new": (new, inverse(ours))}
        if args.trsm:
            kernels["new+trsm"] = (new, inverse(trsm_inverse))
        try:
            speed(kernels, [int(x) for x in args.lengths.split(",")], args.repeats, chunk=args.chunk)
        finally:
            new.unit_lower_inverse = ours
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
