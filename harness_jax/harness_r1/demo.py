"""The Harness-R1 demonstration over seeds: one figure, one JSON and one markdown table from the
workdirs of several ``launch/engineer.py`` runs (and their ``launch/evaluate_engineer.py``
tables), so the numbers in docs/harness_r1.md come out of the runs' own files.

    python -m harness_jax.harness_r1.demo --workdirs=/tmp/r1/s0,/tmp/r1/s1,/tmp/r1/s2 \
        --out=docs/img/harness_r1_cpu

Per run it reads ``engineer_summary.json`` (the held-out evaluations of the training run:
``before_sft`` = the untrained engineer, ``after_sft``, ``final`` = after GRPO; each with
``eval.k`` samples per packet at ``eval.temperature`` and the greedy patch; the rule-based
reference), ``metrics.jsonl`` (per GRPO step: mean Delta_B of the K samples, valid fraction,
reward-cache hits) and, when present, ``table_held_out.json`` (one patch per packet per arm,
paired reruns). Arms are summarised as the mean and the sample std over the runs.

Writes ``<out>.png`` (left: training Delta_B and valid fraction per GRPO step, each run and
their mean; right: held-out mean Delta_B per arm, bars = mean over runs, dots = runs), ``<out>.json``
and ``<out>.md``.

``--criteria`` also evaluates the pre-registered criteria of
``experiments/configs/harness_r1/tiny_cpu_policy.py`` (``criteria``): per run, C1 the share of
sampled held-out patches with Delta_B > 0 rises from after SFT to after GRPO, C2 the sampled
held-out Delta_B rises on at least ``most`` of the packets, C3 the valid fraction after GRPO is at
least 0.8; over the runs, C4 the paired bootstrap interval of (after GRPO - after SFT) over the
held-out tasks (per task: R^P - R^0 averaged over its packet's samples, then over the runs) lies
above 0 (``scoring.paired_bootstrap``). Verdict: C1-C3 on at least 2 of 3 runs and C4.
Infrastructure-incomplete samples are counted per run and stage.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Optional, Sequence

import numpy as np

from harness_jax.harness_r1.pipeline import read_metrics
from harness_jax.scoring import paired_bootstrap

EVAL_TAGS = (("before_sft", "untrained"), ("after_sft", "sft"), ("final", "grpo"))
TABLE_ARMS = ("default", "react", "self_refine", "review_hint", "rule", "sft", "grpo")


def _load(path: str) -> Optional[dict]:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def run_figures(workdir: str) -> dict:
    """One run's figures (module docstring)."""
    summ = _load(os.path.join(workdir, "engineer_summary.json"))
    if summ is None:
        raise FileNotFoundError(f"{workdir}: no engineer_summary.json; run launch/engineer.py to the end first")
    ev = summ.get("eval") or {}
    sampled, greedy = {}, {}
    for tag, arm in EVAL_TAGS:
        e = ev.get(tag)
        if not e or e.get("delta_b") is None:
            continue
        sampled[arm] = {k: e.get(k) for k in ("delta_b", "valid_frac", "improved_frac", "noop_frac",
                                              "best_of_k_delta_b", "k", "temperature")}
        if e.get("greedy"):
            greedy[arm] = {k: e["greedy"].get(k) for k in ("delta_b", "valid_frac", "improved_frac")}
    ref = summ.get("reference_rule") or {}
    if ref.get("delta_b") is not None:
        greedy["rule"] = {k: ref.get(k) for k in ("delta_b", "valid_frac", "improved_frac")}
    table = _load(os.path.join(workdir, "table_held_out.json"))
    rows = {r["arm"]: {"delta_b": r["delta"], "valid_frac": r["valid_frac"],
                       "improved_frac": r.get("improved_frac"), "success_before": r["success_before"],
                       "success_after": r["success_after"], "batches": r["batches"]}
            for r in (table or {}).get("rows", [])}
    rows_m = read_metrics(workdir)
    steps = [r for r in rows_m if "r1/delta_b_mean" in r]
    return {"workdir": os.path.abspath(workdir), "wall_s": summ.get("wall_s"),
            "stage_wall_s": summ.get("stage_wall_s"), "sampled": sampled, "greedy": greedy,
            "table": rows, "reward_cache": (summ.get("grpo") or {}).get("reward_cache"),
            "sft_nll_last": (summ.get("sft") or {}).get("nll_last"),
            "grpo_steps": [{"step": r["step"], "delta_b": r["r1/delta_b_mean"], "valid_frac": r["r1/valid_frac"],
                            "cache_hit_frac": r.get("r1/cache_hit_frac")} for r in steps]}


