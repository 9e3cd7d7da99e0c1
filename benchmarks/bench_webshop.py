"""WebShop: search-index build time and memory, search latency, and oracle / random-agent
episodes at catalog sizes 1k, 100k and 1M products.

    python benchmarks/bench_webshop.py                            # 1k, 100k, 1M
    python benchmarks/bench_webshop.py --sizes=1000,100000 --episodes=200
    python benchmarks/bench_webshop.py --index_dir=/tmp/ws_idx   # build + save; rerun: mmap load

Each size runs in its own child process (so its peak RSS is its own) and prints one JSON
object; a markdown table follows. Per size:

* build: generating the products + analysing them (``analyze_s``), then ``bm25s`` indexing
  (``bm25s_index_s``); the child's peak RSS above its RSS after imports (``build_rss_mb``:
  what building costs at its peak), and the index's resident bytes;
* search: latency of ``--queries`` goal instructions (long, ~20 terms) and product-type queries
  (short), p50/p95 of a second pass (``cold_p50`` of the first: a memory-mapped index faults
  its pages in on first use); compared in the same run with the time to stream the posting lists the
  query touches at this machine's measured copy bandwidth (``posting_bound_ms``: the floor for
  any scorer that reads them);
* episodes: the oracle (text protocol) and the random agent on ``--episodes`` generated goals:
  episodes/s, ms/step, success rate, mean reward, and how often the instruction alone brought
  the target into the 50 results (``oracle_instruction_hit``).

The machine is shared (2 cores, several engineers): the load average is reported at the start
and end of each child; compare numbers within one run.
"""
from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["1000", "100000", "1000000"], "catalog sizes (products)")
flags.DEFINE_integer("queries", 200, "search queries timed per size")
flags.DEFINE_integer("episodes", 200, "oracle and random-agent episodes per size")
flags.DEFINE_integer("one", 0, "internal: run one size in this process")
flags.DEFINE_integer("seed", 0, "catalog seed")
flags.DEFINE_string("index_dir", "", "save each size's index here after building it; a later "
                    "run memory-maps it instead of building (build_s then is the load time)")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _copy_bandwidth_gbs() -> float:
    import numpy as np
    a = np.ones(32 * 2 ** 20, dtype=np.float32)     # 128 MiB
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9                 # read + write


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_one(n: int) -> dict:
    import numpy as np
    from harness_jax.envs import webshop
    from harness_jax.envs.webshop import agents
    load0 = os.getloadavg()[0]
    out = {"n_products": n, "load_avg_start": round(load0, 2)}
    t0 = time.perf_counter()
    import bm25s  # noqa: F401  (imported before timing: it pulls in jax/scipy, ~3 s, ~400 MiB)
    out["import_bm25s_s"] = time.perf_counter() - t0
    world = webshop.get_world(webshop.generated_spec(n, FLAGS.seed),
                              index_dir=FLAGS.index_dir or None)
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    idx = world.index
    out.update(build_s=time.perf_counter() - t0, loaded_from=world.build_stats.get("loaded_from"),
               analyze_s=idx.stats["analyze_s"],
               bm25s_index_s=idx.stats["bm25s_index_s"], n_terms=idx.stats["n_terms"],
               nnz=idx.stats["nnz"], index_mb=idx.nbytes / 2 ** 20,
               peak_rss_mb=_rss_mb(), rss_before_build_mb=rss0,
               build_rss_mb=_rss_mb() - rss0)
    out["products_per_s_build"] = n / out["build_s"]
    # search latency
    bw = _copy_bandwidth_gbs()
    out["copy_bandwidth_gbs"] = bw
    rng = random.Random(1)
    tasks = webshop.generate_tasks(max(FLAGS.queries, FLAGS.episodes), split="train",
                                   n_products=n, catalog_seed=FLAGS.seed)
    indptr = idx.retriever.scores["indptr"]
    for kind in ("instruction", "type_query"):
        queries = [t.data["goal"]["instruction_text"] if kind == "instruction"
                   else t.data["goal"]["query"] for t in tasks[:FLAGS.queries]]
        cold = []
        for q in queries:                      # first pass: pages of a loaded index fault in
            t1 = time.perf_counter()
            idx.search(q)
            cold.append(time.perf_counter() - t1)
        out[f"search_{kind}_cold_p50_ms"] = 1e3 * _pct(cold, 0.5)
        lat, bound = [], []
        for q in queries:
            ids = idx.query_ids(q)
            t1 = time.perf_counter()
            idx.search(q)
            lat.append(time.perf_counter() - t1)
            touched = sum(int(indptr[i + 1] - indptr[i]) for i in ids) * 8   # float32 + int32
            bound.append(touched / (bw * 1e9) + n * 4 / (bw * 1e9))          # + the score array
        out[f"search_{kind}_p50_ms"] = 1e3 * _pct(lat, 0.5)
        out[f"search_{kind}_p95_ms"] = 1e3 * _pct(lat, 0.95)
        out[f"search_{kind}_posting_bound_ms"] = 1e3 * _pct(bound, 0.5)
    # episodes
    env = webshop.WebShopEnv(protocol="text")
    for name in ("oracle", "random"):
        evs, steps, hits = [], 0, 0
        t1 = time.perf_counter()
        for t in tasks[:FLAGS.episodes]:
            pol = (agents.OracleAgent(world, t.data["goal"]) if name == "oracle"
                   else agents.RandomAgent(t.data["goal"], rng))
            ev = agents.run_policy(env, t, pol)
            evs.append(ev)
            steps += ev["rounds"]
            if name == "oracle":
                hits += not pol.used_title_search
        dt = time.perf_counter() - t1
        s = webshop.summarize(evs)
        out.update({f"{name}_episodes_per_s": len(evs) / dt, f"{name}_ms_per_step": 1e3 * dt / steps,
                    f"{name}_success": s["success_rate"], f"{name}_mean_reward": s["score"] / 100})
        if name == "oracle":
            out["oracle_instruction_hit"] = hits / len(evs)
    out["load_avg_end"] = round(os.getloadavg()[0], 2)
    out["peak_rss_mb"] = _rss_mb()
    del np
    return out


