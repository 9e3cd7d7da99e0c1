"""Harness-S vs GRPO-only demo report: a plot and a markdown table from the arms' run dirs.

    python experiments/probes/hs_demo_report.py --root=/tmp/hsdemo --out=docs/img/harness_s_cpu_demo.png

Reads ``<root>/{hs,grpo}-s<seed>/metrics.jsonl`` (written by ``launch/train.py``; the commands
are in ``experiments/configs/harness_s/dbbench_cpu.py``) and prints, per arm, mean ± half-range
over the seeds found: held-out H0 Avg@k at each evaluation, the zero-variance fraction of the
trained groups, rescue trigger and success rates, step time. A probe script, not library code.
"""
import argparse
import glob
import json
import os
import re

import numpy as np

ARMS = (("hs", "Harness-S (rescue)"), ("grpo", "GRPO only"))


def read(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def series(rows, key):
    """{step: value} of ``key`` (the last value written at a step)."""
    out = {}
    for r in rows:
        if key in r and r[key] is not None:
            out[int(r.get("step", 0))] = float(r[key])
    return out


def eval_key(rows):
    keys = sorted({k for r in rows for k in r if re.match(r"eval/avg@\d+$", k)},
                  key=lambda k: int(k.split("@")[1]))
    return keys[-1] if keys else "eval/success_rate"


def runs(root, arm):
    out = {}
    for d in sorted(glob.glob(os.path.join(root, f"{arm}-s*"))):
        m = os.path.join(d, "metrics.jsonl")
        if os.path.exists(m):
            out[int(d.rsplit("-s", 1)[1])] = read(m)
    return out


def spread(values):
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float((v.max() - v.min()) / 2) if len(v) > 1 else 0.0


def fmt(values):
    if not values:
        return "-"
    m, h = spread(values)
    return f"{m:.3f} ± {h:.3f}" if len(values) > 1 else f"{m:.3f}"


def train_mean(rows, key):
    """Mean over the GRPO steps (rows that carry ``key``)."""
    v = list(series(rows, key).values())
    return float(np.mean(v)) if v else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/hsdemo")
    ap.add_argument("--out", default="docs/img/harness_s_cpu_demo.png")
    ap.add_argument("--sft", default="", help="the warm start's workdir: its evaluations of the "
                    "unchanged policy are drawn as references (default <root>/sft)")
    args = ap.parse_args()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {arm: runs(args.root, arm) for arm, _ in ARMS}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"hs": "tab:red", "grpo": "tab:blue"}
    lines = ["| quantity | " + " | ".join(lab for _, lab in ARMS) + " |", "|---|---|---|"]
    table = {}
    for arm, lab in ARMS:
        seeds = data[arm]
        if not seeds:
            continue
        key = eval_key(next(iter(seeds.values())))
        per_step = {}
        for s, rows in seeds.items():
            ev = series(rows, key)
            xs = sorted(ev)
            axes[0].plot(xs, [ev[x] for x in xs], color=colors[arm], alpha=0.3, lw=1)
            for x in xs:
                per_step.setdefault(x, []).append(ev[x])
            zv = series(rows, "groups/zero_variance_fraction")
            xz = sorted(zv)
            axes[1].plot(xz, [zv[x] for x in xz], color=colors[arm], alpha=0.25, lw=1)
        xs = sorted(per_step)
        mean = [np.mean(per_step[x]) for x in xs]
        lo = [np.min(per_step[x]) for x in xs]
        hi = [np.max(per_step[x]) for x in xs]
        axes[0].plot(xs, mean, "-o", color=colors[arm], label=f"{lab} (mean of {len(seeds)} seeds)")
        axes[0].fill_between(xs, lo, hi, color=colors[arm], alpha=0.12)
        for x in xs:
            table.setdefault(f"held-out H0 {key.split('/')[1]} at step {x}", {})[arm] = per_step[x]
        for k, name in (("groups/zero_variance_fraction", "zero-variance fraction (trained groups), mean over steps"),
                        ("rescue/zero_variance_before", "zero-variance fraction before rescue, mean over steps"),
                        ("rescue/trigger_rate", "rescue trigger rate, mean over steps"),
                        ("rescue/success_rate", "rescue success rate, mean over steps"),
                        ("rescue/helper_attempt_success_rate", "helper attempt success rate, mean over steps"),
                        ("rescue/wall_fraction", "rescue wall time / step time, mean over steps"),
                        ("rollout/success_rate", "training-rollout success (all harnesses), mean over steps"),
                        ("time/step_s", "step time (s), mean over steps")):
            vals = [v for v in (train_mean(r, k) for r in seeds.values()) if v is not None]
            if vals:
                table.setdefault(name, {})[arm] = vals
        if arm == "hs":
            for k, lab2, st in (("rescue/trigger_rate", "rescue trigger rate", ":"),
                                ("rescue/success_rate", "rescue success rate", "-.")):
                per = {}
                for rows in seeds.values():
                    for x, v in series(rows, k).items():
                        per.setdefault(x, []).append(v)
                xr = sorted(per)
                if xr:
                    axes[1].plot(xr, [np.mean(per[x]) for x in xr], st, color="tab:orange" if "trigger" in k
                                 else "tab:green", label=f"Harness-S {lab2} (mean)")
        zvm = {}
        for rows in seeds.values():
            for x, v in series(rows, "groups/zero_variance_fraction").items():
                zvm.setdefault(x, []).append(v)
        xz = sorted(zvm)
        axes[1].plot(xz, [np.mean(zvm[x]) for x in xz], "-", color=colors[arm], lw=2,
                     label=f"{lab}: zero-variance fraction (mean)")
    # The unchanged warm-start policy: evaluation sampling seeds are keyed by the episode id (its
    # tag: start / periodic / final), so an arm's final evaluation is paired with the warm start's
    # "final" evaluation (same task, same attempt, same random numbers), not with step 0.
    notes = []
    sft = os.path.join(args.sft or os.path.join(args.root, "sft"), "summary.json")
    last = max((int(r.get("step", 0)) for rs in data.values() for rows in rs.values() for r in rows), default=0)
    if os.path.exists(sft):
        evs = {e["tag"]: e for e in json.load(open(sft)).get("eval", [])}
        k = "avg@" + str(max(int(x.split("@")[1]) for x in evs.get("final", {}) if x.startswith("avg@"))) \
            if "final" in evs else None
        if k and last:
            axes[0].plot([last], [evs["final"][k]], "kx", ms=9,
                         label="warm-start policy, no RL (same sampling stream as the final evaluation)")
            ref = evs["final"][k]
            for arm, _ in ARMS:
                g = [series(rows, "eval/" + k)[max(series(rows, "eval/" + k))] - ref
                     for rows in data[arm].values() if series(rows, "eval/" + k)]
                if g:
                    table.setdefault("held-out gain, last evaluation - warm start on the same sampling stream", {})[arm] = g
            notes.append(f"\nwarm-start policy without RL, {k}: after_sft {evs.get('after_sft', {}).get(k)} "
                         f"(tag after_sft), {evs['final'][k]} (tag final: the stream of every run's last evaluation)")
    for name, vals in table.items():
        if vals:
            lines.insert(len(lines), f"| {name} | " + " | ".join(fmt(vals.get(a, [])) for a, _ in ARMS) + " |")
    axes[0].set_xlabel("GRPO step")
    axes[0].set_ylabel("held-out H0 success (Avg@k, 64 tasks)")
    axes[0].set_title("Held-out success under H0 (band: min-max over seeds)")
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("GRPO step")
    axes[1].set_ylim(-0.02, 1.02)
    axes[1].set_title("Zero-variance fraction and rescue statistics")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print("\n".join(lines + notes))
    print(f"\nseeds: " + ", ".join(f"{a}={sorted(data[a])}" for a, _ in ARMS) + f"\nplot: {args.out}")


if __name__ == "__main__":
    main()
