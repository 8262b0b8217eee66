#!/usr/bin/env bash
# Load run for `wmreplay serve --log-dir`: 100 logs in one server, oha sending
# POST /v1/logs/{id}/records and POST /v1/logs/{id}/context to random logs at
# once (ids drawn per request), for DURATION (default 20s) with CONNECTIONS
# connections each (default 16). Each log starts as a generated log of SIZE
# (default 256KiB). Records are fsynced as in production unless NO_FSYNC=1.
#
#   bash bench/load_logs.sh [SIZE] [DURATION] [CONNECTIONS]
#
# BIN=path runs another build (for a before/after); the default builds this
# tree. Needs oha (cargo install oha --locked). Prints oha's summary for each
# stream (requests/s, latency percentiles, status codes: all should be 200)
# and the server's /v1/logs totals at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-256KiB}
DURATION=${2:-20s}
CONNS=${3:-16}
PORT=${PORT:-8789}
command -v oha >/dev/null || { echo "oha is not installed (cargo install oha --locked)" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=./target/release/wmreplay
fi
DIR=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; rm -rf "$DIR"' EXIT
$BIN gen "$DIR/agent-00.log" --size "$SIZE" --seed 1
for i in $(seq -w 1 99); do cp "$DIR/agent-00.log" "$DIR/agent-$i.log"; done
FSYNC=()
[ "${NO_FSYNC:-0}" = 1 ] && FSYNC=(--no-fsync)
RUST_LOG=warn $BIN serve --log-dir "$DIR" --addr "127.0.0.1:$PORT" "${FSYNC[@]}" &
SERVER=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
URL="http://127.0.0.1:$PORT/v1/logs/agent-[0-9][0-9]"
oha --no-tui -z "$DURATION" -c "$CONNS" -m POST -H 'content-type: application/json' \
  -d '[{"type":"wm_event","source":"load","note":"appended during the load run"},{"type":"wm_insight","insight":"x"}]' \
  --rand-regex-url "$URL/records" > "$DIR/records.txt" &
WRITES=$!
oha --no-tui -z "$DURATION" -c "$CONNS" -m POST -H 'content-type: application/json' \
  -d '{"text":"what next?"}' \
  --rand-regex-url "$URL/context" > "$DIR/context.txt"
wait $WRITES
echo "== POST /v1/logs/{id}/records (2 records a request)"
cat "$DIR/records.txt"
echo
echo "== POST /v1/logs/{id}/context"
cat "$DIR/context.txt"
echo
echo "server /v1/logs after the run:"
curl -s "http://127.0.0.1:$PORT/v1/logs" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({k: d[k] for k in ("live_logs","live_bytes","max_live_bytes")}), "logs:", len(d["logs"]))'