def _stats(xs: Sequence[float]) -> dict:
    xs = [float(x) for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not xs:
        return {"mean": float("nan"), "std": float("nan"), "n": 0, "runs": []}
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return {"mean": m, "std": sd, "n": len(xs), "runs": xs}


def aggregate(runs: Sequence[dict]) -> dict:
    """Mean and std over runs of every arm's held-out figures and of the reward cache."""
    out: dict = {"runs": len(runs), "sampled": {}, "greedy": {}, "table": {}}
    for section in ("sampled", "greedy", "table"):
        arms = [a for a in ("untrained",) + TABLE_ARMS if any(a in r[section] for r in runs)]
        for arm in arms:
            keys = sorted({k for r in runs for k in (r[section].get(arm) or {})
                           if isinstance((r[section].get(arm) or {}).get(k), (int, float))})
            out[section][arm] = {k: _stats([(r[section].get(arm) or {}).get(k) for r in runs]) for k in keys}
    caches = [r["reward_cache"] for r in runs if r.get("reward_cache")]
    if caches:
        tot = {k: sum(c[k] for c in caches) for k in ("unique_patches", "cache_hits", "reruns", "target_episodes")}
        tot["cache_hit_frac"] = tot["cache_hits"] / tot["unique_patches"] if tot["unique_patches"] else 0.0
        out["reward_cache"] = tot
    out["wall_s"] = _stats([r.get("wall_s") for r in runs])
    return out


def _fmt(s: dict, signed: bool = True) -> str:
    if not s or s.get("n", 0) == 0:
        return "-"
    f = "{:+.3f}" if signed else "{:.2f}"
    sd = "{:.3f}" if signed else "{:.2f}"
    return (f.format(s["mean"]) + (" ± " + sd.format(s["std"]) if s["n"] > 1 else "")
            + f" ({', '.join(f.format(x) for x in s['runs'])})")


def markdown(agg: dict) -> str:
    lines = [f"Held-out packets, {agg['runs']} run(s): mean ± std over runs (per-run values in parentheses).", ""]
    titles = {"sampled": "Training-run evaluation, sampled patches (eval.k per packet at eval.temperature)",
              "greedy": "Training-run evaluation, greedy patch (one per packet; rule = the rule-based reference)",
              "table": "launch/evaluate_engineer.py table (one patch per packet per arm)"}
    for section, title in titles.items():
        if not agg[section]:
            continue
        lines += [f"**{title}**", "", "| arm | mean Δ_B | packets improved | valid patches |", "|---|---|---|---|"]
        for arm, v in agg[section].items():
            lines.append(f"| {arm} | {_fmt(v.get('delta_b'))} | {_fmt(v.get('improved_frac'), False)} | "
                         f"{_fmt(v.get('valid_frac'), False)} |")
        lines.append("")
    c = agg.get("reward_cache")
    if c:
        lines.append(f"Reward cache over all GRPO steps: {int(c['cache_hits'])} of {int(c['unique_patches'])} "
                     f"distinct valid patches per packet group served from the cache "
                     f"(hit rate {c['cache_hit_frac']:.2f}); {int(c['reruns'])} reruns, "
                     f"{int(c['target_episodes'])} target episodes.")
    return "\n".join(lines) + "\n"


def plot(runs: Sequence[dict], agg: dict, out_png: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1, 1.5]})
    curves = [r["grpo_steps"] for r in runs if r["grpo_steps"]]
    for i, c in enumerate(curves):
        ax[0].plot([s["step"] for s in c], [s["delta_b"] for s in c], color="C0", alpha=0.3, lw=1,
                   label="mean Δ_B of the K samples (each run)" if i == 0 else None)
        ax[0].plot([s["step"] for s in c], [s["valid_frac"] for s in c], color="C1", alpha=0.3, lw=1,
                   label="valid fraction (each run)" if i == 0 else None)
    if curves:
        n = min(len(c) for c in curves)
        steps = [s["step"] for s in curves[0][:n]]
        ax[0].plot(steps, np.mean([[s["delta_b"] for s in c[:n]] for c in curves], 0), color="C0", lw=2.5,
                   marker="o", label="mean Δ_B, mean over runs")
        ax[0].plot(steps, np.mean([[s["valid_frac"] for s in c[:n]] for c in curves], 0), color="C1", lw=2.5,
                   marker="s", label="valid fraction, mean over runs")
    rule = (agg["greedy"].get("rule") or {}).get("delta_b")
    if rule and rule["n"]:
        ax[0].axhline(rule["mean"], color="C3", ls="--", label=f"rule-based engineer, held-out Δ_B {rule['mean']:+.3f}")
    lows = [s["delta_b"] for c in curves for s in c] + ([rule["mean"]] if rule and rule["n"] else [])
    ax[0].set(title="GRPO on train packets (reward = paired Δ_B)", xlabel="GRPO step",
              ylim=(min([-0.05] + [v - 0.05 for v in lows]), 1.05))   # Δ_B < 0 when patches hurt
    ax[0].legend(fontsize=7, loc="best")

    bars = [("untrained", "sampled"), ("sft", "sampled"), ("grpo", "sampled"),
            ("untrained", "greedy"), ("sft", "greedy"), ("grpo", "greedy"), ("rule", "greedy"),
            ("react", "table"), ("self_refine", "table")]
    bars = [(a, s) for a, s in bars if (agg[s].get(a) or {}).get("delta_b", {}).get("n")]
    x = np.arange(len(bars))
    colors = {"untrained": "0.6", "sft": "C0", "grpo": "C2", "rule": "C3", "react": "C4", "self_refine": "C5",
              "review_hint": "C6"}
    for i, (a, s) in enumerate(bars):
        st = agg[s][a]["delta_b"]
        ax[1].bar(i, st["mean"], 0.6, color=colors[a], alpha=0.55 if s == "sampled" else 0.95,
                  yerr=st["std"] if st["n"] > 1 else None, capsize=3)
        ax[1].plot([i] * len(st["runs"]), st["runs"], "k.", ms=6)
        v = (agg[s][a].get("valid_frac") or {}).get("mean")
        if v is not None:
            ax[1].plot(i, v, "kx", ms=7)
    sub = lambda a, s: ("T>0 samples" if s == "sampled" else "reference" if a == "rule"     # noqa: E731
                        else "table arm" if s == "table" else "greedy")
    ax[1].set_xticks(x, [f"{a}\n{sub(a, s)}" for a, s in bars], fontsize=8)
    ax[1].axhline(0, color="k", lw=0.5)
    ax[1].set(title=f"held-out packets: mean Δ_B (bars: mean of {agg['runs']} runs, dots: runs, x: valid fraction)",
              ylabel="Δ_B", ylim=(min([-0.05] + [v - 0.05 for a, s in bars
                                                 for v in agg[s][a]["delta_b"]["runs"]]), 1.05))
    ax[1].title.set_fontsize(9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out_png)) or ".", exist_ok=True)
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


