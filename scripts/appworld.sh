#!/usr/bin/env bash
# AppWorld's real runtime for the AppWorld environment (harness_jax.envs.appworld).
#
#   bash scripts/appworld.sh install   # own virtual environment + `pip install appworld` + `appworld install`
#   bash scripts/appworld.sh start     # install if needed, start the service, wait until it answers
#   bash scripts/appworld.sh status    # exit 0 iff the service answers
#   bash scripts/appworld.sh stop
#
# AppWorld pins old libraries (pydantic 1, SQLAlchemy 1.4, fastapi 0.110, httpx 0.27), so it lives
# in its OWN virtual environment, never in the project's. `appworld install` unpacks the encrypted
# app bundle shipped in the wheel (offline); the unpacked code stays in that venv and is never
# copied into the repository (its licence forbids redistributing it unencrypted).
#
# The service (harness_jax/envs/appworld/venv_side/service.py, run by the venv's python) is a
# pool of AppWorld's own environment servers behind one HTTP endpoint on a Unix socket in a 0700
# directory: no TCP port, only this user can reach it. Every episode runs in a bubblewrap sandbox
# (the SWE family's: scripts/swe_sandbox.sh installs bubblewrap; `start` runs it when bwrap is
# missing) as an unprivileged uid, without network, seeing only its own task's files.
#   HARNESS_JAX_APPWORLD_HOME     (default ~/.cache/harness_jax/appworld) venv/, service/, data/
#   HARNESS_JAX_APPWORLD_SOCKET   (default $HOME/service/appworld.sock)
#   HARNESS_JAX_APPWORLD_WORKERS  (default 4) most episodes served at once (one sandbox each)
#   HARNESS_JAX_APPWORLD_RLIMIT_AS_MB (default 4096) address-space limit of each sandboxed process
#   HARNESS_JAX_APPWORLD_IDLE_S   (default 900) an episode without a request for this long is
#                                 closed (a closed connection or an exited client: within seconds)
#   HARNESS_JAX_APPWORLD_DISK_MB  (default 256) an episode's writable files
#   HARNESS_JAX_APPWORLD_PYTHON   (default python3) a Python >= 3.11 to build the venv with
#   HARNESS_JAX_APPWORLD_VERSION  (default 0.1.3.post1) the appworld release to install
# The Python client reads the same variables. Every command is idempotent.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
AW_HOME="${HARNESS_JAX_APPWORLD_HOME:-$HOME/.cache/harness_jax/appworld}"
VENV="$AW_HOME/venv"
STATE="$AW_HOME/service"
SOCK="${HARNESS_JAX_APPWORLD_SOCKET:-$STATE/appworld.sock}"
WORKERS="${HARNESS_JAX_APPWORLD_WORKERS:-4}"
RLIMIT_AS_MB="${HARNESS_JAX_APPWORLD_RLIMIT_AS_MB:-4096}"
IDLE_S="${HARNESS_JAX_APPWORLD_IDLE_S:-900}"
DISK_MB="${HARNESS_JAX_APPWORLD_DISK_MB:-256}"
PY="${HARNESS_JAX_APPWORLD_PYTHON:-python3}"
VERSION="${HARNESS_JAX_APPWORLD_VERSION:-0.1.3.post1}"
SERVICE_PY="$REPO/harness_jax/envs/appworld/venv_side/service.py"
LOG="$STATE/service.log"
MARK="$VENV/.harness_jax_appworld_installed"
# AppWorld's own cache (its unpacked tests bundle); kept beside the venv, not in ~/.appworld.
export APPWORLD_CACHE="$AW_HOME/appworld_cache"

