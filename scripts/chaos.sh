#!/usr/bin/env bash
# Chaos: a flash sale under load while the server is SIGKILLed, Redis is killed and started
# again empty, and Postgres is restarted; in mode A, and in mode B on SQS and on Kafka. Then the checks
# (loadtest/src/bin/chaos.rs): the largest usedCount seen stays within the limit, every order
# answered 201 can be confirmed, the voucher converges after TTL + grace, and the gate grants
# exactly the uses left. One line per check and a summary per mode; exits non-zero on a failure.
#
#   ./scripts/chaos.sh            # 20 s of load per mode
#   CHAOS_SECONDS=10 ./scripts/chaos.sh
#
# It breaks only what it starts: a Postgres cluster in a scratch directory, a Redis on a free
# port, and the server. Mode B needs the local SQS endpoint and Kafka broker, started by
# services.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[chaos] %s\n' "$*" >&2; }

./scripts/services.sh sqs kafka >/dev/null
cargo build --locked --bin flashgate --bin chaos
. scripts/lib.sh
bin=$(target_dir)/debug
seconds=${CHAOS_SECONDS:-20}
status=0
for mode in A B B-kafka; do
  extra=()
  [ "$mode" = B ] && extra=(--sqs-endpoint http://127.0.0.1:9324)
  [ "$mode" = B-kafka ] && extra=(--kafka-brokers 127.0.0.1:9092)
  log "mode $mode, $seconds s"
  "$bin/chaos" --server-bin "$bin/flashgate" --duration "$seconds" "${extra[@]}" || status=1
done
[ "$status" = 0 ] && log "every check passed" || log "a check failed"
exit "$status"
