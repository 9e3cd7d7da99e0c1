"""A serving workload run against one engine build, one engine variant per process.

``python benchmarks/engine_workload.py '<json spec>'`` prints one JSON line. The spec names an HF
checkpoint, the engine's keyword arguments and the workload; it only uses the engine API every
build of ``JaxEngine`` has had (``submit`` with ``on_chunk``, ``stats``, ``close``), so
``bench_engine.py --workload`` runs the same file with today's engine (an older tree first on
``PYTHONPATH``) and with this one, in the same run.

The workload: ``initial`` requests of mixed prompt lengths start together; once they have
generated ``arrive_after`` tokens in total, ``arrivals`` long prompts arrive (prefills mid-decode).
Every request generates ``new_tokens`` greedy tokens. Measured: tokens/s over the whole run and
over its decode tail (after the last request's first token, only decode steps remain),
time to first token (TTFT) of the arrivals and of the initial requests, the longest gap between
two chunks of any initial request while the arrivals prefill (the decode stall), the KV cache
bytes held, and, for a paged cache, the bytes of the pages in use at the peak. Then, on the same
engine, decode tokens/s with every slot busy (short prompts, prefill time subtracted).
"""
from __future__ import annotations

import json
import sys
import threading
import time


def _kv_bytes(engine) -> dict:
    if hasattr(engine, "kv_memory"):
        m = engine.kv_memory()
        return {"kv_held_bytes": m["held_bytes"], "kv_peak_used_bytes": m.get("peak_used_bytes", m["held_bytes"])}
    c = engine._cache          # today's engine: contiguous cache arrays, all of them held
    held = int(c.k_LBSKH.nbytes + c.v_LBSKH.nbytes)
    return {"kv_held_bytes": held, "kv_peak_used_bytes": held}


def run(spec: dict) -> dict:
    import numpy as np

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import GenerateRequest, JaxEngine, SamplingParams

    model = qwen3_5.load_hf(spec["checkpoint"], dtype=spec.get("dtype", "float32"))
    rng = np.random.default_rng(spec.get("seed", 0))
    V = model.config.vocab_size
    lo, hi = spec["prompt_len_range"]
    initial = [rng.integers(3, V, int(n)).tolist() for n in rng.integers(lo, hi + 1, spec["initial"])]
    arrivals = [rng.integers(3, V, spec["arrival_len"]).tolist() for _ in range(spec["arrivals"])]
    g = SamplingParams(max_new_tokens=spec["new_tokens"], temperature=0.0, ignore_eos=True)
    eng = JaxEngine(model, **spec["engine"])
    warm = [rng.integers(3, V, n).tolist() for n in (hi, spec["arrival_len"], lo)]
    eng.generate_batch(warm * 2, g)                       # compile the programs this workload uses
    eng.flush_cache()

    t_sub, t_first, chunks, sizes = {}, {}, {}, {}
    lock = threading.Lock()

    def on_chunk(rid):
        def cb(c):
            now = time.perf_counter()
            with lock:
                if c.token_ids and rid not in t_first:
                    t_first[rid] = now
                if c.token_ids:
                    chunks.setdefault(rid, []).append(now)
                    sizes.setdefault(rid, []).append(len(c.token_ids))
        return cb

    def submit(prefix, prompts):
        futs = []
        for i, p in enumerate(prompts):
            rid = f"{prefix}{i}"
            t_sub[rid] = time.perf_counter()
            futs.append(eng.submit(GenerateRequest(p, g, rid), on_chunk=on_chunk(rid)))
        return futs

    gen0 = eng.stats["tokens_generated"]
    t0 = time.perf_counter()
    futs = submit("i", initial)
    while eng.stats["tokens_generated"] - gen0 < spec["arrive_after"]:
        time.sleep(0.002)
    t_arrive = time.perf_counter()
    futs += submit("a", arrivals)
    outs = [f.result() for f in futs]
    wall = time.perf_counter() - t0
    n = sum(len(o.token_ids) for o in outs)
    ttft_a = sorted(t_first[f"a{i}"] - t_sub[f"a{i}"] for i in range(len(arrivals)))
    ttft_i = sorted(t_first[f"i{i}"] - t_sub[f"i{i}"] for i in range(len(initial)))
    last_arrival_first = max(t_first[f"a{i}"] for i in range(len(arrivals)))
    stall = 0.0
    for i in range(len(initial)):
        ts = [t for t in chunks[f"i{i}"] if t_arrive <= t <= last_arrival_first + 1e-9]
        prev = max([t for t in chunks[f"i{i}"] if t < t_arrive], default=None)
        seq = ([prev] if prev is not None else []) + ts
        stall = max([stall] + [b - a for a, b in zip(seq, seq[1:])])
    # the decode tail: once every request has its first token, only decode steps remain
    t_all = max(t_first.values())
    tail = [(t, k) for rid in chunks for t, k in zip(chunks[rid], sizes[rid]) if t > t_all]
    tail_s = max((t for t, _ in tail), default=t_all) - t_all
    out = {"name": spec["name"], "tokens": n, "wall_s": wall, "tok_s": n / wall,
           "decode_tail_tok_s": sum(k for _, k in tail) / tail_s if tail_s > 0 else float("nan"),
           "decode_tail_s": tail_s,
           "ttft_arrivals_p50_s": ttft_a[len(ttft_a) // 2], "ttft_arrivals_max_s": ttft_a[-1],
           "ttft_initial_p50_s": ttft_i[len(ttft_i) // 2], "ttft_initial_max_s": ttft_i[-1],
           "decode_stall_max_s": stall, "stats": dict(eng.stats),
           "first_tokens": [o.token_ids[:4] for o in outs[:3]], **_kv_bytes(eng)}
    out.update(_decode_batch(eng, spec, rng, V, lo))
    eng.close()
    return out


def _decode_batch(eng, spec: dict, rng, V: int, prompt_len: int) -> dict:
    """Decode tokens/s with every slot busy: ``max_slots`` ``prompt_len``-token prompts generate
    ``new_tokens`` each; the time of a prefill-only run (one token) is subtracted."""
    from harness_jax.sampling import SamplingParams
    B, N = spec["engine"]["max_slots"], spec["new_tokens"]
    prompts = [rng.integers(3, V, prompt_len).tolist() for _ in range(B)]
    one = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    full = SamplingParams(max_new_tokens=N, temperature=0.0, ignore_eos=True)
    eng.flush_cache()
    eng.generate_batch(prompts, full)                  # warm (the full batch may compile programs)
    eng.flush_cache()
    t0 = time.perf_counter()
    eng.generate_batch(prompts, full)
    total = time.perf_counter() - t0
    eng.flush_cache()
    t0 = time.perf_counter()
    eng.generate_batch(prompts, one)
    pre = time.perf_counter() - t0
    return {"decode_batch": B, "decode_tok_s": B * (N - 1) / max(total - pre, 1e-9), "decode_run_s": total}


if __name__ == "__main__":
    # harness_jax comes from PYTHONPATH (the caller puts the engine build under test first)
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
