#!/usr/bin/env bash
# A real browser against `wmreplay serve` (tests/browser/): headless
# Chromium, from Debian's packages, opens pages of other origins that try
# to write into the log or make the server call its model, and a rebound
# name that tries to read it (cross_site.py); then, driven by Playwright
# for Python (from PyPI, into target/pw-venv; it drives Debian's Chromium,
# no browser is downloaded), the memory inspector at /ui: every view, a
# turn against `wmreplay respond`, the live tail, and records that hold
# HTML (inspector.py). Its screenshots are kept in
# target/inspector-screenshots/ (the CI artifacts of the page).
#
#   bash .ci/browser-tests.sh            # from the repository root
#   bash .ci/browser-tests.sh --install  # only install Chromium and Playwright
#                                        # (CI does it in the background)
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
if [ ! -x target/pw-venv/bin/python ] || ! target/pw-venv/bin/python -c "import playwright" 2>/dev/null; then
  python3 -m venv target/pw-venv
  target/pw-venv/bin/pip install -q --disable-pip-version-check playwright
fi
if [[ ${1:-} == --install ]]; then exit 0; fi
if [ -z "${WMREPLAY_BIN:-}" ]; then
  cargo build --bin wmreplay
  export WMREPLAY_BIN=$PWD/target/debug/wmreplay
fi
python3 tests/browser/cross_site.py
target/pw-venv/bin/python tests/browser/inspector.py
