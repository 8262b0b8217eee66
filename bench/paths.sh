#!/usr/bin/env bash
# The paths users take, each against its floor, interleaved, median of RUNS:
#
#   - `serve` start-up: until GET /healthz answers (at once), and until GET
#     /v1/stats answers (the live state's first replay; a request sent
#     earlier waits for it), with its peak and settled RSS, against `respond`
#     on the same log;
#   - `respond` into a pipe read by `cat > /dev/null`, against `respond` into
#     /dev/null;
#   - `respond` end to end against `wc -l` on the same log;
#   - with a summary covering all but the log's last ~10 MiB: `serve
#     --summaries` until its first /v1/context answer, against `respond
#     --summaries`, and the server's anonymous memory then (RssAnon: what it
#     holds apart from the mapped log);
#   - with a 100k-token window (`--max-tokens-window 100000`): `serve` until
#     its first /v1/context answer, against `respond` with the same window,
#     and the server's peak RSS then.
#
#   bash bench/paths.sh [SIZE] [RUNS]      (default 1GiB, 5)
#
# BIN=path/to/wmreplay measures another build (a before/after comparison).
# The log is generated once into target/bench-data (`wmreplay gen --seed 1`).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:-1GiB}
RUNS=${2:-5}
PORT=${PORT:-8797}
if [ -z "${BIN:-}" ]; then
  cargo build --profile dist --quiet
  BIN=$PWD/target/dist/wmreplay
fi
mkdir -p target/bench-data
LOG=target/bench-data/paths-$SIZE-seed1.log
[ -s "$LOG" ] || "$BIN" gen "$LOG" --size "$SIZE" --seed 1
# The same log with a summary covering all but its last ~10 MiB.
SUMLOG=target/bench-data/paths-$SIZE-seed1-summary.log
if [ ! -s "$SUMLOG" ]; then
  cp "$LOG" "$SUMLOG"
  python3 - "$SUMLOG" <<'PY'
import json, os, sys
path = sys.argv[1]
size = os.path.getsize(path)
with open(path, 'rb') as f:
    f.seek(max(0, size - (10 << 20) - (1 << 20)))
    tail = f.read()
base = size - len(tail)
cut = size - (10 << 20)
# The last record starting before the cut: the summary covers up to it.
lines, at, last, newest = tail.split(b'\n'), base, None, 0.0
for line in lines:
    if line.strip():
        try:
            v = json.loads(line)
            newest = max(newest, float(v.get('ts_ms', 0)))
            if at < cut:
                last = (float(v['ts_ms']), at)
        except Exception:
            pass
    at += len(line) + 1
summary = {"type": "wm_summary", "ts_ms": newest + 1,
           "covers": {"ts_ms": last[0], "offset": last[1]},
           "text": "What happened before: " + "the agent worked on the task. " * 200}
with open(path, 'ab') as f:
    f.write(json.dumps(summary).encode() + b'\n')
PY
fi
SERVER=
trap '[ -n "$SERVER" ] && kill $SERVER 2>/dev/null; true' EXIT

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
median() { python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }

# `serve` on a log with the given flags until its first /v1/context answer:
# FIRST=(seconds, peak RSS, RssAnon then).
first_answer() {
  local log=$1 t0 t1
  shift
  t0=$(now)
  RUST_LOG=warn "$BIN" serve --log "$log" "$@" --addr "127.0.0.1:$PORT" --no-fsync 2>/dev/null &
  SERVER=$!
  until curl -sf -o /dev/null -d '{"text":"hi"}' "http://127.0.0.1:$PORT/v1/context"; do sleep 0.005; done
  t1=$(now)
  FIRST=("$(secs "$t0" "$t1")" "$(awk '/VmHWM/ {print $2 * 1024}' /proc/$SERVER/status)"
    "$(awk '/RssAnon/ {print $2 * 1024}' /proc/$SERVER/status)")
  kill $SERVER; wait $SERVER 2>/dev/null || true; SERVER=
}

