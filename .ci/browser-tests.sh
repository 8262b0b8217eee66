#!/usr/bin/env bash
# A real browser against `wmreplay serve` (tests/browser/): headless
# Chromium, from Debian's packages, opens pages of other origins that try
# to write into the log or make the server call its model, and a rebound
# name that tries to read it.
#
#   bash .ci/browser-tests.sh        # from the repository root
#
# The tests run target/debug/wmreplay, built here (WMREPLAY_BIN names
# another binary). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
  # Another apt (the emulators' install) may hold the lock: wait for it.
  apt-get -o DPkg::Lock::Timeout=900 update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq chromium >/dev/null
fi
chromium --version
if [ -z "${WMREPLAY_BIN:-}" ]; then
  cargo build --bin wmreplay
  export WMREPLAY_BIN=$PWD/target/debug/wmreplay
fi
python3 tests/browser/cross_site.py
