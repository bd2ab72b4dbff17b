# Sourced by the wrk runners (run from the repository's root): what every one of them does
# before it measures, and how it starts a server. Each runner sets `DB`, its own database and
# Redis key prefix, before calling these.
. scripts/lib.sh

# wrk's settings, from the environment or these: every runner measures alike.
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}

need_wrk() {
  command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }
}

# wrk on the path, the local services up, the release server built, and the runner's database
# dropped (the server creates and migrates it anew).
prepare() {
  need_wrk
  ./scripts/services.sh >/dev/null
  cargo build --release --locked --bin flashgate >/dev/null
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null
  trap 'kill ${servers:-} 2>/dev/null; wait ${servers:-} 2>/dev/null' EXIT
}

# serve PORT [SETTING=VALUE...]: a release server on PORT, in the background, with its log in
# /tmp/$DB.log and no sweeper; returns once it answers. The servers stop when the runner exits.
# `FLASHGATE_BIN` runs another build than this tree's (builds.sh).
serve() {
  env DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB REDIS_KEY_PREFIX=$DB: PORT=$1 \
    SWEEP_INTERVAL_SECONDS=0 RUST_LOG=warn "${@:2}" \
    "${FLASHGATE_BIN:-$(target_dir)/release/flashgate}" serve \
    >>/tmp/$DB.log 2>&1 &
  servers="${servers:-} $!"
  for _ in $(seq 100); do curl -sf http://127.0.0.1:$1/health >/dev/null && return; sleep 0.2; done
}

ticks() { # PROCESS_NAME: CPU ticks (1/100 s) every process of that name has used so far
  local t=0 pid
  for pid in $(pgrep -x "$1"); do
    t=$((t + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}

landed() { # DATABASE CODE: the uses of a voucher Postgres holds. In mode B the voucher's view
  # counts the uses whose events are still on their way too, so a drain is read here instead.
  psql -h 127.0.0.1 -U postgres -d "$1" -tAc \
    "SELECT COALESCE(sum(used), 0) FROM voucher_slot WHERE voucher_code = upper('$2')"
}
