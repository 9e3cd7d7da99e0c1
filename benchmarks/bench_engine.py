"""Embedded JaxEngine vs transformers generate() (torch CPU), continuation speed-up, export/reload.

  python -m benchmarks.bench_engine --preset medium_80m --batches 1,8,32 --new_tokens 64

Reports (JSON lines + a summary table):
  * end-to-end generated tokens/s (prefill of a --prompt_len prompt + --new_tokens greedy tokens,
    after a warm-up run that compiles) of the engine and of ``generate()`` at each batch size;
  * a --turns-turn episode (each turn appends --obs_tokens and generates --turn_tokens) with
    continuation (cached state reused) vs re-prefilling the whole history every turn;
  * ``save_hf`` export, ``load_hf`` reload and in-place ``update_weights`` times, and the SGLang
    sync protocol (pause/flush/update/continue/verify) against the local EngineServer.
"""
from __future__ import annotations

import asyncio
import json
import os
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


def _emit(rec):
    print(json.dumps(rec), flush=True)
    return rec


def main(argv):
    del argv
    import jax
    import numpy as np
    from flax import nnx

    from harness_jax.models import qwen3_5
    from harness_jax.sampling import JaxEngine, SamplingParams
    from harness_jax.sampling.types import GenerateRequest

    cfg = qwen3_5.presets.get(FLAGS.preset)
    batches = [int(b) for b in FLAGS.batches.split(",")]
    model = qwen3_5.Qwen3_5ForCausalLM(cfg, rngs=nnx.Rngs(0))
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
    _emit({"preset": FLAGS.preset, "params": n_params, "devices": str(jax.devices()[0].platform),
           "cpu_count": os.cpu_count()})
    tmp = tempfile.mkdtemp(prefix="bench_engine_")
    ckpt = os.path.join(tmp, "ckpt")
    t0 = time.perf_counter()
    qwen3_5.save_hf(model, ckpt)
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    reloaded = qwen3_5.load_hf(ckpt, dtype="float32")
    reload_s = time.perf_counter() - t0
    results = {"export_s": export_s, "reload_s": reload_s}

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
    for B in batches:
        prompts = rng.integers(3, cfg.vocab_size, size=(B, FLAGS.prompt_len)).tolist()
        eng = JaxEngine(model, max_slots=B, max_len=max_len, prefill_buckets=(FLAGS.prompt_len,),
                        decode_steps=FLAGS.decode_steps)
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
            other = JaxEngine(model, max_slots=B, max_len=max_len, prefill_buckets=(FLAGS.prompt_len,),
                              decode_steps=FLAGS.decode_steps, weight_layout=FLAGS.compare_layout)
            other.generate_batch(prompts, greedy)
            other.flush_cache()
            t0 = time.perf_counter()
            assert [o.token_ids for o in other.generate_batch(prompts, greedy)] == [o.token_ids for o in outs]
            rec[f"engine_{FLAGS.compare_layout}_tok_s"] = n / (time.perf_counter() - t0)
            other.close()
        if hf is not None:
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
            rec.update({"hf_tok_s": hn / hdt, "hf_s": hdt, "speedup": (n / dt) / (hn / hdt),
                        "hf_decode_tok_s": (hn - B) / max(hdt - hpre, 1e-9)})
            rec["decode_speedup"] = rec["engine_decode_tok_s"] / rec["hf_decode_tok_s"]
        results[f"batch{B}"] = _emit(rec)

    # ---- continuation: one episode, several turns
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

    # ---- in-place update and the SGLang sync protocol over local HTTP
    t0 = time.perf_counter()
    eng.update_weights(reloaded)            # the first one compiles the layout conversion
    update_first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    eng.update_weights(reloaded)
    update_s = time.perf_counter() - t0
    from harness_jax.sampling import SGLangClient
    from harness_jax.sampling.server import EngineServer
    srv = EngineServer(eng, model_path=ckpt)
    url = srv.start()
    client = SGLangClient(url, flush_interval_s=0.05)
    rep = asyncio.run(client.sync_model(reloaded, os.path.join(tmp, "export2"), weight_version=1))
    srv.shutdown()
    eng.close()
    client.close()
    results["weights"] = _emit({"export_s": export_s, "reload_s": reload_s, "update_in_place_s": update_s,
                                "update_in_place_first_s": update_first_s, "weight_layout": eng.weight_layout,
                                "http_sync_total_s": rep.total_s, "http_sync_export_s": rep.export_s,
                                "http_sync_phases": rep.per_server[url]})
    nan = float("nan")
    cmp = f"engine_{FLAGS.compare_layout}_tok_s"
    print(f"\n| batch | engine tok/s ({results[f'batch{batches[0]}']['weight_layout']}) | "
          f"engine tok/s ({FLAGS.compare_layout or '-'}) | generate() tok/s | speed-up | engine decode tok/s | "
          "generate() decode tok/s | decode speed-up |\n|---|---|---|---|---|---|---|---|")
    for B in batches:
        r = results[f"batch{B}"]
        print(f"| {B} | {r['engine_tok_s']:.0f} | {r.get(cmp, nan):.0f} | {r.get('hf_tok_s', nan):.0f} | "
              f"{r.get('speedup', nan):.1f}x | {r['engine_decode_tok_s']:.0f} | {r.get('hf_decode_tok_s', nan):.0f} | "
              f"{r.get('decode_speedup', nan):.1f}x |")
    c = results["continuation"]
    print(f"\ncontinuation ({T} turns): {c['continuation_s']:.2f}s vs re-prefill {c['reprefill_s']:.2f}s "
          f"-> {c['speedup']:.2f}x; export {export_s:.2f}s, reload {reload_s:.2f}s, "
          f"HTTP sync {rep.total_s:.2f}s")


if __name__ == "__main__":
    app.run(main)
