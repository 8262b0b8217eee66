#!/usr/bin/env bash
# The agents people run, from their registries, for the tests that point
# them at `wmreplay serve` (tests/service/real_agents.rs): Claude Code
# (`@anthropic-ai/claude-code`, run as `claude -p`) and Codex
# (`@openai/codex`, run as `codex exec`) in target/agent-clients/node.
# Both ship native binaries in their platform packages.
#
#   bash .ci/agent-clients.sh        # from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=target/agent-clients
# Pinned: the versions the tests were run against.
NODE_AGENTS="@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0"
mkdir -p "$DIR/node"
if [ ! -f "$DIR/node/package.json" ]; then
  echo '{"name":"agent-clients","private":true}' > "$DIR/node/package.json"
fi
# shellcheck disable=SC2086
(cd "$DIR/node" && npm install --silent --no-audit --no-fund --engine-strict=false $NODE_AGENTS)
"$DIR/node/node_modules/.bin/claude" --version
"$DIR/node/node_modules/.bin/codex" --version
