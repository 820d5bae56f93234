#!/usr/bin/env bash
# A throwaway PostgreSQL server for tests and benchmarks. Idempotent.
#
#   scripts/postgres.sh [start] [DIR]   install if needed, init + start, print the URL (the only stdout line)
#   scripts/postgres.sh stop [DIR]      stop the server (data kept, a later start reuses it)
#   scripts/postgres.sh destroy [DIR]   stop and delete DIR
#   scripts/postgres.sh status [DIR]    exit 0 when it accepts connections
#   scripts/postgres.sh url             print the URL
#
#   export RAG_TEST_POSTGRES_URL="$(scripts/postgres.sh)"
#
# DIR defaults to $RAG_PG_DIR or /tmp/rag-pg; the port is $RAG_PG_PORT or 5433 (clear of a system 5432).
set -euo pipefail

cmd="${1:-start}"
pg_root="${2:-${RAG_PG_DIR:-/tmp/rag-pg}}"
port="${RAG_PG_PORT:-5433}"
data="$pg_root/data"
url="postgresql+psycopg://rag:rag@127.0.0.1:${port}/rag_test"

log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
  local dir
  if command -v pg_ctl >/dev/null 2>&1; then
    # Follow links (e.g. /usr/local/bin/pg_ctl -> /usr/lib/postgresql/15/bin/pg_ctl) to the directory
    # that also holds initdb, psql and pg_isready.
    dir="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
    if [[ -x "$dir/initdb" && -x "$dir/pg_isready" && -x "$dir/psql" ]]; then
      echo "$dir"
      return 0
    fi
  fi
  # Debian keeps the server binaries off PATH, one directory per major version.
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" && -x "$dir/pg_isready" ]]; then
    echo "$dir"
    return 0
  fi
  return 1
}

install_postgres() {
  if [[ $EUID -ne 0 ]]; then
    log "PostgreSQL is not installed and installing it needs root: apt-get install -y postgresql"
    exit 1
  fi
  log "installing postgresql from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
}

# initdb refuses to run as root: as root, run the server as the 'postgres' OS user the package creates.
run_as() {
  if [[ $EUID -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

psql_admin() {
  run_as "$bindir/psql" -X -q -h "$pg_root" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}

is_ready() {
  [[ -n "${bindir:-}" ]] && "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1 >/dev/null 2>&1
}

is_running() {
  [[ -s "$data/PG_VERSION" ]] && run_as "$bindir/pg_ctl" -D "$data" status >/dev/null 2>&1
}

start() {
  bindir="$(find_bindir)" || { install_postgres; bindir="$(find_bindir)"; }
  if [[ $EUID -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  mkdir -p "$pg_root"
  [[ $EUID -eq 0 ]] && chown -R postgres: "$pg_root"

  if [[ ! -s "$data/PG_VERSION" ]]; then
    log "initdb $data"
    # Socket connections (the admin steps below) trust the OS user; TCP needs a password.
    run_as "$bindir/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      --encoding=UTF8 --locale=C.UTF-8 >&2
  fi

  if ! is_running; then
    log "starting on 127.0.0.1:$port"
    run_as "$bindir/pg_ctl" -D "$data" -l "$pg_root/server.log" -w -t 60 \
      -o "-p $port -k $pg_root -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2
  fi

  for _ in $(seq 1 60); do
    is_ready && break
    sleep 0.5
  done
  if ! is_ready; then
    log "server did not become ready; see $pg_root/server.log"
    exit 1
  fi

  psql_admin <<'SQL'
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rag') THEN
    CREATE ROLE rag LOGIN PASSWORD 'rag' CREATEDB;
  END IF;
END
$$;
SQL
  if [[ -z "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'rag_test'")" ]]; then
    psql_admin -c "CREATE DATABASE rag_test OWNER rag"
  fi
  echo "$url"
}

stop() {
  bindir="$(find_bindir)" || { log "PostgreSQL is not installed; nothing to stop"; return 0; }
  if is_running; then
    run_as "$bindir/pg_ctl" -D "$data" -m fast -w stop >&2
  else
    log "not running"
  fi
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  destroy) stop; rm -rf "$pg_root" ;;
  status) bindir="$(find_bindir)" || exit 1; is_ready ;;
  url) echo "$url" ;;
  *) log "usage: $0 [start|stop|destroy|status|url] [DIR]"; exit 2 ;;
esac
