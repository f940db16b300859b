#!/usr/bin/env bash
# A private, throwaway PostgreSQL cluster for the tests, on a free 127.0.0.1 port.
#
#   scripts/postgres.sh start        initdb + pg_ctl start (installs Debian's `postgresql` if missing, as root)
#   scripts/postgres.sh url          the maintenance URL: postgresql://postgres@127.0.0.1:PORT/postgres
#   scripts/postgres.sh stop         stop the cluster and delete its files
#   scripts/postgres.sh run CMD...   start, run CMD with SERVAL_TEST_DATABASE_URL set, always stop
#
# Trust authentication on 127.0.0.1 and a socket in the cluster's private folder, nothing else.
# PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user.
# `run` fails when PostgreSQL cannot be had, unless SERVAL_TEST_POSTGRES=skip (refused when CI=true).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
STATE_DIR="$REPO/.serval"
STATE="$STATE_DIR/test-postgres.env"

die() { echo "postgres.sh: $*" >&2; exit 1; }

pg_bin() {
    local dir
    dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$dir" && -x "$dir/initdb" ]] && echo "$dir"
}

install_postgres() {
    [[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed and installing it needs root:
  sudo apt-get install -y postgresql   (or set SERVAL_TEST_POSTGRES=skip to test on SQLite only)"
    echo "postgres.sh: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq postgresql >/dev/null || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }
}

as_owner() {
    if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Where the cluster's folder goes: $TMPDIR, unless the cluster's owner cannot enter it (as root the
# owner is `postgres`, and a private TMPDIR such as `mktemp -d`'s is root's alone), then /tmp.
data_parent() {
    local parent="${TMPDIR:-/tmp}"
    if [[ "$(id -u)" == 0 ]] && ! runuser -u postgres -- test -w "$parent" -a -x "$parent" 2>/dev/null; then
        parent=/tmp
    fi
    echo "$parent"
}

start() {
    [[ -f "$STATE" ]] && stop
    local bin data port
    bin="$(pg_bin)" || { install_postgres; bin="$(pg_bin)"; } || die "no initdb under /usr/lib/postgresql/*/bin"
    data="$(mktemp -d "$(data_parent)/serval-postgres.XXXXXX")"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$data"
    chmod 700 "$data"
    port="$(free_port)"
    as_owner "$bin/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$data.initdb.log" 2>&1 \
        || { cat "$data.initdb.log" >&2; die "initdb failed"; }
    rm -f "$data.initdb.log"
    cat >"$data/pg_hba.conf" <<EOF
local all all trust
host  all all 127.0.0.1/32 trust
EOF
    cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$data'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    mkdir -p "$STATE_DIR"
    printf 'PG_BIN=%q\nPG_DATA=%q\nPG_PORT=%q\n' "$bin" "$data" "$port" >"$STATE"
    as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start >/dev/null \
        || { cat "$data/server.log" >&2; stop; die "the cluster did not start"; }
    echo "postgres.sh: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($data)" >&2
}

url() {
    [[ -f "$STATE" ]] || die "no cluster is running: scripts/postgres.sh start"
    # shellcheck disable=SC1090
    source "$STATE"
    echo "postgresql://postgres@127.0.0.1:$PG_PORT/postgres"
}

stop() {
    [[ -f "$STATE" ]] || return 0
    # shellcheck disable=SC1090
    source "$STATE"
    if [[ -d "$PG_DATA" ]]; then
        as_owner "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
        rm -rf "$PG_DATA"
    fi
    rm -f "$STATE"
}

run() {
    if [[ "${SERVAL_TEST_POSTGRES:-}" == skip ]]; then
        [[ "${CI:-}" == true ]] && die "SERVAL_TEST_POSTGRES=skip is not allowed in CI"
        echo "postgres.sh: SERVAL_TEST_POSTGRES=skip: NOT running on PostgreSQL: $*" >&2
        return 0
    fi
    start
    trap stop EXIT
    trap 'exit 130' INT TERM
    SERVAL_TEST_DATABASE_URL="$(url)" "$@"
}

case "${1:-}" in
    start | stop | url) "$1" ;;
    run) shift; [[ $# -gt 0 ]] || die "usage: $0 run CMD..."; run "$@" ;;
    *) die "usage: $0 start|stop|url|run CMD..." ;;
esac