installed() {
  [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$VERSION" ] && [ -x "$VENV/bin/python" ] \
    && [ -f "$("$VENV/bin/python" -c 'import importlib.util as u; print(u.find_spec("appworld").submodule_search_locations[0])' 2>/dev/null)/apps/venmo/apis.py" ]
}

cmd_install() {
  if installed; then return 0; fi
  local t0=$SECONDS
  if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
    echo "appworld.sh: appworld needs Python >= 3.11; $PY is $("$PY" --version 2>&1 || echo missing)." \
         "Set HARNESS_JAX_APPWORLD_PYTHON to a python3.11+ interpreter." >&2
    return 1
  fi
  mkdir -p "$AW_HOME"
  if [ ! -x "$VENV/bin/python" ]; then
    echo "appworld.sh: creating the AppWorld virtual environment in $VENV" >&2
    "$PY" -m venv "$VENV"
  fi
  echo "appworld.sh: pip install appworld==$VERSION (into $VENV only)" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "appworld==$VERSION" \
    || { echo "appworld.sh: pip install appworld==$VERSION failed (see above)" >&2; return 1; }
  echo "appworld.sh: appworld install (unpacks the app bundle shipped in the wheel, offline)" >&2
  mkdir -p "$APPWORLD_CACHE"
  (cd "$AW_HOME" && "$VENV/bin/appworld" install >"$AW_HOME/appworld_install.log" 2>&1) \
    || { echo "appworld.sh: 'appworld install' failed; log:" >&2; tail -20 "$AW_HOME/appworld_install.log" >&2; return 1; }
  echo "$VERSION" > "$MARK"
  echo "appworld.sh: installed appworld $VERSION in $((SECONDS - t0)) s" >&2
}

call() {  # call METHOD PATH: one request to the service; prints the JSON, fails unless 200 + ok
  "$VENV/bin/python" - "$SOCK" "$1" "$2" <<'EOF'
import http.client, socket, sys
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(sys.argv[1])
c = C("localhost", timeout=5)
body = b"{}" if sys.argv[2] == "POST" else None
c.request(sys.argv[2], sys.argv[3], body=body, headers={"Content-Type": "application/json"})
r = c.getresponse()
out = r.read().decode()
if r.status != 200 or ('"ok": true' not in out and '"stopping": true' not in out):
    sys.exit(1)
print(out)
EOF
}

health() { call GET /health; }

is_up() {
  [ -S "$SOCK" ] && [ -x "$VENV/bin/python" ] && health >/dev/null 2>&1
}

cmd_start() {
  if is_up; then echo "appworld.sh: already running (socket $SOCK)"; return 0; fi
  cmd_install
  if ! command -v bwrap >/dev/null 2>&1; then
    echo "appworld.sh: bubblewrap is missing; installing it (scripts/swe_sandbox.sh install)" >&2
    bash "$REPO/scripts/swe_sandbox.sh" install >&2 \
      || { echo "appworld.sh: could not install bubblewrap (apt-get install bubblewrap)" >&2; return 1; }
  fi
  local t0=$SECONDS
  mkdir -p "$STATE" "$(dirname "$SOCK")"
  chmod 700 "$STATE" "$(dirname "$SOCK")"
  if [ -f "$STATE/service.pid" ] && ! kill -0 "$(cat "$STATE/service.pid")" 2>/dev/null; then
    rm -f "$STATE/service.pid" "$SOCK"
  fi
  nohup "$VENV/bin/python" "$SERVICE_PY" manager --socket "$SOCK" --state-dir "$STATE" \
    --workers "$WORKERS" --rlimit-as-mb "$RLIMIT_AS_MB" --idle-limit-s "$IDLE_S" \
    --disk-mb "$DISK_MB" >>"$LOG" 2>&1 </dev/null &
  local i pid=$!
  for i in $(seq 1 360); do
    if is_up; then echo "appworld.sh: ready in $((SECONDS - t0)) s (socket $SOCK)"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "appworld.sh: the service exited while starting; log $LOG:" >&2
      tail -30 "$LOG" >&2 || true
      return 1
    fi
    sleep 0.5
  done
  echo "appworld.sh: the service did not answer within 180 s; log $LOG:" >&2
  tail -30 "$LOG" >&2 || true
  return 1
}

cmd_stop() {
  if is_up; then call POST /shutdown >/dev/null || true; fi
  local i pid
  pid="$(cat "$STATE/service.pid" 2>/dev/null || true)"
  for i in $(seq 1 60); do
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$STATE/service.pid"; echo "appworld.sh: stopped"; return 0
    fi
    sleep 0.5
  done
  echo "appworld.sh: the service (pid $pid) did not stop within 30 s; killing it" >&2
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$STATE/service.pid" "$SOCK"
}

case "${1:-start}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status)
    if is_up; then echo "appworld.sh: running (socket $SOCK)"; health
    elif ! installed; then echo "appworld.sh: not installed (run: bash scripts/appworld.sh install)"; exit 1
    else echo "appworld.sh: not running (run: bash scripts/appworld.sh start)"; exit 1; fi ;;
  *) echo "usage: bash scripts/appworld.sh {install|start|stop|status}" >&2; exit 2 ;;
esac