# ------------------------------------------------------------------------------------------
# pre-registered criteria (experiments/configs/harness_r1/tiny_cpu_policy.py)
# ------------------------------------------------------------------------------------------
def _helpful_share(ev: dict) -> float:
    """Share of an evaluation's samples whose held-out Delta_B is > 0 (all samples counted)."""
    det = ev.get("details") or []
    n = sum(len(d.get("valid") or []) for d in det)
    return sum(sum(r > 0 for r in d.get("rewards") or []) for d in det) / n if n else float("nan")


def run_criteria(workdir: str, *, most: int = 4, min_valid: float = 0.8) -> dict:
    """C1-C3 of one run from its ``engineer_summary.json`` (module docstring)."""
    summ = _load(os.path.join(workdir, "engineer_summary.json")) or {}
    sft, grpo = (summ.get("eval") or {}).get("after_sft"), (summ.get("eval") or {}).get("final")
    if not sft or not grpo or not sft.get("details") or not grpo.get("details"):
        raise ValueError(f"{workdir}: the after-SFT and final held-out evaluations (with details) are missing")
    per_sft = {d["packet"]: d["delta_b"] for d in sft["details"]}
    per_grpo = {d["packet"]: d["delta_b"] for d in grpo["details"]}
    rises = sum(per_grpo[p] > per_sft[p] for p in per_sft if p in per_grpo)
    h0, h1 = _helpful_share(sft), _helpful_share(grpo)
    return {"workdir": os.path.abspath(workdir),
            "helpful_share": {"sft": h0, "grpo": h1}, "C1": bool(h1 > h0),
            "packets_rising": rises, "packets": len(per_sft), "C2": bool(rises >= most),
            "valid_frac": {"sft": sft.get("valid_frac"), "grpo": grpo.get("valid_frac")},
            "C3": bool((grpo.get("valid_frac") or 0.0) >= min_valid),
            "delta_b": {"sft": sft.get("delta_b"), "grpo": grpo.get("delta_b")},
            "cross_delta_b": {"sft": sft.get("cross_delta_b"), "grpo": grpo.get("cross_delta_b")},
            "greedy_delta_b": {"sft": (sft.get("greedy") or {}).get("delta_b"),
                               "grpo": (grpo.get("greedy") or {}).get("delta_b")},
            "infra_samples": {"sft": sft.get("infra_samples"), "grpo": grpo.get("infra_samples")},
            "task_deltas": {"sft": sft.get("task_deltas") or {}, "grpo": grpo.get("task_deltas") or {}}}


