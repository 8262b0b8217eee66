#!/usr/bin/env bash
# The providers' official SDKs, from their registries, for the tests that
# use them as clients of the provider-compatible endpoints
# (tests/service/sdk_clients.rs): the Python `anthropic` and `openai` packages in
# target/sdk-clients/venv (with the MCP client, `mcp`, for the test of both
# writing one log), the TypeScript `@anthropic-ai/sdk` and `openai`
# in target/sdk-clients/node.
#
#   bash .ci/sdk-clients.sh        # from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=target/sdk-clients
# Pinned: the versions the tests were run against.
PYTHON_SDKS="anthropic==2.14.0 openai==3.57.0 mcp==2.3.0"
NODE_SDKS="@anthropic-ai/sdk@1.14.0 openai@6.49.0"
mkdir -p "$DIR"
if [ ! -x "$DIR/venv/bin/python" ]; then
  if ! python3 -m venv "$DIR/venv" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv"
  fi
fi
# shellcheck disable=SC2086
"$DIR/venv/bin/pip" install --quiet --disable-pip-version-check $PYTHON_SDKS
mkdir -p "$DIR/node"
if [ ! -f "$DIR/node/package.json" ]; then
  echo '{"name":"sdk-clients","private":true}' > "$DIR/node/package.json"
fi
# shellcheck disable=SC2086
(cd "$DIR/node" && npm install --silent --no-audit --no-fund $NODE_SDKS)
"$DIR/venv/bin/python" -c "import anthropic, openai, mcp, importlib.metadata as m; print('python: anthropic', anthropic.__version__, 'openai', openai.__version__, 'mcp', m.version('mcp'))"
(cd "$DIR/node" && npm ls --depth=0)
