#!/usr/bin/env bash
# Checks that Flashgate deploys: lints and validates template.yaml, builds the SAM application,
# and runs the Lambda functions under `cargo lambda watch` against local Postgres and Redis
# (scripts/smoke_watch.py). Part of CI (.ci/run).
#
# The deploy tools (SAM CLI, cfn-lint, cargo-lambda with its zig) come from PyPI into their own
# virtualenv. `sam build` builds x86_64 here: the template defaults to arm64 (Graviton), but
# machines without the aarch64 Rust standard library cannot build it (`rustup target add
# aarch64-unknown-linux-gnu` on yours, then `sam build` as is).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[deploy] %s\n' "$*" >&2; }

. scripts/lib.sh
VENV=$TOOLS/deploy-venv
pinned_venv "$VENV" scripts/deploy-tools.txt
export PATH="$VENV/bin:$PATH"
# No telemetry, no credentials and a dummy region: nothing here talks to AWS.
export SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local

log "cfn-lint"
cfn-lint --include-checks I -- template.yaml
log "sam validate --lint"
sam validate --lint

# Built as mode B on Kafka, the deployment with the most parts (MSK cluster, event source
# mapping, on-failure queue); the functions are the same binaries in every mode.
log "sam build (x86_64, ConsistencyMode=B, EventTransport=kafka)"
sam build --parameter-overrides Architecture=x86_64 ConsistencyMode=B EventTransport=kafka \
  --build-dir .flashgate/sam-build
for fn in Reserve Confirm Release Admin Live Consumer Sweeper Migrate; do
  bootstrap=".flashgate/sam-build/${fn}Function/bootstrap"
  [ -x "$bootstrap" ] || { log "missing $bootstrap"; exit 1; }
done
log "built 8 functions into .flashgate/sam-build"

./scripts/services.sh
log "cargo lambda watch smoke test"
python3 scripts/smoke_watch.py
