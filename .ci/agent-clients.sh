#!/usr/bin/env bash
# The agents people run, from their registries, for the tests that point
# them at `wmreplay serve` (tests/service/real_agents.rs): Claude Code
# (`@anthropic-ai/claude-code`, run as `claude -p`), Codex (`@openai/codex`,
# run as `codex exec`) and the OpenAI Agents SDK for TypeScript
# (`@openai/agents`) in target/agent-clients/node; the OpenAI Agents SDK for
# Python (`openai-agents`) and LangChain's `ChatAnthropic` and `ChatOpenAI`
# in target/agent-clients/venv. Claude Code and Codex ship native binaries
# in their platform packages.
#
#   bash .ci/agent-clients.sh        # from the repository root
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=target/agent-clients
# Pinned: the versions the tests were run against.
NODE_AGENTS="@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 @openai/agents@0.20.0"
PYTHON_AGENTS="openai-agents==0.24.0 langchain-anthropic==1.7.10 langchain-openai==1.7.4"
if [ ! -x "$DIR/venv/bin/python" ]; then
  if ! python3 -m venv "$DIR/venv" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
    rm -rf "$DIR/venv"
    python3 -m venv "$DIR/venv"
  fi
fi
# shellcheck disable=SC2086
"$DIR/venv/bin/pip" install --quiet --disable-pip-version-check $PYTHON_AGENTS
mkdir -p "$DIR/node"
if [ ! -f "$DIR/node/package.json" ]; then
  echo '{"name":"agent-clients","private":true}' > "$DIR/node/package.json"
fi
# shellcheck disable=SC2086
(cd "$DIR/node" && npm install --silent --no-audit --no-fund --engine-strict=false $NODE_AGENTS)
"$DIR/node/node_modules/.bin/claude" --version
"$DIR/node/node_modules/.bin/codex" --version
"$DIR/venv/bin/python" -c "import importlib.metadata as m; print('python:', *(p + ' ' + m.version(p) for p in ('openai-agents', 'langchain-anthropic', 'langchain-openai')))"