health=() startup=() peak=() settled=() respond=() pipe=() null100=() wc=() sfirst=() srespond=() sanon=() wfirst=() wrespond=() wpeak=()
for _ in $(seq "$RUNS"); do
  t0=$(now)
  RUST_LOG=warn "$BIN" serve --log "$LOG" --addr "127.0.0.1:$PORT" --no-fsync 2>/dev/null &
  SERVER=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; do sleep 0.002; done
  th=$(now)
  health+=("$(secs "$t0" "$th")")
  until curl -sf -o /dev/null "http://127.0.0.1:$PORT/v1/stats"; do sleep 0.005; done
  t1=$(now)
  startup+=("$(secs "$t0" "$t1")")
  peak+=("$(awk '/VmHWM/ {print $2 * 1024}' /proc/$SERVER/status)")
  settled+=("$(awk '/VmRSS/ {print $2 * 1024}' /proc/$SERVER/status)")
  kill $SERVER; wait $SERVER 2>/dev/null || true; SERVER=
  t0=$(now); "$BIN" respond "$LOG" --text hi > /dev/null; t1=$(now)
  respond+=("$(secs "$t0" "$t1")")
  t0=$(now); "$BIN" respond "$LOG" --text hi | cat > /dev/null; t1=$(now)
  pipe+=("$(secs "$t0" "$t1")")
  t0=$(now); wc -l "$LOG" > /dev/null; t1=$(now)
  wc+=("$(secs "$t0" "$t1")")
  first_answer "$SUMLOG" --summaries
  sfirst+=("${FIRST[0]}") sanon+=("${FIRST[2]}")
  t0=$(now); "$BIN" respond "$SUMLOG" --summaries --text hi > /dev/null; t1=$(now)
  srespond+=("$(secs "$t0" "$t1")")
  first_answer "$LOG" --max-tokens-window 100000
  wfirst+=("${FIRST[0]}") wpeak+=("${FIRST[1]}")
  t0=$(now); "$BIN" respond "$LOG" --max-tokens 100000 --text hi > /dev/null; t1=$(now)
  wrespond+=("$(secs "$t0" "$t1")")
done
LEN=$(stat -L -c %s "$LOG")
S=$(median "${startup[@]}"); R=$(median "${respond[@]}"); P=$(median "${pipe[@]}"); W=$(median "${wc[@]}")
python3 - "$LEN" "$S" "$R" "$P" "$W" "$(median "${peak[@]}")" "$(median "${settled[@]}")" \
  "$(median "${sfirst[@]}")" "$(median "${srespond[@]}")" "$(median "${sanon[@]}")" \
  "$(median "${health[@]}")" "$(median "${wfirst[@]}")" "$(median "${wrespond[@]}")" \
  "$(median "${wpeak[@]}")" <<'PY'
import sys
n, s, r, p, w, peak, settled, sf, sr, anon, h, wf, wr, wp = map(float, sys.argv[1:])
print(f"log: {n / 2**20:.0f} MiB")
print(f"serve /healthz   {h * 1000:.0f} ms after start")
print(f"serve start-up   {s:.3f} s   = {s / r:.2f}x respond (its first /v1/stats answer)")
print(f"serve RSS        peak {peak / n:.2f}x the log, settled {settled / n:.2f}x")
print(f"respond          {r:.3f} s   = {r / w:.2f}x wc -l ({w:.3f} s)")
print(f"respond | cat    {p:.3f} s   = {p / r:.2f}x respond > /dev/null")
print(f"--summaries, all but the last 10 MiB covered:")
print(f"  serve first answer {sf:.3f} s   = {sf / sr:.2f}x respond --summaries ({sr:.3f} s)")
print(f"  serve anonymous memory {anon / 2**20:.0f} MiB (target: 100 MiB + 2 x 10 MiB)")
print(f"--max-tokens-window 100000:")
print(f"  serve first answer {wf:.3f} s   = {wf / wr:.2f}x respond with the window ({wr:.3f} s)")
print(f"  serve peak RSS {wp / n:.2f}x the log")
PY
