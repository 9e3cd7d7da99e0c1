"""``benchmarks/accel_probe.py --smoke`` runs on CPU and prints one JSON object with every
section (so the accelerator probe never rots between the runs on an H200 / TPU host)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_accel_probe_smoke_prints_one_json_object():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT, XLA_FLAGS="")
    out = subprocess.run([sys.executable, "benchmarks/accel_probe.py", "--smoke"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1
    res = json.loads(lines[0])
    assert res["smoke"] and res["platform"]["platform"] == "cpu"
    from harness_jax.models.qwen3_5 import attention as A
    for impl in A.IMPLS:
        row = res["attention"][f"{impl}@128"]
        assert "error" not in row, row
        assert row["fwd_s"] > 0 and row["fwd_bwd_s"] > 0 and row["fwd_bwd_memory"]["compiled_temp_bytes"] > 0
    for impl in ("jnp", "pallas"):                      # Gated DeltaNet (bench_gdn.probe_gdn)
        assert res["gdn"][f"{impl}@128"]["fwd_s"] > 0 and res["gdn"][f"{impl}@128"]["fwdbwd_s"] > 0
    assert {"ep/blocked", "ep/ragged_dot", "dense"} <= set(res["moe"])   # MoE block (bench_moe.probe_moe_block)
    ts = res["train_step"]
    assert ts["tokens_per_s"] > 0 and ts["remat"] == "full" and ts["mfu"] is None   # CPU: no bf16 peak
    eng = res["engine"]
    assert eng["engine"]["tok_s"] > 0 and eng["engine"]["kv"]["cache_kind"] == "paged"
    assert eng["weight_sync"]["bf16_export_bytes"] > 0 and eng["weight_sync"]["reload_s"] > 0


def test_sections_are_a_registry():
    sys.path.insert(0, ROOT)
    from benchmarks import accel_probe

    assert {"attention", "train_step", "engine", "gdn", "moe"} <= set(accel_probe.SECTIONS)

    @accel_probe.section("probe_test_section", "a section another benchmark adds")
    def extra(args):
        return {"ok": True, "smoke": args.smoke}
    try:
        res = accel_probe.main(["--smoke", "--sections=probe_test_section"])
        assert res["probe_test_section"]["ok"] and res["probe_test_section"]["smoke"]
        with pytest.raises(SystemExit, match="unknown"):
            accel_probe.main(["--sections=nope"])
    finally:
        accel_probe.SECTIONS.pop("probe_test_section")
