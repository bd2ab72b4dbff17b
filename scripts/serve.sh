#!/usr/bin/env bash
# Starts Flashgate locally on http://127.0.0.1:${PORT:-3000}: makes sure Postgres and Redis
# run, then `flashgate serve` (which creates the database and applies migrations first).
#
#   ./scripts/serve.sh          # consistency mode A
#   ./scripts/serve.sh kafka    # mode B on a local Kafka broker (started for you, 127.0.0.1:9092)
#   ./scripts/serve.sh sqs      # mode B on a local SQS (the moto server, 127.0.0.1:9324)
#
# In mode B the same process consumes the events (a consumer-group member on Kafka, a poller on
# SQS); the topics or the queue are created at start. Settings already in the environment win.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") ./scripts/services.sh ;;
  kafka)
    ./scripts/services.sh kafka
    export KAFKA_BROKERS=${KAFKA_BROKERS:-127.0.0.1:9092}
    # The local broker misreports the end offset of a multi-record batch, which the warm-up
    # reads: one record per batch (see docs/BENCHMARKS.md, "Kafka locally").
    export KAFKA_BATCH_MESSAGES=${KAFKA_BATCH_MESSAGES:-1}
    ;;
  sqs)
    ./scripts/services.sh sqs
    export EVENTS_QUEUE_URL=${EVENTS_QUEUE_URL:-http://127.0.0.1:9324/123456789012/flashgate-events}
    export SQS_ENDPOINT_URL=${SQS_ENDPOINT_URL:-http://127.0.0.1:9324}
    ;;
  *) echo "usage: $0 [kafka|sqs]" >&2; exit 2 ;;
esac
exec cargo run --release --locked --bin flashgate -- serve
