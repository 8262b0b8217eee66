#!/usr/bin/env bash
# The all-or-nothing batch test with many rounds: concurrent clients post
# record batches to `serve --log-dir` while it is killed with SIGKILL and
# restarted, ROUNDS times (default 50); afterwards every batch is whole or
# absent, none doubled, every acknowledged one present, no torn line.
#   bash bench/crash_batches.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
WMREPLAY_CRASH_ROUNDS="${1:-50}" cargo test --release --test crash_batches -- --nocapture