def _table(rows) -> str:
    cols = [("products", "n_products", "{:,}"), ("build s", "build_s", "{:.1f}"),
            ("analyze s", "analyze_s", "{:.1f}"), ("bm25s s", "bm25s_index_s", "{:.1f}"),
            ("index MiB", "index_mb", "{:.0f}"),
            ("build peak RSS MiB (after imports)", "build_rss_mb", "{:.0f}"),
            ("search long p50/p95 ms", None, None), ("search short p50/p95 ms", None, None),
            ("oracle eps/s", "oracle_episodes_per_s", "{:.0f}"),
            ("oracle success", "oracle_success", "{:.3f}"),
            ("instr. hit@50", "oracle_instruction_hit", "{:.2f}"),
            ("random reward", "random_mean_reward", "{:.3f}"), ("load", "load_avg_start", "{}")]
    head = "| " + " | ".join(c[0] for c in cols) + " |"
    lines = [head, "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for label, key, fmt in cols:
            if key is None:
                k = "instruction" if "long" in label else "type_query"
                cells.append(f"{r[f'search_{k}_p50_ms']:.1f} / {r[f'search_{k}_p95_ms']:.1f}")
            else:
                cells.append(fmt.format(r[key]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.one:
        print(json.dumps(run_one(FLAGS.one)), flush=True)
        return
    rows = []
    for n in [int(s) for s in FLAGS.sizes]:
        cmd = [sys.executable, os.path.abspath(__file__), f"--one={n}",
               f"--queries={FLAGS.queries}", f"--episodes={FLAGS.episodes}", f"--seed={FLAGS.seed}",
               f"--index_dir={FLAGS.index_dir}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(json.dumps({"n_products": n, "error": proc.stderr[-2000:]}), flush=True)
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if rows:
        print(_table(rows))


if __name__ == "__main__":
    app.run(main)
