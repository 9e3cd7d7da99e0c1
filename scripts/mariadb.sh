#!/usr/bin/env bash
# MariaDB for the DBBench environment (harness_jax.envs.dbbench, engine="mariadb").
#
#   bash scripts/mariadb.sh install   # Debian's mariadb-server, if no mariadbd is found
#   bash scripts/mariadb.sh start     # install if needed, start a private server, wait until ready
#   bash scripts/mariadb.sh status    # exit 0 iff the server answers
#   bash scripts/mariadb.sh stop
#
# The server is a user process with its own data directory and a Unix socket only (no TCP):
#   HARNESS_JAX_MARIADB_DIR     (default /tmp/harness_jax_mariadb)  data, socket, pid and log
#   HARNESS_JAX_MARIADB_SOCKET  (default $HARNESS_JAX_MARIADB_DIR/mysqld.sock)
# The Python engine reads the same variables. The server's root account has no password and is
# reachable only through the socket; every episode gets its own database and its own user that
# can touch only that database. Every command is idempotent. The data are throw-away episode
# tables, so durability is traded for speed (no fsync, one shared tablespace).
set -euo pipefail

DIR="${HARNESS_JAX_MARIADB_DIR:-/tmp/harness_jax_mariadb}"
SOCK="${HARNESS_JAX_MARIADB_SOCKET:-$DIR/mysqld.sock}"
DATA="$DIR/data"
PIDFILE="$DIR/mysqld.pid"
LOG="$DIR/error.log"

find_bin() {  # first of the names found in PATH or the sbin directories
  local name
  for name in "$@"; do
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
    for d in /usr/sbin /usr/local/sbin /usr/bin; do
      if [ -x "$d/$name" ]; then echo "$d/$name"; return 0; fi
    done
  done
  return 1
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "mariadb.sh: need root (or sudo) to run: $*" >&2; return 1
  fi
}

cmd_install() {
  if find_bin mariadbd mysqld >/dev/null && find_bin mariadb-admin mysqladmin >/dev/null; then
    return 0
  fi
  echo "mariadb.sh: installing mariadb-server from Debian's packages" >&2
  as_root apt-get -o DPkg::Lock::Timeout=600 update -q
  # policy-rc.d exit 101 keeps the package from starting the system service: we run our own.
  local prc=/usr/sbin/policy-rc.d created=0
  if [ ! -e "$prc" ]; then
    as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $prc && chmod +x $prc" && created=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
    mariadb-server mariadb-client
  if [ "$created" = 1 ]; then as_root rm -f "$prc"; fi
}

admin() {
  "$(find_bin mariadb-admin mysqladmin)" --no-defaults --socket="$SOCK" -uroot "$@"
}

client() {
  "$(find_bin mariadb mysql)" --no-defaults --socket="$SOCK" -uroot "$@"
}

drop_stale() {  # episode databases/users left by killed processes (none can be live yet)
  local stmts
  stmts="$(client -N -B -e "SELECT CONCAT('DROP DATABASE \`', SCHEMA_NAME, '\`;') FROM
      information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'hj\\_%';
    SELECT CONCAT('DROP USER \'', User, '\'@\'', Host, '\';') FROM mysql.user
      WHERE User LIKE 'hj\\_%';")" || return 0
  if [ -n "$stmts" ]; then
    echo "$stmts" | client && echo "mariadb.sh: dropped $(echo "$stmts" | wc -l) stale episode objects"
  fi
}

is_up() {
  [ -S "$SOCK" ] && admin --connect-timeout=2 ping >/dev/null 2>&1
}

cmd_start() {
  if is_up; then echo "mariadb.sh: already running (socket $SOCK)"; return 0; fi
  cmd_install
  local user; user="$(id -un)"
  mkdir -p "$DIR"
  if [ ! -d "$DATA/mysql" ]; then
    rm -rf "$DATA"
    "$(find_bin mariadb-install-db mysql_install_db)" --no-defaults --user="$user" \
      --datadir="$DATA" --auth-root-authentication-method=normal \
      --skip-test-db >"$DIR/install.log" 2>&1 \
      || { echo "mariadb.sh: mariadb-install-db failed, see $DIR/install.log" >&2; tail -20 "$DIR/install.log" >&2; return 1; }
  fi
  # A stale pid file or socket from a killed server would block the start.
  if [ -f "$PIDFILE" ] && ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then rm -f "$PIDFILE" "$SOCK"; fi
  nohup "$(find_bin mariadbd mysqld)" --no-defaults --user="$user" --datadir="$DATA" \
    --socket="$SOCK" --pid-file="$PIDFILE" --log-error="$LOG" --skip-networking \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
    --max-connections=500 --innodb-buffer-pool-size=128M --skip-log-bin \
    --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --innodb-file-per-table=0 \
    --innodb-flush-method=nosync --sync-frm=0 --skip-name-resolve \
    >/dev/null 2>&1 &
  local i
  for i in $(seq 1 120); do
    if is_up; then
      drop_stale
      echo "mariadb.sh: ready (socket $SOCK)"; return 0
    fi
    sleep 0.5
  done
  echo "mariadb.sh: the server did not answer within 60 s; log $LOG:" >&2
  tail -30 "$LOG" >&2 || true
  return 1
}

cmd_stop() {
  if is_up; then admin shutdown || true; fi
  local i
  for i in $(seq 1 60); do
    if [ ! -f "$PIDFILE" ] || ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      rm -f "$PIDFILE"; echo "mariadb.sh: stopped"; return 0
    fi
    sleep 0.5
  done
  echo "mariadb.sh: the server (pid $(cat "$PIDFILE")) did not stop within 30 s" >&2
  return 1
}

case "${1:-start}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) if is_up; then echo "mariadb.sh: running (socket $SOCK)"; else echo "mariadb.sh: not running"; exit 1; fi ;;
  *) echo "usage: bash scripts/mariadb.sh {install|start|stop|status}" >&2; exit 2 ;;
esac
