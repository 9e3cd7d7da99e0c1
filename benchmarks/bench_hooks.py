"""Hook isolation overhead: warm per-call latency of the sandboxed worker (goal: < 1 ms median).

    python benchmarks/bench_hooks.py [--calls 2000] [--json out.json]

Measures, for a trivial hook and a realistic one (regex + notebook update + a 2 KB context):
the raw worker round trip (``HookSandbox.call``), ``run_hook`` (memoised lint + call + contract),
and an in-process ``exec`` baseline (no isolation) for comparison; plus the worker's cold start
and the cost of a timeout (kill + restart on the next call).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from harness_jax.harness.hooks import run_hook
from harness_jax.harness.sandbox import HookSandbox, SandboxConfig

TRIVIAL = "def hook(ctx, nb):\n    return {'message': 'ok'}\n"
REALISTIC = '''
def hook(ctx, nb):
    text = ctx.observation or ""
    nb["turns"] = nb.get("turns", 0) + 1
    if re.search("error|exception", text, re.I):
        return {"kind": "inject_hint", "message": "The last query failed; read the error."}
    if nb["turns"] > 5 and SequenceMatcher(None, text, nb.get("last", "")).ratio() > 0.9:
        return {"kind": "inject_hint", "message": "No progress; change strategy."}
    nb["last"] = text[:200]
    return None
'''


def _ctx():
    return {"turn": 3, "task": {"instruction": "How many users are older than 30? " * 4},
            "observation": "id | name | age\n" + "1 | alice | 31\n" * 100,
            "history": [{"turn": i, "action": "SELECT 1", "observation": "1"} for i in range(8)]}


def _stats(xs):
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))] * 1e3  # noqa: E731
    return {"median_ms": statistics.median(xs) * 1e3, "p90_ms": q(0.9), "p99_ms": q(0.99),
            "mean_ms": statistics.fmean(xs) * 1e3, "n": len(xs)}


def bench(calls: int) -> dict:
    out = {}
    t0 = time.perf_counter()
    box = HookSandbox(SandboxConfig(timeout_s=1.0))
    box.call(TRIVIAL, {}, {})
    out["cold_start_ms"] = (time.perf_counter() - t0) * 1e3
    out["isolation"] = box.isolation
    ctx = _ctx()
    for name, src in (("trivial", TRIVIAL), ("realistic", REALISTIC)):
        box.call(src, ctx, {})  # compile once
        nb: dict = {}
        ts = []
        for _ in range(calls):
            s = time.perf_counter()
            r = box.call(src, ctx, nb)
            ts.append(time.perf_counter() - s)
            assert r.ok, r.error
            nb = r.nb
        out[f"sandbox_call_{name}"] = _stats(ts)
        ts = []
        nb = {}
        for _ in range(calls):
            s = time.perf_counter()
            run_hook(src, ctx, nb, sandbox=box, hook="on_post_step")
            ts.append(time.perf_counter() - s)
        out[f"run_hook_{name}"] = _stats(ts)
        # in-process baseline (NO isolation; for comparison only)
        import difflib
        import re as re_mod
        ns = {"re": re_mod, "SequenceMatcher": difflib.SequenceMatcher}
        exec(compile(src, "<hook>", "exec"), ns)

        class A(dict):
            __getattr__ = dict.get

        def wrap(v):
            return A({k: wrap(x) for k, x in v.items()}) if isinstance(v, dict) else v
        ts = []
        for _ in range(calls):
            s = time.perf_counter()
            ns["hook"](wrap(json.loads(json.dumps(ctx))), {})
            ts.append(time.perf_counter() - s)
        out[f"in_process_{name}"] = _stats(ts)
    slow = "def hook(ctx, nb):\n    return {'x': sum(range(10 ** 12))}\n"
    s = time.perf_counter()
    r = box.call(slow, {}, {}, timeout_s=0.1)
    out["timeout_kill_ms"] = (time.perf_counter() - s) * 1e3
    assert r.timed_out
    s = time.perf_counter()
    box.call(TRIVIAL, {}, {})
    out["restart_after_kill_ms"] = (time.perf_counter() - s) * 1e3
    box.close()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default="")
    a = p.parse_args()
    res = bench(a.calls)
    for k, v in res.items():
        if isinstance(v, dict) and "median_ms" in v:
            print(f"{k:28s} median {v['median_ms']:.3f} ms  p90 {v['p90_ms']:.3f}  "
                  f"p99 {v['p99_ms']:.3f}  (n={v['n']})")
        else:
            print(f"{k:28s} {v}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
