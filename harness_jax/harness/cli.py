"""Small CLI over a trajectory store and harness specs.

    python -m harness_jax.harness.cli list    --store DIR [--run R] [--task T] [--harness H]
    python -m harness_jax.harness.cli show    --store DIR EPISODE_ID [--tokens]
    python -m harness_jax.harness.cli diff    --store DIR EPISODE_A EPISODE_B
    python -m harness_jax.harness.cli metrics --store DIR [--k 1 3] [--run R] [--harness H]
    python -m harness_jax.harness.cli spec-diff PARENT.json CHILD.json
    python -m harness_jax.harness.cli validate PATCH_FILE [--env dbbench]
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from harness_jax.harness.store import TrajectoryStore, episode_diff
from harness_jax.harness.specs import HarnessSpec, diff_specs
from harness_jax.harness.validation import validate_patch
from harness_jax.sampling.tokenizer import load_tokenizer


def _filters(a) -> dict:
    out = {}
    for key, attr in (("run_id", "run"), ("task_id", "task"), ("harness_id", "harness")):
        if getattr(a, attr, None):
            out[key] = getattr(a, attr)
    if getattr(a, "policy_version", None) is not None:
        out["policy_version"] = a.policy_version
    return out


def main(argv: Optional[Sequence[str]] = None, out=None) -> int:
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog="harness_jax.harness.cli", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def with_store(sp):
        sp.add_argument("--store", required=True, help="trajectory store directory")
        sp.add_argument("--run")
        sp.add_argument("--task")
        sp.add_argument("--harness")
        sp.add_argument("--policy-version", type=int, dest="policy_version")
        return sp

    with_store(sub.add_parser("list", help="list stored episodes"))
    sp = with_store(sub.add_parser("show", help="show one episode"))
    sp.add_argument("episode")
    sp.add_argument("--tokens", action="store_true", help="also print the decoded segments")
    sp = with_store(sub.add_parser("diff", help="compare two episodes turn by turn"))
    sp.add_argument("a")
    sp.add_argument("b")
    sp = with_store(sub.add_parser("metrics", help="success rate, pass@k, avg@k"))
    sp.add_argument("--k", type=int, nargs="+", default=[1, 3])
    sp = sub.add_parser("spec-diff", help="what a sibling harness changed")
    sp.add_argument("parent")
    sp.add_argument("child")
    sp = sub.add_parser("validate", help="validate an overlay patch (JSON or model text)")
    sp.add_argument("patch_file")
    sp.add_argument("--env", default="dbbench")
    a = p.parse_args(argv)

    if a.cmd == "spec-diff":
        pa, ch = HarnessSpec.load(a.parent), HarnessSpec.load(a.child)
        print(f"{pa.name} ({pa.harness_id}) -> {ch.name} ({ch.harness_id})", file=out)
        for line in diff_specs(pa, ch) or ["(no differences)"]:
            print(line, file=out)
        return 0
    if a.cmd == "validate":
        with open(a.patch_file, encoding="utf-8") as f:
            res = validate_patch(f.read(), env_name=a.env)
        print(json.dumps({"ok": res.ok, "errors": res.errors,
                          "patch_id": res.patch.patch_id if res.patch else None}, indent=2),
              file=out)
        return 0 if res.ok else 1

    store = TrajectoryStore(a.store)
    if a.cmd == "list":
        for r in store.index(**_filters(a)):
            print(f"{r['episode_id']}\t{r['task_id']}\t{r['harness_id']}\tv{r['policy_version']}"
                  f"\tsuccess={r['success']}\treward={r['reward']:.3f}\t{r['status']}"
                  f"\tturns={r.get('num_turns')}", file=out)
        return 0
    if a.cmd == "show":
        t = store.get(a.episode)
        print(f"episode {t.episode_id} task={t.task_id} harness={t.harness_id} "
              f"overlay={t.overlay_id or '-'} policy_version={t.policy_version}", file=out)
        print(f"status={t.status} success={t.success} reward={t.reward} "
              f"infra_error={t.infra_error} segments={len(t.segments)} "
              f"sampled_tokens={t.num_sampled_tokens}", file=out)
        for e in t.errors:
            print(f"error: {e}", file=out)
        for ev in t.turns:
            print(f"--- turn {ev.index} (segment {ev.segment}, {ev.n_sampled} tokens, "
                  f"{ev.finish_reason})", file=out)
            print(f"policy: {ev.raw_text}", file=out)
            if ev.parse_errors:
                print(f"parse errors: {ev.parse_errors}", file=out)
            print(f"action: {json.dumps(ev.action, ensure_ascii=False)}", file=out)
            for iv in ev.interventions:
                print(f"hook {iv['hook']} [{iv['source']}]: "
                      f"{json.dumps(iv['result'], ensure_ascii=False)}", file=out)
            print(f"observation: {ev.observation}", file=out)
        if a.tokens:
            tok = load_tokenizer()
            for i, s in enumerate(t.segments):
                print(f"=== segment {i} ({len(s.token_ids)} tokens)", file=out)
                print(tok.decode(s.token_ids), file=out)
        return 0
    if a.cmd == "diff":
        for line in episode_diff(store.get(a.a), store.get(a.b)):
            print(line, file=out)
        return 0
    if a.cmd == "metrics":
        print(json.dumps(store.metrics(ks=a.k, **_filters(a)), indent=2), file=out)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
