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

# Built as mode B on Kafka on managed instances, the deployment with the most parts (MSK
# cluster, event source mapping, on-failure queue, capacity provider); the functions are the
# same binaries in every mode. `sam build` builds every function whatever the conditions, so
# the on-demand functions and their managed-instance twins both come out of this one build.
log "sam build (x86_64, ConsistencyMode=B, EventTransport=kafka, ExecutionModel=managed-instances)"
sam build --parameter-overrides Architecture=x86_64 ConsistencyMode=B EventTransport=kafka \
  ExecutionModel=managed-instances --build-dir .flashgate/sam-build
# Every function of the built template names a directory with its bootstrap (twins share one,
# `<function>-Shared`).
code_uris=$(sed -n 's/^ *CodeUri: *//p' .flashgate/sam-build/template.yaml)
for dir in $code_uris; do
  [ -x ".flashgate/sam-build/$dir/bootstrap" ] || { log "missing $dir/bootstrap"; exit 1; }
done
functions=$(echo "$code_uris" | wc -l)
[ "$functions" -eq 11 ] || { log "built $functions functions, expected 11"; exit 1; }
log "built 11 functions (8 binaries) into .flashgate/sam-build"

./scripts/services.sh
log "cargo lambda watch smoke test"
python3 scripts/smoke_watch.py
