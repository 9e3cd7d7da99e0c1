"""Command line: generate instances, grade a SWE-bench predictions file offline.

    python -m harness_jax.envs.swe.cli generate --n 20 --seed 0 --split train --out inst.jsonl
    python -m harness_jax.envs.swe.cli grade --instances inst.jsonl --predictions preds.jsonl \
        --report report.json

``grade`` reads predictions in SWE-bench's format (``instance_id``, ``model_patch``,
``model_name_or_path``; ``.jsonl`` or ``.json``) and writes a SWE-bench-style report
(``resolved_ids``, ``unresolved_ids``, ``empty_patch_ids``, ``error_ids``, ``missing_ids``,
``resolve_rate``). Instances of the sealed test split are generated only with
``--unseal "<purpose>"``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys

from harness_jax.envs import registry, swe


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness_jax.envs.swe.cli",
                                description="SWE-Gym-style instances offline")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate instances (SWE-bench schema, jsonl)")
    g.add_argument("--n", type=int, required=True)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--split", default="train", help="train, search, selection or test")
    g.add_argument("--out", required=True)
    g.add_argument("--unseal", default=None, help="purpose, required for --split test")
    r = sub.add_parser("grade", help="grade a predictions file")
    r.add_argument("--instances", required=True, help=".jsonl/.json of instances")
    r.add_argument("--predictions", required=True, help="SWE-bench predictions .jsonl/.json")
    r.add_argument("--report", default=None, help="where to write the JSON report")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "generate":
        ctx = (registry.sealed_test_access(args.unseal) if args.unseal
               else contextlib.nullcontext())
        with ctx:
            insts = swe.generate_instances(args.n, seed=args.seed, split=args.split,
                                           progress=True)
        swe.save_instances(insts, args.out)
        print(f"wrote {len(insts)} instances to {args.out}")
        return 0
    instances = swe.load_instances(args.instances)
    preds = swe.load_predictions(args.predictions)
    report = swe.grade_predictions(instances, preds, progress=True)
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(f"resolved {report['resolved_instances']}/{report['total_instances']} "
          f"({100 * report['resolve_rate']:.1f}%); empty patches "
          f"{len(report['empty_patch_ids'])}, patch errors {len(report['error_ids'])}, "
          f"missing {len(report['missing_ids'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
