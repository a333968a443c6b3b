#!/usr/bin/env bash
# make test-race-stress: `make test` under -race RUNS times in a row (default 5)
# while two CPU-bound processes run beside it (issue 18: the tests must not
# flake on a machine that is busy). Stops at the first failing run and prints
# its log's tail; every run's log is kept in LOGDIR. -count=1: a run must not
# be answered from the test cache.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
runs=${RUNS:-5}
logdir=${LOGDIR:-/tmp/alineo-race-stress}
mkdir -p "$logdir"

burn() { while :; do :; done; }
burn & b1=$!
burn & b2=$!
trap 'kill "$b1" "$b2" 2>/dev/null || true' EXIT
echo "CPU burners: pids $b1 $b2 ($(nproc) cores); logs in $logdir"

for i in $(seq 1 "$runs"); do
  log="$logdir/run-$i.log"
  start=$(date +%s)
  echo "=== run $i/$runs: make test TESTFLAGS='-race -count=1' ($(date -u +%H:%M:%S) UTC)"
  if ! make test TESTFLAGS="-race -count=1 ${TESTFLAGS:-}" >"$log" 2>&1; then
    echo "run $i FAILED after $(( $(date +%s) - start ))s; failing tests:"
    grep -E '^(--- FAIL|FAIL|panic:)' "$log" | head -40 || true
    echo "--- last lines of $log:"
    tail -40 "$log"
    exit 1
  fi
  echo "run $i passed in $(( $(date +%s) - start ))s"
done
echo "PASS: $runs runs of make test under -race beside two CPU-bound processes"