def criteria(workdirs: Sequence[str], *, most: int = 4, min_valid: float = 0.8, samples: int = 10_000) -> dict:
    """The pre-registered criteria over runs (module docstring)."""
    runs = [run_criteria(w, most=most, min_valid=min_valid) for w in workdirs]
    tasks = sorted(set.intersection(*[set(r["task_deltas"]["sft"]) & set(r["task_deltas"]["grpo"]) for r in runs]))
    a = [float(np.mean([r["task_deltas"]["grpo"][t] for r in runs])) for t in tasks]
    b = [float(np.mean([r["task_deltas"]["sft"][t] for r in runs])) for t in tasks]
    c4 = paired_bootstrap(a, b, samples=samples) if tasks else {"unavailable": "no held-out task scored in every run"}
    per = {c: sum(r[c] for r in runs) for c in ("C1", "C2", "C3")}
    need = min(2, len(runs))
    verdict = all(v >= need for v in per.values()) and bool(c4.get("ci_low", -1.0) > 0)
    for r in runs:
        r.pop("task_deltas")
    return {"runs": runs, "tasks": len(tasks), "C4": c4, "runs_meeting": per,
            "shows_learning": verdict}


def criteria_markdown(c: dict) -> str:
    lines = ["| run | helpful share SFT -> GRPO (C1) | packets rising (C2) | valid after GRPO (C3) | "
             "sampled Δ_B SFT -> GRPO | cross-batch Δ_B SFT -> GRPO | greedy Δ_B SFT -> GRPO | infra samples |",
             "|---|---|---|---|---|---|---|---|"]
    f = lambda x: "-" if x is None else f"{x:+.3f}"      # noqa: E731
    for r in c["runs"]:
        y = lambda k: "yes" if r[k] else "no"            # noqa: E731
        lines.append(f"| {os.path.basename(r['workdir'])} | {r['helpful_share']['sft']:.2f} -> "
                     f"{r['helpful_share']['grpo']:.2f} ({y('C1')}) | {r['packets_rising']}/{r['packets']} "
                     f"({y('C2')}) | {r['valid_frac']['grpo']:.2f} ({y('C3')}) | {f(r['delta_b']['sft'])} -> "
                     f"{f(r['delta_b']['grpo'])} | {f(r['cross_delta_b']['sft'])} -> {f(r['cross_delta_b']['grpo'])} | "
                     f"{f(r['greedy_delta_b']['sft'])} -> {f(r['greedy_delta_b']['grpo'])} | "
                     f"{r['infra_samples']['sft']}, {r['infra_samples']['grpo']} |")
    c4 = c["C4"]
    lines += ["", (f"C4: over {c['tasks']} held-out tasks, after GRPO - after SFT = {c4['diff']:+.4f}, paired "
                   f"bootstrap {100 * c4['level']:.0f}% interval [{c4['ci_low']:+.4f}, {c4['ci_high']:+.4f}] "
                   f"({'above 0' if c4['ci_low'] > 0 else 'not above 0'})") if "diff" in c4 else
              f"C4: {c4.get('unavailable')}",
              f"Runs meeting C1 / C2 / C3: {c['runs_meeting']['C1']} / {c['runs_meeting']['C2']} / "
              f"{c['runs_meeting']['C3']} of {len(c['runs'])}. Shows learning (pre-registered rule): "
              f"{'yes' if c['shows_learning'] else 'no'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdirs", required=True, help="comma-separated workdirs of launch/engineer.py runs")
    ap.add_argument("--out", required=True, help="output stem: writes <out>.png, <out>.json, <out>.md")
    ap.add_argument("--criteria", action="store_true",
                    help="also evaluate the pre-registered criteria of tiny_cpu_policy (module docstring)")
    a = ap.parse_args(argv)
    workdirs = [w for w in a.workdirs.split(",") if w]
    runs = [run_figures(w) for w in workdirs]
    agg = aggregate(runs)
    md = markdown(agg)
    if a.criteria:
        agg["criteria"] = criteria(workdirs)
        md += "\n**Pre-registered criteria**\n\n" + criteria_markdown(agg["criteria"])
    with open(a.out + ".json", "w", encoding="utf-8") as f:
        json.dump({"runs": runs, "aggregate": agg}, f, indent=1, default=float)
    with open(a.out + ".md", "w", encoding="utf-8") as f:
        f.write(md)
    plot(runs, agg, a.out + ".png")
    print(md)
    return agg


if __name__ == "__main__":
    main()
