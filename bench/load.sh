#!/usr/bin/env bash
# Load run for `wmreplay serve`: wrk against POST /v1/context on a generated
# log of SIZE (default 10MiB), while another process appends a record to the
# log every INTERVAL seconds (default 0.01), so most requests see new bytes.
#
#   bash bench/load.sh [SIZE] [DURATION] [CONNECTIONS]
#
# Needs wrk (apt-get install wrk). Prints wrk's report (requests/s, latency
# percentiles, errors) and the server's /v1/stats at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-10MiB}
DURATION=${2:-20s}
CONNS=${3:-16}
INTERVAL=${INTERVAL:-0.01}
PORT=${PORT:-8788}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
cargo build --profile dist --quiet
BIN=./target/dist/wmreplay
DIR=$(mktemp -d)
trap 'kill $SERVER $APPENDER 2>/dev/null || true; rm -rf "$DIR"' EXIT
LOG="$DIR/wm.log"
$BIN gen "$LOG" --size "$SIZE" --seed 1
RUST_LOG=warn $BIN serve --log "$LOG" --addr "127.0.0.1:$PORT" --no-fsync &
SERVER=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
python3 - "$LOG" "$INTERVAL" <<'PY' &
import sys, time, json
path, interval = sys.argv[1], float(sys.argv[2])
ts = 4_000_000_000_000
i = 0
with open(path, "ab", buffering=0) as f:
    while True:
        i += 1
        ts += 1
        line = json.dumps({"type": "wm_event", "ts_ms": ts, "n": i, "note": "appended during the load run"})
        f.write((line + "\n").encode())
        time.sleep(interval)
PY
APPENDER=$!
wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 10s --latency -s bench/context.lua "http://127.0.0.1:$PORT/v1/context"
kill $APPENDER
echo
echo "server /v1/stats after the run:"
curl -s "http://127.0.0.1:$PORT/v1/stats" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps({"log_bytes": d["log_bytes"], "live": d["live"], "parsed_entries": d["stats"]["parsed_entries"]}))'
