#!/usr/bin/env bash
# Start or stop a throwaway PostgreSQL server for the ledger tests.
#   .ci/postgres.sh start DIR   -> prints the server URL on stdout
#   .ci/postgres.sh stop DIR
# PostgreSQL refuses to run as root, so as root the server runs as an unprivileged user
# (created when missing). It listens on 127.0.0.1 only, with trust auth for that user.
set -euo pipefail
action=${1:?start|stop}
dir=${2:?data directory}
pg_user=ledgerci
port=${PGPORT_FOR_TESTS:-55432}

find_bin() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local candidate
  candidate=$(ls -d /usr/lib/postgresql/*/bin/"$name" 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$candidate" ]; then echo "$candidate"; return; fi
  return 1
}

as_pg() {
  if [ "$(id -u)" = "0" ]; then runuser -u "$pg_user" -- "$@"; else "$@"; fi
}

case "$action" in
  start)
    if ! find_bin initdb >/dev/null; then
      echo "installing postgresql (initdb not found)" >&2
      apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    initdb=$(find_bin initdb); pg_ctl=$(find_bin pg_ctl)
    if [ "$(id -u)" = "0" ]; then
      id "$pg_user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
      pg_user_name=$pg_user
    else
      pg_user_name=$(id -un)
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    [ "$(id -u)" = "0" ] && chown "$pg_user" "$dir"
    as_pg "$initdb" -D "$dir/data" -U "$pg_user_name" --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >&2 \
      || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://${pg_user_name}@127.0.0.1:${port}/postgres"
    ;;
  stop)
    pg_ctl=$(find_bin pg_ctl) || exit 0
    [ -d "$dir/data" ] || exit 0
    as_pg "$pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >&2 || true
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
