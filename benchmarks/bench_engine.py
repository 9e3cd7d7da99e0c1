"""Embedded JaxEngine vs transformers generate() (torch CPU), continuation speed-up, export/reload,
and a serving workload against today's engine in the same run.

  python -m benchmarks.bench_engine --preset medium_80m --batches 1,8,32 --new_tokens 64
  python -m benchmarks.bench_engine --sections=workload --workload_preset=small_10m

Reports (JSON lines + a summary table):
  * end-to-end generated tokens/s (prefill of a --prompt_len prompt + --new_tokens greedy tokens,
    after a warm-up run that compiles) of the engine and of ``generate()`` at each batch size;
  * a --turns-turn episode (each turn appends --obs_tokens and generates --turn_tokens) with
    continuation (cached state reused) vs re-prefilling the whole history every turn;
  * ``save_hf`` export, ``load_hf`` reload and in-place ``update_weights`` times, and the SGLang
    sync protocol (pause/flush/update/continue/verify) against the local EngineServer;
  * ``sync``: the weight sync's file round trip for --preset, the bf16 ``export_hf`` to the
    memory-backed dir + a bf16 reload vs the fp32 ``save_hf`` + fp32 reload (memory-backed dir
    and disk);
  * ``workload`` (``engine_workload.py``, one process per engine variant, the same checkpoint):
    --workload_slots - --workload_arrivals requests of mixed prompt lengths decoding, then
    --workload_arrivals long prompts arriving mid-decode into the free slots;
    tokens/s, TTFT, the longest decode stall while they prefill, KV cache bytes held and used, for
    today's engine (the tree at --baseline_ref, extracted with ``git archive``) and this one
    (contiguous and paged cache, with and without overlap, and paged with a pool the size of the
    measured peak). Every variant of this engine mixes prompt chunks with decode (chunked prefill
    under a token budget); today's engine prefills in separate steps, stalling decode.
``probe(smoke)`` is the accelerator probe's ``engine`` section (``benchmarks/accel_probe.py``).
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "medium_80m", "qwen3_5 preset (random weights).")
flags.DEFINE_string("batches", "1,8,32", "Batch sizes.")
flags.DEFINE_integer("prompt_len", 32, "Prompt tokens per request.")
flags.DEFINE_integer("new_tokens", 64, "Generated tokens per request.")
flags.DEFINE_integer("decode_steps", 8, "Engine decode steps per host round trip.")
flags.DEFINE_integer("turns", 10, "Episode turns for the continuation benchmark.")
flags.DEFINE_integer("obs_tokens", 48, "Observation tokens appended per turn.")
flags.DEFINE_integer("turn_tokens", 16, "Tokens generated per turn.")
flags.DEFINE_bool("hf", True, "Also time transformers generate().")
flags.DEFINE_integer("torch_threads", 0, "torch threads (0 = torch default).")
flags.DEFINE_string("compare_layout", "hf", "Also time the engine with this weight_layout at each batch "
                    "(the main rows use the default, 'auto'); empty = skip.")
flags.DEFINE_string("sections", "throughput,continuation,weights,sync,workload", "Which sections to run.")
flags.DEFINE_string("baseline_ref", "e28a2f8", "Git ref of today's engine for the workload comparison.")
flags.DEFINE_string("workload_preset", "small_10m", "qwen3_5 preset of the serving workload.")
flags.DEFINE_integer("workload_slots", 64, "Engine slots = requests in flight once the arrivals come.")
flags.DEFINE_integer("workload_arrivals", 8, "Long prompts arriving mid-decode (the other slots start decoding).")
flags.DEFINE_integer("workload_arrival_len", 512, "Prompt tokens of each arrival.")
flags.DEFINE_integer("workload_new_tokens", 64, "Tokens generated per request.")
flags.DEFINE_integer("workload_token_budget", 2112, "Also run the paged engine with this token budget per mixed "
                     "step (2112 = prefill_rows 8 x the 256 bucket + 64 decoding rows; the default budget "
                     "is the largest prefill bucket + the slots); 0 = skip.")
flags.DEFINE_string("workload_variants", "", "Comma-separated subset of the variants (default all).")


def _emit(rec):
    print(json.dumps(rec), flush=True)
    return rec


def throughput(model, ckpt: str, results: dict) -> None:
    """Engine vs ``generate()`` tokens/s at each batch size (and the other weight layout)."""
    import numpy as np

    from harness_jax.sampling import JaxEngine, SamplingParams
    cfg = model.config
    rng = np.random.default_rng(0)
    greedy = SamplingParams(max_new_tokens=FLAGS.new_tokens, temperature=0.0, ignore_eos=True)
    one_token = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    max_len = FLAGS.prompt_len + FLAGS.new_tokens + 8
    hf = None
    if FLAGS.hf:
        import torch
        import transformers
        if FLAGS.torch_threads:
            torch.set_num_threads(FLAGS.torch_threads)
        hf = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    for B in [int(b) for b in FLAGS.batches.split(",")]:
        prompts = rng.integers(3, cfg.vocab_size, size=(B, FLAGS.prompt_len)).tolist()
        kw = dict(max_slots=B, max_len=max_len, prefill_buckets=(FLAGS.prompt_len,), decode_steps=FLAGS.decode_steps)
        eng = JaxEngine(model, **kw)
        t0 = time.perf_counter()
        eng.generate_batch(prompts, greedy)           # compile + warm-up
        compile_s = time.perf_counter() - t0
        eng.flush_cache()
        t0 = time.perf_counter()
        outs = eng.generate_batch(prompts, greedy)
        dt = time.perf_counter() - t0
        eng.flush_cache()
        t0 = time.perf_counter()
        eng.generate_batch(prompts, one_token)           # prefill (+ first token) only
        pre = time.perf_counter() - t0
        layout = eng.weight_layout
        eng.close()
        n = sum(len(o.token_ids) for o in outs)
        rec = {"batch": B, "weight_layout": layout, "engine_tok_s": n / dt, "engine_s": dt,
               "engine_first_call_s": compile_s, "engine_decode_tok_s": (n - B) / max(dt - pre, 1e-9)}
        if FLAGS.compare_layout and FLAGS.compare_layout != layout:
            other = JaxEngine(model, weight_layout=FLAGS.compare_layout, **kw)
            other.generate_batch(prompts, greedy)
            other.flush_cache()
            t0 = time.perf_counter()
            assert [o.token_ids for o in other.generate_batch(prompts, greedy)] == [o.token_ids for o in outs]
            rec[f"engine_{FLAGS.compare_layout}_tok_s"] = n / (time.perf_counter() - t0)
            other.close()
        if hf is not None:
            rec.update(_hf_generate(hf, prompts, B))
            rec["decode_speedup"] = rec["engine_decode_tok_s"] / rec["hf_decode_tok_s"]
            rec["speedup"] = rec["engine_tok_s"] / rec["hf_tok_s"]
        results[f"batch{B}"] = _emit(rec)


def _hf_generate(hf, prompts, B) -> dict:
    import torch
    ids = torch.tensor(prompts)
    kw = dict(max_new_tokens=FLAGS.new_tokens, min_new_tokens=FLAGS.new_tokens, do_sample=False,
              pad_token_id=0, attention_mask=torch.ones_like(ids))
    with torch.no_grad():
        hf.generate(ids[:, :8], max_new_tokens=2, do_sample=False, pad_token_id=0)   # warm-up
        t0 = time.perf_counter()
        g = hf.generate(ids, **kw)
        hdt = time.perf_counter() - t0
        t0 = time.perf_counter()
        hf.generate(ids, **dict(kw, max_new_tokens=1, min_new_tokens=1))
        hpre = time.perf_counter() - t0
    hn = (g.shape[1] - ids.shape[1]) * B
    return {"hf_tok_s": hn / hdt, "hf_s": hdt, "hf_decode_tok_s": (hn - B) / max(hdt - hpre, 1e-9)}


def continuation(model, results: dict):
    """A multi-turn episode: continuing the cached state vs re-prefilling the history."""
    import numpy as np

    from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams
    cfg = model.config
    rng = np.random.default_rng(1)
    T = FLAGS.turns
    hist_len = FLAGS.prompt_len + T * (FLAGS.obs_tokens + FLAGS.turn_tokens) + 8
    eng = JaxEngine(model, max_slots=2, max_len=hist_len, prefill_buckets=(16, 64, 256),
                    decode_steps=FLAGS.decode_steps)
    turn_p = SamplingParams(max_new_tokens=FLAGS.turn_tokens, temperature=0.0, ignore_eos=True)

    def episode(reuse: bool) -> float:
        hist = rng.integers(3, cfg.vocab_size, size=FLAGS.prompt_len).tolist()
        total = 0.0
        for t in range(T):
            if not reuse:
                eng.flush_cache()
            t0 = time.perf_counter()
            r = eng.generate_sync(GenerateRequest(hist, turn_p, f"turn{t}", episode_id="ep" if reuse else None))
            total += time.perf_counter() - t0
            hist = hist + r.token_ids + rng.integers(3, cfg.vocab_size, size=FLAGS.obs_tokens).tolist()
        eng.flush_cache()
        return total

    episode(True)
    episode(False)                                     # compile every bucket both ways
    cont_s, reprefill_s = episode(True), episode(False)
    results["continuation"] = _emit({"turns": T, "continuation_s": cont_s, "reprefill_s": reprefill_s,
                                     "speedup": reprefill_s / cont_s})
    return eng


def weights(eng, reloaded, ckpt: str, tmp: str, results: dict) -> None:
    """In-place update and the SGLang sync protocol over local HTTP (bf16 export)."""
    from harness_jax.sampling import SGLangClient
    from harness_jax.sampling.server import EngineServer
    t0 = time.perf_counter()
    eng.update_weights(reloaded)            # the first one compiles the layout conversion
    update_first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    eng.update_weights(reloaded)
    update_s = time.perf_counter() - t0
    srv = EngineServer(eng, model_path=ckpt)
    url = srv.start()
    client = SGLangClient(url, flush_interval_s=0.05)
    rep = asyncio.run(client.sync_model(reloaded, os.path.join(tmp, "export2"), weight_version=1))
    srv.shutdown()
    client.close()
    results["weights"] = _emit({"export_s": results["export_s"], "reload_s": results["reload_s"],
                                "update_in_place_s": update_s, "update_in_place_first_s": update_first_s,
                                "weight_layout": eng.weight_layout, "http_sync_total_s": rep.total_s,
                                "http_sync_export_s": rep.export_s, "http_sync_export_bytes": rep.export_bytes,
                                "http_sync_phases": rep.per_server[url]})


# ---------------------------------------------------------------------------------------------
# the serving workload: today's engine against this one, one process per variant
# ---------------------------------------------------------------------------------------------
def _baseline_tree(tmp: str) -> str:
    """``harness_jax`` at --baseline_ref, extracted with ``git archive`` (nothing checked out)."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(tmp, "baseline")
    os.makedirs(out, exist_ok=True)
    arch = subprocess.run(["git", "archive", FLAGS.baseline_ref, "harness_jax"], cwd=root, check=True,
                          capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", out], input=arch, check=True)
    return out


def _run_variant(spec: dict, pythonpath: str) -> dict:
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=pythonpath)
    proc = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "engine_workload.py"), json.dumps(spec)],
                          env=env, capture_output=True, text=True, cwd=root)
    if proc.returncode != 0:
        return {"name": spec["name"], "error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def workload(tmp: str, results: dict) -> None:
    """--workload_slots mixed-length requests decoding, long prompts arriving mid-decode."""
    from flax import nnx

    from harness_jax.models import qwen3_5
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = qwen3_5.presets.get(FLAGS.workload_preset)
    ckpt = os.path.join(tmp, "workload_ckpt")
    qwen3_5.save_hf(qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0)), ckpt)
    B, new, A = FLAGS.workload_slots, FLAGS.workload_new_tokens, FLAGS.workload_arrivals
    if not 0 < A < B:
        raise ValueError(f"--workload_arrivals must be in [1, --workload_slots), got {A} (slots {B})")
    max_len = max(256, FLAGS.workload_arrival_len) + new + 16
    base = dict(max_slots=B, max_len=max_len, prefill_buckets=(16, 64, 256), decode_steps=FLAGS.decode_steps)
    # B - A requests decode, A slots wait free for the arrivals: B requests in flight once they come
    spec = dict(checkpoint=ckpt, initial=B - A, arrivals=A, prompt_len_range=(16, 256),
                arrival_len=FLAGS.workload_arrival_len, new_tokens=new, arrive_after=(B - A) * new // 4)
    variants = [("today", base, _baseline_tree(tmp)), ("contiguous", dict(base, cache_kind="contiguous"), root),
                ("contiguous_no_overlap", dict(base, cache_kind="contiguous", overlap=False), root),
                ("paged", dict(base, cache_kind="paged"), root),
                ("paged_no_overlap", dict(base, cache_kind="paged", overlap=False), root)]
    if FLAGS.workload_token_budget:
        variants.append(("paged_budget", dict(base, cache_kind="paged", token_budget=FLAGS.workload_token_budget),
                          root))
    keep = set(FLAGS.workload_variants.split(",")) if FLAGS.workload_variants else None
    out = {}
    for name, kw, path in variants:
        if keep is None or name in keep:
            out[name] = _emit(_run_variant(dict(spec, name=name, engine=kw), path))
    if "paged" in out and "error" not in out["paged"] and (keep is None or "paged_pool_at_peak" in keep):
        page_bytes = out["paged"]["kv_held_bytes"] // (B * -(-max_len // 16))
        peak_pages = -(-out["paged"]["kv_peak_used_bytes"] // page_bytes)
        out["paged_pool_at_peak"] = _emit(_run_variant(dict(spec, name="paged_pool_at_peak", engine=dict(
            base, cache_kind="paged", num_pages=max(peak_pages, -(-max_len // 16)))), root))
    results["workload"] = out


def _print_workload(out: dict) -> None:
    print("\n| engine | tok/s | decode tok/s, all slots busy | TTFT arrivals p50 / max (s) | TTFT initial p50 (s) | "
          "longest decode stall (s) | KV held (MB) | KV used at peak (MB) | preemptions |\n"
          "|---|---|---|---|---|---|---|---|---|")
    for name, r in out.items():
        if "error" in r:
            print(f"| {name} | error: {r['error'][-200:]!r} |")
            continue
        print(f"| {name} | {r['tok_s']:.0f} | {r.get('decode_tok_s', float('nan')):.0f} | "
              f"{r['ttft_arrivals_p50_s']:.2f} / {r['ttft_arrivals_max_s']:.2f} | "
              f"{r['ttft_initial_p50_s']:.2f} | {r['decode_stall_max_s']:.2f} | {r['kv_held_bytes'] / 2**20:.1f} | "
              f"{r['kv_peak_used_bytes'] / 2**20:.1f} | {r['stats'].get('preemptions', 0)} |")


def main(argv):
    del argv
    import jax
    import numpy as np
    from flax import nnx

    from harness_jax.models import qwen3_5

    sections = set(FLAGS.sections.split(","))
    tmp = tempfile.mkdtemp(prefix="bench_engine_")
    results = {}
    if sections & {"throughput", "continuation", "weights", "sync"}:
        cfg = qwen3_5.presets.get(FLAGS.preset)
        model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
        n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
        _emit({"preset": FLAGS.preset, "params": n_params, "devices": str(jax.devices()[0].platform),
               "cpu_count": os.cpu_count()})
        ckpt = os.path.join(tmp, "ckpt")
        t0 = time.perf_counter()
        qwen3_5.save_hf(model, ckpt)
        results["export_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        reloaded = qwen3_5.load_hf(ckpt, dtype="float32")
        results["reload_s"] = time.perf_counter() - t0
        if "throughput" in sections:
            throughput(model, ckpt, results)
            _print_throughput(results)
        if sections & {"continuation", "weights"}:
            eng = continuation(model, results)
            if "weights" in sections:
                weights(eng, reloaded, ckpt, tmp, results)
            eng.close()
            c = results["continuation"]
            print(f"\ncontinuation ({c['turns']} turns): {c['continuation_s']:.2f}s vs re-prefill "
                  f"{c['reprefill_s']:.2f}s -> {c['speedup']:.2f}x")
    if "sync" in sections:
        results["sync"] = _emit(dict(weight_sync_compare(model, "bench_engine", disk_dir=tmp), preset=FLAGS.preset))
        _print_sync(results["sync"])
    if "workload" in sections:
        workload(tmp, results)
        _print_workload(results["workload"])


def _print_sync(r: dict) -> None:
    mb = 2 ** 20
    print(f"\n| weight sync ({r['params'] / 1e6:.1f}M params) | bytes (MB) | write (s) | reload (s) | total (s) |"
          "\n|---|---|---|---|---|")
    print(f"| bf16 export_hf, memory-backed dir | {r['bf16_export_bytes'] / mb:.0f} | {r['bf16_export_s']:.2f} | "
          f"{r['reload_s']:.2f} | {r['bf16_export_s'] + r['reload_s']:.2f} |")
    for tag, where in (("", "memory-backed dir"), ("_disk", "disk")):
        if f"fp32_save_hf{tag}_s" in r:
            w, rl = r[f"fp32_save_hf{tag}_s"], r[f"fp32_reload{tag}_s"]
            print(f"| fp32 save_hf, {where} | {r[f'fp32_bytes{tag}'] / mb:.0f} | {w:.2f} | {rl:.2f} | {w + rl:.2f} |")


def _print_throughput(results: dict) -> None:
    nan = float("nan")
    batches = [int(b) for b in FLAGS.batches.split(",")]
    cmp = f"engine_{FLAGS.compare_layout}_tok_s"
    print(f"\n| batch | engine tok/s ({results[f'batch{batches[0]}']['weight_layout']}) | "
          f"engine tok/s ({FLAGS.compare_layout or '-'}) | generate() tok/s | speed-up | engine decode tok/s | "
          "generate() decode tok/s | decode speed-up |\n|---|---|---|---|---|---|---|---|")
    for B in batches:
        r = results[f"batch{B}"]
        print(f"| {B} | {r['engine_tok_s']:.0f} | {r.get(cmp, nan):.0f} | {r.get('hf_tok_s', nan):.0f} | "
              f"{r.get('speedup', nan):.1f}x | {r['engine_decode_tok_s']:.0f} | {r.get('hf_decode_tok_s', nan):.0f} | "
              f"{r.get('decode_speedup', nan):.1f}x |")


def weight_sync_compare(model, name: str, disk_dir: str = "") -> dict:
    """The SGLang weight sync's file round trip for ``model`` (fp32 master weights): the bf16
    export (``weight_sync.export_hf``) to the memory-backed dir and a server's bf16 reload,
    against the fp32 ``save_hf`` it replaces and its fp32 reload, written to the same memory-backed
    dir and, with ``disk_dir``, to a disk-backed one (the old path: ``rollout.sync_dir`` on disk)."""
    import shutil

    import jax
    import numpy as np
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import weight_sync

    def reload(path, dtype):
        t0 = time.perf_counter()
        jax.block_until_ready(jax.tree_util.tree_leaves(nnx.state(qwen3_5.load_hf(path, dtype=dtype))))
        return time.perf_counter() - t0

    def dir_bytes(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))

    params = sum(int(np.prod(a.shape)) for a in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
    shm = weight_sync.default_sync_dir(name)
    out = os.path.join(shm, "v1")
    t0 = time.perf_counter()
    weight_sync.export_hf(model, out)                  # the first one compiles the on-device cast
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    rep = weight_sync.export_hf(model, out)
    export_s = time.perf_counter() - t0
    reload_s = reload(out, "bfloat16")
    shutil.rmtree(out, ignore_errors=True)
    res = {"params": params, "export_dir": shm, "bf16_export_s": export_s, "bf16_export_first_s": first_s,
           "bf16_export_bytes": rep.bytes, "reload_s": reload_s}
    targets = [("", os.path.join(shm, "fp32"))] + ([("_disk", os.path.join(disk_dir, "fp32"))] if disk_dir else [])
    for tag, old in targets:
        t0 = time.perf_counter()
        qwen3_5.save_hf(model, old)
        res[f"fp32_save_hf{tag}_s"] = time.perf_counter() - t0
        res[f"fp32_bytes{tag}"] = dir_bytes(old)
        res[f"fp32_reload{tag}_s"] = reload(old, "float32")
        shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(shm, ignore_errors=True)
    return res


# ---------------------------------------------------------------------------------------------
# the accelerator probe's engine section
# ---------------------------------------------------------------------------------------------
def probe(smoke: bool) -> dict:
    """Engine tokens/s of a depth-truncated Qwen3.5-9B (one layer cycle, full width) in bf16 on
    one device, decode-only and with prefills arriving mid-decode; and the weight sync of a
    4B-sized policy: the bf16 export (``weight_sync.export_hf``, memory-backed dir) and the
    reload a server does, against the fp32 ``save_hf`` export it replaces. ``smoke``: tiny."""
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams
    if smoke:
        # one prefill bucket: each bucket is its own compiled mixed step (~9 s on a 2-core CPU)
        cfg, B, P, N, buckets, steps = qwen3_5.presets.get("tiny"), 4, 24, 8, (32,), 4
        cfg4 = qwen3_5.presets.get("tiny")
    else:
        cfg = qwen3_5.presets.get("9b", num_hidden_layers=4, layer_types=())
        B, P, N, buckets, steps = 64, 512, 256, (256, 1024), 16
        cfg4 = qwen3_5.presets.get("9b", hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
                                   layer_types=(), tie_word_embeddings=True, scan_layers=True)
    dtype = jnp.float32 if smoke else jnp.bfloat16
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=dtype)
    eng = JaxEngine(model, max_slots=B, max_len=P + N + 64, prefill_buckets=buckets, decode_steps=steps,
                    cache_dtype=dtype)
    rng = np.random.default_rng(0)
    prompts = rng.integers(3, cfg.vocab_size, (B, P)).tolist()
    g = SamplingParams(max_new_tokens=N, temperature=1.0, seed=0, ignore_eos=True)
    warm = SamplingParams(max_new_tokens=2 * steps, temperature=1.0, seed=0, ignore_eos=True)
    eng.generate_batch(prompts, warm)                  # compile the programs the timed runs use
    eng.flush_cache()
    eng.generate_batch(prompts[:max(1, B // 8)], warm)
    eng.flush_cache()
    t0 = time.perf_counter()
    outs = eng.generate_batch(prompts, g)
    total_s = time.perf_counter() - t0
    eng.flush_cache()
    t0 = time.perf_counter()
    eng.generate_batch(prompts, SamplingParams(max_new_tokens=1, temperature=1.0, seed=0, ignore_eos=True))
    prefill_s = time.perf_counter() - t0
    n = sum(len(o.token_ids) for o in outs)
    # prefills arriving mid-decode: B/8 new prompts once the batch is a quarter done
    eng.flush_cache()
    futs = [eng.submit(GenerateRequest(p, g, f"m{i}")) for i, p in enumerate(prompts)]
    while eng.stats["tokens_generated"] < n * 1.25 + B:
        time.sleep(0.001)
    t0 = time.perf_counter()
    late = [eng.submit(GenerateRequest(p, g, f"late{i}")) for i, p in enumerate(prompts[:max(1, B // 8)])]
    m = sum(len(f.result().token_ids) for f in futs + late)
    mixed_s = time.perf_counter() - t0
    engine = {"model": "tiny" if smoke else "qwen3.5-9b x 1 cycle", "dtype": str(jnp.dtype(dtype)),
              "batch": B, "prompt_len": P, "new_tokens": N, "tok_s": n / total_s,
              "decode_tok_s": (n - B) / max(total_s - prefill_s, 1e-9), "prefill_s": prefill_s,
              "mixed_window_s": mixed_s, "mixed_tokens": m, "kv": eng.kv_memory(), "stats": dict(eng.stats)}
    eng.close()
    del model, eng
    # weight sync of a 4B-sized policy: the bf16 export and a server's reload vs the fp32 save_hf
    m4 = qwen3_5.Qwen3_5ForCausalLM(cfg4, rngs=nnx.Rngs(1), dtype=dtype, param_dtype=jnp.float32)
    sync = weight_sync_compare(m4, "probe")
    return {"engine": engine, "weight_sync": sync}


if __name__ == "__main__":
    app.run(main)
