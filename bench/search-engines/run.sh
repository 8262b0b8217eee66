#!/usr/bin/env bash
# Reproduces every figure of README.md. Usage: bench/search-engines/run.sh [workdir=/tmp/se]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MAIN=$(cd "$HERE/../.." && pwd)
W=${1:-/tmp/se}
mkdir -p "$W"
export CARGO_TARGET_DIR=$MAIN/target/search-engines
(cd "$HERE" && cargo build --release)
B=$CARGO_TARGET_DIR/release/search-engines-bench
[ -x "$MAIN/target/release/wmreplay" ] || (cd "$MAIN" && cargo build --release)

# The machine is shared: wait (up to 30 s) until no compiler is running; flag runs that overlapped one.
busy() { for p in rustc cc1 cc1plus cargo ld; do pgrep -x $p >/dev/null && return 0; done; return 1; }
quiet() { for _ in $(seq 30); do busy || return 0; sleep 1; done; echo "WARN: not quiet"; }
timed() { quiet; echo "+ $*"; /usr/bin/time -v "$@" 2>"$W/time.txt" | grep -v rayon_threads;
          grep -E "Maximum resident|Elapsed|Percent of CPU" "$W/time.txt" | sed 's/^\t/  /'; busy && echo "  WARN: a compiler was running at the end"; true; }

cd "$W"
[ -f wm-1g.log ] || "$MAIN/target/release/wmreplay" gen wm-1g.log --size 1GiB
$B plant wm-1g.log wm-1g-planted.log planted.tsv
$B common wm-1g-planted.log common.tsv 200
head -c $((64<<20)) wm-1g-planted.log | sed '$d' > wm-64m.log
$B tf-check
$B check-tokenizer wm-64m.log
quiet; $B tokenize wm-1g-planted.log

for log in wm-64m.log wm-1g-planted.log; do
  for i in 1 2 3; do timed $B build-tantivy $log t.idx 1024 2; done
  for v in "full 0" "column 0" "full 268435456"; do
    set -- $v
    for i in 1 2 3; do timed $B build-fts5 $log f-$1-$2.db $1 $2; done
  done
done
timed $B build-fts5 wm-1g-planted.log f-full-opt.db full 268435456 1

quiet; $B query tantivy t.idx wm-1g-planted.log planted.tsv common.tsv 60
quiet; $B query fts5 f-full-0.db wm-1g-planted.log planted.tsv common.tsv 40
quiet; $B query fts5 f-column-0.db wm-1g-planted.log planted.tsv common.tsv 20
quiet; $B append-tantivy t.idx wm-1g-planted.log 100
quiet; $B append-fts5 f-full-0.db wm-1g-planted.log 100 NORMAL
quiet; $B append-fts5 f-full-0.db wm-1g-planted.log 100 FULL
quiet; $B append-fts5 f-column-0.db wm-1g-planted.log 100 NORMAL
