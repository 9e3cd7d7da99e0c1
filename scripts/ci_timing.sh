#!/usr/bin/env bash
# CI's time from a clean clone with empty caches, the way its 30-minute budget is defined
# (docs/ci.md), without touching this machine's own install or services:
#
#   bash scripts/ci_timing.sh [COMMIT]     # default: this checkout's HEAD (commit it first)
#
#   1. clones this repository at COMMIT into a new /tmp/hjct.XXXXXX/repo;
#   2. gives the run a fresh virtual environment (plain `python3 -m venv`: no system site
#      packages, so `pip install -e ".[test]"` installs everything and never re-points this
#      machine's editable install), a fresh HOME (no ~/.cache/pip, no ~/.cache/harness_jax: no
#      AppWorld venv, no AppWorld/SWE/TextWorld data, no JAX cache; no Hugging Face cache), and
#      its own MariaDB directory and socket, so it starts every service itself;
#   3. runs `CI=true bash .ci/run` there (no stdin, PYTHONPATH and JAX/XLA/HARNESS_JAX variables
#      removed), its output to ci.log;
#   4. stops the MariaDB and AppWorld service it started and saves ci.log, the timing summary
#      and every step's log to OUT (default /tmp/ci_timing/<date>-<commit>/);
#   5. removes the clone, the venv and the HOME (CI_TIMING_KEEP=1 keeps them).
# Exit code: .ci/run's. Not made cold: Debian packages already installed (mariadb-server,
# bubblewrap: on a new machine their apt-get install runs inside the services step, beside pip)
# and the machine's pip configuration (/etc/pip.conf), which CI uses as well.
# Run it on an idle machine; it prints the load average before it starts.
# CI_TIMING_TESTS="tests/eval" runs only those test paths: a dry run of the script itself.
set -uo pipefail

SRC="$(cd "$(dirname "$0")/.." && git rev-parse --show-toplevel)"
COMMIT="$(git -C "$SRC" rev-parse "${1:-HEAD}")" || { echo "ci_timing.sh: unknown commit ${1:-HEAD}" >&2; exit 2; }
PYTHON="$(python3 -c 'import sys; print(sys.executable)')"   # absolute: HOME changes below
WORK="$(mktemp -d /tmp/hjct.XXXXXX)"
OUT="${OUT:-/tmp/ci_timing/$(date +%Y%m%d-%H%M%S)-${COMMIT:0:10}}"
mkdir -p "$OUT"
echo "ci_timing.sh: commit $COMMIT, work dir $WORK, results in $OUT"
echo "ci_timing.sh: load average now: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

git clone -q "$SRC" "$WORK/repo" && git -C "$WORK/repo" checkout -q "$COMMIT" \
  || { echo "ci_timing.sh: clone failed" >&2; exit 1; }
"$PYTHON" -m venv "$WORK/venv" || { echo "ci_timing.sh: venv failed" >&2; exit 1; }
mkdir -p "$WORK/home"

# the run's environment: this one less PYTHONPATH, the venv's and every JAX/XLA/project variable
ENVV=(env -u PYTHONPATH -u VIRTUAL_ENV -u XLA_FLAGS)
for v in $(env | cut -d= -f1 | grep -E '^(JAX_|HARNESS_JAX_|TF_CPP|TORCHINDUCTOR_)' || true); do ENVV+=(-u "$v"); done
ENVV+=(CI=true HOME="$WORK/home" PATH="$WORK/venv/bin:$PATH" VIRTUAL_ENV="$WORK/venv"
       HARNESS_JAX_MARIADB_DIR="$WORK/mariadb" HARNESS_JAX_CI_TMP="$WORK/ci_tmp")
if [ -n "${CI_TIMING_TESTS:-}" ]; then   # a dry run of this script on a few test paths
  ENVV+=(HARNESS_JAX_CI_TESTS="$CI_TIMING_TESTS"); echo "ci_timing.sh: DRY RUN, tests: $CI_TIMING_TESTS"
fi

T0=$EPOCHREALTIME
(cd "$WORK/repo" && "${ENVV[@]}" bash .ci/run </dev/null >"$OUT/ci.log" 2>&1)
RC=$?
WALL=$(awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }')

# stop what the run started (its own MariaDB and AppWorld service)
(cd "$WORK/repo" && "${ENVV[@]}" bash scripts/services.sh stop >"$OUT/services_stop.log" 2>&1)
cp -r "$WORK/ci_tmp/logs" "$OUT/logs" 2>/dev/null
cp "$WORK/ci_tmp/summary.txt" "$WORK/ci_tmp/test_timings.json" "$WORK/ci_tmp/steps.tsv" "$OUT/" 2>/dev/null
{ echo "commit $COMMIT"; echo ".ci/run exit code $RC, wall ${WALL} s ($(awk -v s="$WALL" 'BEGIN { printf "%.1f", s / 60 }') min)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"; } >"$OUT/result.txt"
if [ "${CI_TIMING_KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "ci_timing.sh: kept $WORK"; fi
cat "$OUT/summary.txt" 2>/dev/null || tail -40 "$OUT/ci.log"
cat "$OUT/result.txt"
exit "$RC"
