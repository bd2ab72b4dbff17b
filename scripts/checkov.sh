#!/usr/bin/env bash
# Scans template.yaml with checkov, a static checker of cloud templates that knows nothing of this
# service, and fails on any failed check. A check that does not apply to a resource is skipped on
# that resource in the template (`Metadata: checkov: skip:`), with the reason, so that the reason
# is reviewed with the resource and a new resource is checked in full. Part of CI (.ci/run).
#
# The scanner and its dependencies are pinned in scripts/checkov-tools.txt, in a virtualenv of
# their own. It runs offline: no guidelines or policies from the vendor's platform, no update
# check. Checkov reads the template as deployed with its parameters' defaults: a resource whose
# condition is false there (the managed-instance twins, Kafka) is not scanned, so their skips
# mirror those of their counterparts. Anything after the options goes to checkov, e.g.
# `--check CKV_AWS_31`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[checkov] %s\n' "$*" >&2; }

. scripts/lib.sh
VENV=$TOOLS/checkov-venv
pinned_venv "$VENV" scripts/checkov-tools.txt
export CKV_SKIP_PACKAGE_UPDATE_CHECK=true

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$VENV/bin/checkov" --file template.yaml --framework cloudformation --skip-download \
  --quiet --compact "$@" | tee "$out" || status=$?
# A template checkov cannot parse passes with no check run: that is a failure here.
if grep -q 'Parsing errors: [1-9]' "$out" || ! grep -q 'Passed checks: ' "$out" ||
  grep -q 'Passed checks: 0, Failed checks: 0, Skipped checks: 0' "$out"; then
  log "template.yaml was not scanned (parsing error, or no check ran)"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  log "failed checks: fix them, or skip them on the resource with the reason"
  exit "$status"
fi
log "no failed check"
