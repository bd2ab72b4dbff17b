#!/usr/bin/env bash
# Runs the whole test suite: starts (or installs) the services it needs, then `cargo test`, and
# the protocol's model checker (model/) in release mode.
# Load runs are not part of it: see docs/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/services.sh cluster sqs kafka fauxqs browser

# Each test creates its own database named fg_test_*; drop those left by earlier runs.
if command -v psql >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'fg\_test\_%'" 2>/dev/null |
    while read -r db; do
      psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1 || true
    done
fi

# The concurrency tests open a few thousand sockets at once.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --exclude flashgate-model --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The model checker explores millions of states: optimised, it takes about two minutes.
cargo test --release --locked -p flashgate-model --no-fail-fast "$@" 2>&1 | tee -a "$log" || status=$?
# One closing line for the whole workspace (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "summary: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
