#!/usr/bin/env bash
# Make sure the service tests find PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth) and
# Redis on 127.0.0.1:6379. Running ones are used as they are; otherwise throwaway ones are
# started from the installed binaries (installing the Debian packages first when missing).
set -euo pipefail

PG_PORT=${TEST_PG_PORT:-5432}
REDIS_PORT=${TEST_REDIS_PORT:-6379}
STATE_DIR=${TEST_SERVICES_DIR:-/tmp/onnx-reducer-test-services}

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_packages() {
    echo "installing $* (apt-get)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

pg_bin() {
    local found
    found=$(command -v "$1" 2>/dev/null || ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -1)
    echo "$found"
}

start_postgres() {
    if [ -z "$(pg_bin initdb)" ]; then install_packages postgresql; fi
    local initdb pg_ctl data runner=()
    initdb=$(pg_bin initdb)
    pg_ctl=$(pg_bin pg_ctl)
    data="$STATE_DIR/pg"
    mkdir -p "$STATE_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
        chown postgres "$STATE_DIR"
        runner=(runuser -u postgres --)
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        "${runner[@]}" "$initdb" -U postgres --auth=trust -D "$data" >/dev/null
    fi
    "${runner[@]}" "$pg_ctl" -D "$data" -l "$STATE_DIR/pg.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $STATE_DIR" start >/dev/null
    echo "started a throwaway PostgreSQL in $data"
}

start_redis() {
    command -v redis-server >/dev/null 2>&1 || install_packages redis-server
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
        --logfile "$STATE_DIR/redis.log" --dir "${STATE_DIR}"
    echo "started a throwaway Redis on port $REDIS_PORT"
}

mkdir -p "$STATE_DIR"
listening "$PG_PORT" && echo "PostgreSQL is running on 127.0.0.1:$PG_PORT" || start_postgres
listening "$REDIS_PORT" && echo "Redis is running on 127.0.0.1:$REDIS_PORT" || start_redis
for _ in $(seq 1 50); do
    listening "$PG_PORT" && listening "$REDIS_PORT" && exit 0
    sleep 0.2
done
echo "PostgreSQL or Redis did not come up (see $STATE_DIR)" >&2
exit 1
