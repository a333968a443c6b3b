#!/usr/bin/env bash
# regenerate.sh writes session.db and extras.db again with the real TypeScript
# SDK (generate.ts), then puts them here; `regenerate.sh workflow` writes
# workflow.db instead, with its workflow layer (workflow.ts). What it needs:
#   - bun (1.4.4 wrote the files in this folder);
#   - the TypeScript SDK: a checkout of github.com/DrejT/alineo (575b132 wrote
#     them: @alineo-labs/sandbox 0.2.0, @alineo-labs/sqlite 0.1.3; they are
#     not on npm) with its workspace installed and the packages built, in
#     ALINEO_TS_SDK. The packages export their dist/; this builds them:
#       bun install   # 3 model-provider packages may fail to download: unused
#       for p in core opensandbox sdks/typescript adapters/sqlite workflow; do
#         (cd packages/$p && bun --bun x tsdown --config-loader native); done
#     (bun run build wants tsdown's optional "unrun" config loader);
#   - an OpenSandbox server at OPEN_SANDBOX_URL (default: this module's
#     sandboxd, started here as root on 127.0.0.1:18080) that can create
#     sandboxes of FIXTURE_IMAGE (default ubuntu:22.04: a registry it reaches,
#     or `sandboxd image import`; FIXTURE_IMAGE=host, the host's own system,
#     needs no registry).
# Last run on 2026-12-05 (bun 1.4.4, 575b132, FIXTURE_IMAGE=host): session.db
# came out entry for entry like the one here (ids and times aside); extras.db
# differed only where timing decides (the order of two concurrent execs'
# rows, how a PTY's output is chunked) and in its random names.
# workflow.db was last written on 2026-12-05 (bun 1.4.4, 575b132,
# FIXTURE_IMAGE=host, @alineo-labs/workflow 0.1.1).
# The sandbox ids, run ids, snapshot ids, uuids and timestamps change with
# every run: update the expectations that name them (adapters/adaptertest/
# typescript.go and typescript_test.go at the module's root) and the facts in
# ../README.md, then run `go test ./... -run TypeScript`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
: "${ALINEO_TS_SDK:?set ALINEO_TS_SDK to a checkout of github.com/DrejT/alineo, installed with bun install}"
command -v bun >/dev/null || { echo "bun not found in PATH" >&2; exit 1; }

work="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${OPEN_SANDBOX_URL:-}" ]; then
  (cd "$root" && CGO_ENABLED=0 go build -o "$work/sandboxd" ./cmd/sandboxd)
  "$work/sandboxd" --listen 127.0.0.1:18080 --data "$work/data" >"$work/sandboxd.log" 2>&1 &
  pid=$!
  export OPEN_SANDBOX_URL=http://127.0.0.1:18080
  for _ in $(seq 100); do
    curl -fsS "$OPEN_SANDBOX_URL/health" >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/sandboxd.log" >&2; exit 1; }
    sleep 0.1
  done
fi

# The script runs from a folder inside the workspace of the SDK's
# integration tests, which depends on @alineo-labs/sandbox and
# @alineo-labs/sqlite: bun (isolated installs) links them into that
# workspace's node_modules, not the root's.
# (It also depends on @alineo-labs/workflow.)
gen="$ALINEO_TS_SDK/tests/integration/alineo-go-fixtures"
mkdir -p "$gen" "$work/out"
if [ "${1:-}" = workflow ]; then
  cp "$here/workflow.ts" "$gen/workflow.ts"
  (cd "$gen" && bun workflow.ts "$work/out")
  rm -rf "$gen"
  if [ -s "$work/out/workflow.db-wal" ]; then sqlite3 "$work/out/workflow.db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null; fi
  install -m 0644 "$work/out/workflow.db" "$here/"
  echo "wrote $here/workflow.db"
  exit 0
fi
cp "$here/generate.ts" "$gen/generate.ts"
(cd "$gen" && bun generate.ts "$work/out")
rm -rf "$gen"
# The SDK's SQLite adapter keeps its files in WAL mode and checkpoints them
# when it closes (the client's beforeExit); fold in a WAL left behind anyway.
for f in session extras; do
  if [ -s "$work/out/$f.db-wal" ]; then sqlite3 "$work/out/$f.db" 'PRAGMA wal_checkpoint(TRUNCATE);' >/dev/null; fi
done
install -m 0644 "$work/out/session.db" "$work/out/extras.db" "$here/"
echo "wrote $here/session.db and $here/extras.db"
