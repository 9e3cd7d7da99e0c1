#!/usr/bin/env bash
# The bubblewrap sandbox of the SWE environment and the AppWorld service (Debian package).
# Idempotent; concurrent runs wait for each other.
#   bash scripts/swe_sandbox.sh install   # apt-get install bubblewrap if bwrap is missing
#   bash scripts/swe_sandbox.sh check     # run one sandboxed command
set -euo pipefail
cmd="${1:-install}"
case "$cmd" in
  install)
    # one installer at a time (scripts/appworld.sh start may run this concurrently with CI)
    exec 9>"${TMPDIR:-/tmp}/harness_jax_bubblewrap_install.lock"
    flock 9
    if ! command -v bwrap >/dev/null 2>&1; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }
    fi
    command -v bwrap >/dev/null && echo "bubblewrap: $(bwrap --version)";;
  check)
    python3 -c "from harness_jax.envs.swe import bwrap_status; ok, why = bwrap_status(); print('SWE sandbox:', why); raise SystemExit(0 if ok else 1)";;
  *) echo "usage: $0 install|check" >&2; exit 2;;
esac
