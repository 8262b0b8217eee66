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
#
# JETSTREAM=1 keeps the logs in NATS JetStream instead: a three-node cluster
# on loopback (nats-server from `bash .ci/nats-server.sh`), a stream with 3
# replicas, the server built with `--features jetstream`; each log is seeded
# through POST /v1/logs/{id}/records with the same generated lines first.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-256KiB}
DURATION=${2:-20s}
CONNS=${3:-16}
PORT=${PORT:-8789}
command -v oha >/dev/null || { echo "oha is not installed (cargo install oha --locked)" >&2; exit 1; }
JS=${JETSTREAM:-0}
if [ -z "${BIN:-}" ]; then
  if [ "$JS" = 1 ]; then
    cargo build --profile dist --quiet --features jetstream
  else
    cargo build --profile dist --quiet
  fi
  BIN=./target/dist/wmreplay
fi
DIR=$(mktemp -d)
NATS_PIDS=()
SERVER=""
trap 'kill $SERVER "${NATS_PIDS[@]}" 2>/dev/null || true; rm -rf "$DIR"' EXIT
$BIN gen "$DIR/seed.log" --size "$SIZE" --seed 1
FSYNC=()
[ "${NO_FSYNC:-0}" = 1 ] && FSYNC=(--no-fsync)
STORE=()
if [ "$JS" = 1 ]; then
  bash .ci/nats-server.sh >/dev/null
  NATS=./target/nats-venv/bin/nats-server
  URLS=""
  for n in 0 1 2; do
    P=$((4300 + n)); R=$((6300 + n))
    ROUTES=""
    for m in 0 1 2; do
      if [ $m != $n ]; then ROUTES="$ROUTES,nats://127.0.0.1:$((6300 + m))"; fi
    done
    $NATS -js -a 127.0.0.1 -p $P -sd "$DIR/nats-$n" -n "n$n" --cluster_name load \
      --cluster "nats://127.0.0.1:$R" --routes "${ROUTES#,}" >/dev/null 2>&1 &
    NATS_PIDS+=($!)
    URLS="$URLS,nats://127.0.0.1:$P"
  done
  mkdir -p "$DIR/cache"
  STORE=(--jetstream "${URLS#,}" --replicas 3)
  LOGS="$DIR/cache"
else
  for i in $(seq -w 0 99); do cp "$DIR/seed.log" "$DIR/agent-$i.log"; done
  LOGS="$DIR"
fi
RUST_LOG=warn $BIN serve --log-dir "$LOGS" --addr "127.0.0.1:$PORT" "${FSYNC[@]}" "${STORE[@]}" &
SERVER=$!
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
if [ "$JS" = 1 ]; then
  for i in $(seq -w 0 99); do
    curl -sf -o /dev/null -H 'content-type: application/x-ndjson' --data-binary "@$DIR/seed.log" \
      "http://127.0.0.1:$PORT/v1/logs/agent-$i/records"
  done
fi
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
