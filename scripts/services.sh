#!/usr/bin/env bash
# Every service the tests use, in one command (each is installed first where it is missing):
#
#   bash scripts/services.sh start    # MariaDB, the SWE sandbox (bubblewrap), the AppWorld service
#   bash scripts/services.sh status   # exit 0 iff every service is up
#   bash scripts/services.sh stop     # MariaDB and AppWorld (the sandbox is not a process)
#
# `start` runs the services' own scripts concurrently where they do not conflict: bubblewrap and
# MariaDB both come from Debian's packages (apt-get takes one lock), so they run one after the
# other, beside AppWorld's venv install and service start. Bubblewrap goes first: AppWorld's
# start installs it too when it is missing (through the same script, which serializes
# installers), so by the time MariaDB's apt-get runs no other apt-get does. None of them needs the project to
# be pip-installed, so .ci/run starts this beside `pip install`. Each script's output goes to its
# own log; a failure prints that log's tail and makes `start` exit non-zero after the others end.
#   HARNESS_JAX_SERVICES_LOG_DIR  (default /tmp/harness_jax_services) <service>.log, and
#                                 timings.tsv: service, seconds, exit code (one line each; `all`: the wall time)
set -uo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
LOGS="${HARNESS_JAX_SERVICES_LOG_DIR:-/tmp/harness_jax_services}"

step() {  # step NAME CMD...: run CMD with its output in $LOGS/NAME.log; record seconds and exit code
  local name=$1 t0 rc
  shift
  t0=$EPOCHREALTIME
  "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  awk -v n="$name" -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" \
    'BEGIN { printf "%s\t%.1f\t%d\n", n, b - a, rc }' >>"$LOGS/timings.tsv"
  if [ "$rc" = 0 ]; then
    echo "services.sh: $name ready ($(tail -1 "$LOGS/$name.log"))"
  else
    echo "services.sh: $name FAILED (exit $rc); last lines of $LOGS/$name.log:" >&2
    tail -25 "$LOGS/$name.log" | sed 's/^/  | /' >&2
  fi
  return "$rc"
}

cmd_start() {
  mkdir -p "$LOGS"
  : >"$LOGS/timings.tsv"
  local t0=$EPOCHREALTIME
  ( rc=0
    step swe_sandbox bash "$REPO/scripts/swe_sandbox.sh" install || rc=1
    step mariadb bash "$REPO/scripts/mariadb.sh" start || rc=1
    exit $rc ) &
  local apt_chain=$!
  step appworld bash "$REPO/scripts/appworld.sh" start &
  local appworld=$!
  local rc=0
  wait "$apt_chain" || rc=1
  wait "$appworld" || rc=1
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v rc="$rc" 'BEGIN { printf "all\t%.1f\t%d\n", b - a, rc }' >>"$LOGS/timings.tsv"
  if [ "$rc" != 0 ]; then
    echo "services.sh: at least one service failed (logs in $LOGS)" >&2
  fi
  return "$rc"
}

cmd_status() {
  local rc=0
  bash "$REPO/scripts/mariadb.sh" status || rc=1
  if command -v bwrap >/dev/null 2>&1; then echo "bubblewrap: $(bwrap --version)"
  else echo "bubblewrap: not installed"; rc=1; fi
  bash "$REPO/scripts/appworld.sh" status >/dev/null && echo "appworld.sh: running" || { echo "appworld.sh: not running"; rc=1; }
  return "$rc"
}

cmd_stop() {
  local rc=0
  bash "$REPO/scripts/mariadb.sh" stop || rc=1
  bash "$REPO/scripts/appworld.sh" stop || rc=1
  return "$rc"
}

case "${1:-start}" in
  start) cmd_start ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  *) echo "usage: bash scripts/services.sh {start|status|stop}" >&2; exit 2 ;;
esac
