#!/usr/bin/env bash
# Starts Flashgate locally on http://127.0.0.1:${PORT:-3000}: makes sure Postgres and Redis
# run, then `flashgate serve` (which creates the database and applies migrations first).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/services.sh
exec cargo run --release --locked --bin flashgate -- serve
