"""``--smoke`` runs of the Gated DeltaNet and MoE benchmarks (tiny shapes, every section they
have on CPU; their accelerator-probe sections run in ``accel_probe.py --smoke``,
tests/experiments/test_accel_probe.py), as CI runs them: the scripts work and print their tables.
No number is asserted (benchmarks measure; tests check)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
@pytest.mark.parametrize("script,expect", [
    ("bench_gdn.py", ["Pallas kernels (interpret mode)", "pallas fwd GFLOP"]),
    ("bench_moe.py", ["routed experts:", "collectives in the compiled", "save_hf and the expert reads"]),
])
def test_benchmark_smoke(script, expect):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("XLA_FLAGS", None)   # bench_moe sets its own 8 fake devices; bench_gdn needs one
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), "--smoke"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for line in expect:
        assert line in r.stdout, f"{script} --smoke printed no {line!r}:\n{r.stdout[-3000:]}"
