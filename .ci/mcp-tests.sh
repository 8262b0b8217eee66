#!/usr/bin/env bash
# The MCP server (`wmreplay mcp`, `wmreplay serve --mcp`) driven by the
# official MCP Python SDK over stdio and streamable HTTP (tests/mcp/).
#
#   bash .ci/mcp-tests.sh            # from the repository root
#   bash .ci/mcp-tests.sh --install  # only make the virtualenv (CI does it
#                                    # in the background while it compiles)
#
# A virtualenv in target/mcp-venv gets the pinned `mcp` and pytest from PyPI
# (made once, reused); the tests run target/debug/wmreplay, built here
# (WMREPLAY_BIN names another binary). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/mcp-venv
# Pinned: the SDK and test runner versions the tests were written against.
PACKAGES=(mcp==2.3.0 pytest==9.2.0)
if ! "$VENV/bin/python" -c 'import mcp, pytest' >/dev/null 2>&1; then
  rm -rf "$VENV"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PACKAGES[@]}"
fi
"$VENV/bin/python" -c 'import importlib.metadata as m; print("mcp", m.version("mcp"), "pytest", m.version("pytest"))'
if [[ ${1:-} == --install ]]; then exit 0; fi
if [ -z "${WMREPLAY_BIN:-}" ]; then
  cargo build --bin wmreplay
  export WMREPLAY_BIN=$PWD/target/debug/wmreplay
fi
"$VENV/bin/python" -m pytest tests/mcp -q -p no:cacheprovider
