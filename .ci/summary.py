"""CI's timing summary (printed by .ci/run at the end, also after a failure).

    python3 .ci/summary.py RUN_TMP

Reads what .ci/run left in its temp dir: ``start`` (epoch seconds), ``steps.tsv`` (step, seconds,
exit code), ``logs/services/timings.tsv`` (the same per service, from scripts/services.sh) and
``test_timings.json`` (tests/ci_plugin.py: test seconds per directory, the slowest tests, counts).
Standard library only: it must run even when the install failed.
"""
import datetime
import json
import os
import sys
import time


def _tsv(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3:
                    rows.append((parts[0], float(parts[1]), int(parts[2])))
    return rows


def _row(name, seconds, rc=None, note=""):
    status = "" if rc is None else ("ok" if rc == 0 else f"FAILED ({rc})")
    return f"  {name:<44} {seconds:8.1f} s  {status:<11} {note}".rstrip()


def render(run_tmp: str) -> str:
    out = []
    try:
        start = float(open(os.path.join(run_tmp, "start")).read())
        total = time.time() - start
    except (OSError, ValueError):
        total = None
    load = os.getloadavg()
    out.append(f"==== CI timing summary ({datetime.datetime.now().isoformat(timespec='seconds')}, "
               f"{os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}) ====")
    steps = {n: (s, rc) for n, s, rc in _tsv(os.path.join(run_tmp, "steps.tsv"))}
    services = _tsv(os.path.join(run_tmp, "logs", "services", "timings.tsv"))
    if "install" in steps:
        out.append(_row("install", *steps["install"], "pip install -e .[test]"))
    for svc, s, rc in services:
        if svc == "all":
            out.append(_row("services", s, rc, "scripts/services.sh start, beside the install"))
    for svc, s, rc in services:
        if svc != "all":
            out.append(_row(f"  {svc}", s, rc))
    if "install_and_services" in steps:
        out.append(_row("install and services (wall)", *steps["install_and_services"]))
    if "data" in steps:
        out.append(_row("data", *steps["data"], "tokenizer, AppWorld tree: beside the tests"))
    if "tests" in steps:
        out.append(_row("tests (wall)", *steps["tests"], "python3 -m pytest -q -n 2 tests"))
    if total is not None:
        out.append(_row("total (wall)", total, None, f"{total / 60:.1f} min"))
    path = os.path.join(run_tmp, "test_timings.json")
    if os.path.exists(path):
        t = json.load(open(path))
        c = t.get("counts", {})
        out.append(f"tests: {c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                   f"{c.get('skipped', 0)} skipped, {c.get('error', 0)} errors; "
                   f"{t.get('test_seconds', 0):.0f} test seconds over the workers")
        out.append("test seconds per directory (set-up + call + tear-down, summed over the workers):")
        for d, v in sorted(t.get("dirs", {}).items(), key=lambda kv: -kv[1]["seconds"]):
            out.append(f"  {d:<28} {v['tests']:4d} tests {v['seconds']:8.1f} s")
        out.append(f"{len(t.get('slowest', []))} slowest tests (set-up + call + tear-down):")
        for nodeid, s in t.get("slowest", []):
            out.append(f"  {s:8.1f} s  {nodeid}")
        # last, the plain closing line CI's reader looks for
        out.append(f"tests: {c.get('passed', 0)} passed, {c.get('failed', 0) + c.get('error', 0)} failed, "
                   f"{c.get('skipped', 0)} skipped")
    else:
        out.append("tests: no timings (the test run did not finish)")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(sys.argv[1]))
