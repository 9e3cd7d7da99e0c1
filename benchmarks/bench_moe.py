"""Expert-parallel MoE (``harness_jax/models/qwen3_5/moe.py``): what a CPU host can say about it.

  python benchmarks/bench_moe.py                          # flops, hlo, checkpoint
  python benchmarks/bench_moe.py --sections flops --tokens 4096
  python benchmarks/bench_moe.py --smoke                  # tiny shapes, every CPU section (CI)

Runs on 8 fake CPU devices (it sets ``--xla_force_host_platform_device_count=8`` before jax is
imported). CPU timings of collectives between fake devices say nothing about an accelerator, so
only compile-time facts and host-side costs are measured here:

* flops: XLA ``cost_analysis`` FLOPs and bytes of the routed experts, forward and forward +
  backward, for the dense path (every expert on every token), the single-device sorted path
  (``ragged_dot``, which XLA:CPU expands to a dense product, and the blocked grouped matmul), and
  the expert-parallel path on (data, expert) meshes (per-device program x devices; capacity factor
  1 and dropless). The ratio to dense is to be read against top_k / num_experts.
* hlo: collectives in the compiled forward + backward on an 8-device mesh: all-gathers of expert
  weights (shape) and all-to-alls, expert parallel against dense.
* checkpoint: a 64-expert tiny model; ``save_hf`` and the per-expert reads of ``load_hf``, this
  checkout against ``--old_ref`` (read with ``git show``): wall time, bytes fetched from device,
  peak host allocations (tracemalloc).

``PROBE_SECTIONS`` are for ``benchmarks/accel_probe.py`` (the accelerator probe): the MoE
block's tokens/s, expert parallel against dense, on the accelerator's devices.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tracemalloc
import types

if __name__ == "__main__":   # fake devices must exist before jax is imported
    _F = "--xla_force_host_platform_device_count=8"
    if _F not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _F).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # measure this checkout's package, not an installed copy
CHECKPOINT = "harness_jax/models/qwen3_5/checkpoint.py"


def _block(S, D, X, I, seed=0):
    import jax.numpy as jnp
    rng = np.random.default_rng(seed)
    f = lambda *shape, s=1.0: jnp.asarray(s * rng.normal(size=shape), jnp.float32)
    return f(S, D), f(X, D), f(X, 2 * I, D, s=0.2), f(X, D, I, s=0.2)


def _put(mesh, x, router, gu, dn):
    import jax
    from harness_jax import sharding as shd
    from harness_jax.models.qwen3_5 import moe as M
    put = lambda a, axes: jax.device_put(a, shd.named_sharding(axes, mesh, None, a.shape))
    return (jax.device_put(x, shd.batch_sharding(mesh, 2, shape=x.shape)), put(router, ("experts", "embed")),
            put(gu, M.GATE_UP_AXES), put(dn, M.DOWN_AXES))


def _compiled(impl, mesh, gmm, cf, top_k, backward, args):
    import jax
    import jax.numpy as jnp
    from harness_jax.models.qwen3_5 import moe as M

    def fwd(x, r, a, b):
        return M.routed_experts(x, r, a, b, top_k=top_k, impl=impl, mesh=mesh, gmm=gmm, capacity_factor=cf)[0]

    fn = jax.grad(lambda *a: jnp.sum(fwd(*a)), argnums=(0, 1, 2, 3)) if backward else fwd
    return jax.jit(fn).lower(*args).compile()


def flops(S=2048, D=256, X=16, I=128, top_k=2, meshes=((4, 1, 1, 2), (2, 1, 1, 4), (1, 1, 1, 8))):
    from harness_jax import sharding as shd
    x, r, gu, dn = _block(S, D, X, I)
    rows = [("dense (1 device)", "dense", None, "blocked", 0.0),
            ("sorted, ragged_dot (1 device)", "sorted", None, "ragged_dot", 0.0),
            ("sorted, blocked (1 device)", "sorted", None, "blocked", 0.0)]
    for shape in meshes:
        for cf in (1.0, 0.0):
            rows.append((f"ep {shape}, {'capacity 1' if cf else 'dropless'}", "ep", shape, "blocked", cf))
    print(f"\nrouted experts: {S} tokens, D={D}, {X} experts x I={I}, top_k={top_k} (top_k/X = {top_k / X:.3f}); "
          "XLA cost_analysis, whole program (per-device x devices on a mesh):")
    print("| path | fwd GFLOP | fwd / dense | fwd+bwd GFLOP | fwd+bwd / dense | fwd MB accessed |")
    print("|---|---|---|---|---|---|")
    out, dense = [], None
    for name, impl, shape, gmm, cf in rows:
        mesh = None if shape is None else shd.make_mesh(shape)
        args = (x, r, gu, dn) if mesh is None else _put(mesh, x, r, gu, dn)
        n = 1 if mesh is None else mesh.size
        cs = [_compiled(impl, mesh, gmm, cf, top_k, b, args).cost_analysis() for b in (False, True)]
        f, fb, by = n * cs[0]["flops"], n * cs[1]["flops"], n * cs[0].get("bytes accessed", 0.0)
        dense = dense or (f, fb)
        print(f"| {name} | {f / 1e9:.3f} | {f / dense[0]:.3f} | {fb / 1e9:.3f} | {fb / dense[1]:.3f} | {by / 1e6:.1f} |",
              flush=True)
        out.append(dict(path=name, fwd_flops=f, fwdbwd_flops=fb, fwd_bytes=by))
    return out


def hlo(S=512, D=64, X=8, I=32, top_k=2, meshes=((2, 1, 1, 4), (1, 2, 1, 4))):
    import re
    from harness_jax import sharding as shd
    x, r, gu, dn = _block(S, D, X, I)
    print(f"\ncollectives in the compiled forward + backward ({S} tokens, {X} experts [{X}, {2 * I}, {D}] / "
          f"[{X}, {D}, {I}]):")
    print("| mesh (data, fsdp, tensor, expert) | path | all-to-all | all-gathers of expert weights (result shapes) |")
    print("|---|---|---|---|")
    out = []
    for shape in meshes:
        mesh = shd.make_mesh(shape)
        for impl in ("ep", "dense"):
            txt = _compiled(impl, mesh, "blocked", 0.0, top_k, True, _put(mesh, x, r, gu, dn)).as_text()
            gathers = []
            for line in txt.splitlines():
                if "all-gather(" in line or "all-gather-start(" in line:
                    for dims in re.findall(r"f32\[([\d,]+)\]", line.split("=", 1)[1].split("all-gather")[0]):
                        sh = tuple(int(d) for d in dims.split(","))
                        if len(sh) == 3 and sh[1:] in ((2 * I, D), (D, I)):
                            gathers.append(sh)
            a2a = txt.count("all-to-all(")
            print(f"| {shape} | {impl} | {a2a} | {len(gathers)} {sorted(set(gathers))} |", flush=True)
            out.append(dict(mesh=shape, impl=impl, all_to_all=a2a, expert_gathers=gathers))
    return out


def _old_checkpoint(ref, required=True):
    try:
        src = subprocess.run(["git", "-C", ROOT, "show", f"{ref}:{CHECKPOINT}"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        if not required:
            print(f"(no old row: cannot read {CHECKPOINT} at {ref}: {e})")
            return None
        raise SystemExit(f"bench_moe: cannot read {CHECKPOINT} at --old_ref={ref} ({e}); run from a git clone")
    mod = types.ModuleType("harness_jax.models.qwen3_5._checkpoint_at_ref")
    mod.__package__ = "harness_jax.models.qwen3_5"
    sys.modules[mod.__name__] = mod
    exec(compile(src, f"{ref}:{CHECKPOINT}", "exec"), mod.__dict__)
    return mod


def checkpoint(old_ref="e28a2f8", experts=64, hidden=64, inter=32, workdir="/tmp/bench_moe_ckpt", required=True):
    import shutil
    import jax
    from flax import nnx
    from harness_jax.models import qwen3_5
    from harness_jax.models.qwen3_5 import checkpoint as new
    old = _old_checkpoint(old_ref, required)
    cfg = qwen3_5.presets.get("tiny_moe", num_experts=experts, num_experts_per_tok=4, hidden_size=hidden,
                              moe_intermediate_size=inter)
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    stacked = experts * 2 * inter * hidden * 4
    print(f"\n{experts}-expert tiny model ({cfg.num_hidden_layers} layers, stacked gate_up {stacked / 2**20:.2f} MiB "
          f"per layer): save_hf and the expert reads of load_hf, old@{old_ref} vs new")
    print("| | save s | save MB fetched from device | save peak host MB | expert read s (all layers) | "
          "expert read peak host MB |")
    print("|---|---|---|---|---|---|")
    out = []
    real = jax.device_get
    for name, mod in (("old", old), ("new", new)):
        if mod is None:
            continue
        d = os.path.join(workdir, name)
        shutil.rmtree(d, ignore_errors=True)
        fetched = []

        def counting(x):
            y = real(x)
            fetched.append(int(np.asarray(y).nbytes))
            return y

        jax.device_get = counting
        try:
            tracemalloc.start()
            t = time.perf_counter()
            mod.save_hf(model, d)
            save_s = time.perf_counter() - t
            _, save_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        finally:
            jax.device_get = real
        reader = mod._SourceReader(mod.read_safetensors_index(d), "model.")
        tracemalloc.start()
        t = time.perf_counter()
        for layer in range(cfg.num_hidden_layers):
            for kind, shape in (("gate_up", (experts, 2 * inter, hidden)), ("down", (experts, hidden, inter))):
                src = mod.ParamSource(("model", "layers", str(layer), "mlp", "experts", f"{kind}_proj"),
                                      f"model.layers.{layer}.mlp.experts.{kind}_proj", None, kind)
                mod._build_callback(reader, src, cfg, shape, np.dtype(np.float32))((slice(None),) * 3)
        read_s = time.perf_counter() - t
        _, read_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(f"| {name} | {save_s:.3f} | {sum(fetched) / 1e6:.1f} | {save_peak / 1e6:.2f} | {read_s:.3f} | "
              f"{read_peak / 1e6:.2f} |", flush=True)
        out.append(dict(version=name, save_s=save_s, save_fetched=sum(fetched), save_peak=save_peak,
                        read_s=read_s, read_peak=read_peak))
    shutil.rmtree(workdir, ignore_errors=True)
    return out


# ---------------------------------------------------------------------------------------------
# accelerator probe sections (benchmarks/accel_probe.py imports these)
# ---------------------------------------------------------------------------------------------
def _seconds(fn, args) -> float:
    import jax
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def probe_moe_block(smoke: bool = False, repeats: int = 5) -> list:
    """Tokens/s of the routed experts, forward + backward, expert parallel (blocked and ragged_dot
    grouped matmuls; on one device the sorted path) against dense, on the default backend's
    devices (all on the ``expert`` axis, tokens over it). Shapes: a 35B-A3B layer (D 2048, 256
    experts x I 512, top 8) at 8k tokens per device, or tiny ones with ``smoke``. One dict per path."""
    import jax
    import jax.numpy as jnp
    from harness_jax import sharding as shd
    n = len(jax.devices())
    S, D, X, I, k = (64 * n, 32, 8, 16, 2) if smoke else (8192 * n, 2048, 256, 512, 8)
    while X % n:
        n //= 2
    mesh = shd.make_mesh((1, 1, 1, n), devices=jax.devices()[:n])
    x, r, gu, dn = (a.astype(jnp.bfloat16) for a in _block(S, D, X, I))
    args = _put(mesh, x, r, gu, dn)
    out = []
    for impl, gmm in (("ep", "blocked"), ("ep", "ragged_dot"), ("dense", "blocked")):
        c = _compiled(impl, mesh, gmm, 0.0, k, True, args)
        jax.block_until_ready(c(*args))                   # warm-up
        s = float(np.median([_seconds(c, args) for _ in range(repeats)]))
        out.append(dict(section="moe_block", path=impl if impl == "dense" else f"{impl}/{gmm}", devices=n, tokens=S,
                        seconds=s, tokens_per_s=S / s, platform=jax.default_backend()))
    return out


PROBE_SECTIONS = {"moe_block": probe_moe_block}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="flops,hlo,checkpoint")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--old_ref", default="e28a2f8", help="git ref of the checkpoint code to compare with (the last one with per-expert host copies)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, every section (CI)")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}, cores: {os.cpu_count()} (shared machine; only compile-time "
          "facts and host-side costs are measured)")
    if args.smoke:
        flops(S=256, D=32, X=8, I=16, meshes=((2, 1, 1, 4),))
        hlo(S=128, D=32, X=8, I=16, meshes=((2, 1, 1, 4),))
        import tempfile
        checkpoint(args.old_ref, experts=8, hidden=32, inter=16, workdir=tempfile.mkdtemp(), required=False)
        return   # the probe section's smoke run is accel_probe.py --smoke
    if "flops" in args.sections:
        flops(S=args.tokens)
    if "hlo" in args.sections:
        hlo()
    if "checkpoint" in args.sections:
        checkpoint(args.old_ref)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
