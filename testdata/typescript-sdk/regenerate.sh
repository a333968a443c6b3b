#!/usr/bin/env bash
# regenerate.sh writes session.db and extras.db again with the real TypeScript
# SDK (generate.ts), then puts them here. What it needs:
#   - bun (1.4.4 wrote the files in this folder);
#   - the TypeScript SDK: a checkout of github.com/DrejT/alineo (575b132 wrote
#     them: @alineo-labs/sandbox 0.2.0, @alineo-labs/sqlite 0.1.3) with its
#     workspace installed and built (bun install && bun run build: the
#     packages export their dist/), in ALINEO_TS_SDK;
#   - an OpenSandbox server at OPEN_SANDBOX_URL (default: this module's
#     sandboxd, started here as root on 127.0.0.1:18080) that can create
#     sandboxes of FIXTURE_IMAGE (default ubuntu:22.04: a registry it reaches,
#     or `sandboxd image import`).
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

# The script runs from a folder inside the SDK's workspace so that bun
# resolves @alineo-labs/* to the checkout's packages.
gen="$ALINEO_TS_SDK/tests/alineo-go-fixtures"
mkdir -p "$gen" "$work/out"
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
