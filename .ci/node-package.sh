#!/usr/bin/env bash
# The Node.js package as npm users get it. Builds the release `.node`, lays the
# packages out as napi-rs publishes them (@napi-rs/cli v3: `napi create-npm-dirs`,
# `napi artifacts`, `napi pre-publish`): a per-platform package holding the
# prebuilt binary (wmreplay-linux-x64-gnu) and the main package `wmreplay`, which
# loads it and names it in its optionalDependencies. Packs both into target/npm/,
# installs the two tarballs in a fresh npm project with no Rust toolchain on PATH,
# checks that `wmreplay` and `wmreplay/agents` load without their optional peer
# `@openai/agents`, adds that SDK (the version of bindings/node's devDependencies,
# from the npm cache `npm ci` filled), and runs the package's tests
# (bindings/node/test) against that installed copy, the SDK's tests required.
#
# Needs Rust, gcc, Node.js 20 and npm; run from the repository (any directory in
# it) after `cargo build`: the tests compare with the CLI, target/debug/wmreplay
# (or WMREPLAY_BIN). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The options (-v, --dist) and `loud`, shared with the other package script.
# shellcheck source=.ci/package-options.sh
source "$ROOT/.ci/package-options.sh" "$@"
NODE_DIR=$ROOT/bindings/node
OUT=$ROOT/target/npm
STAGE=$OUT/stage
START=$SECONDS

step() { echo "== node-package: $* ($((SECONDS - START)) s)"; }

WMREPLAY_BIN=${WMREPLAY_BIN:-$ROOT/target/debug/wmreplay}
if [[ ! -x $WMREPLAY_BIN ]]; then
  step "cargo build --bin wmreplay (the CLI the tests compare with; set WMREPLAY_BIN to use another)"
  cargo build --bin wmreplay
fi

step "npm ci in bindings/node (@napi-rs/cli)"
(cd "$NODE_DIR" && npm ci --no-audit --no-fund)
NAPI=$NODE_DIR/node_modules/.bin/napi

# Linked by zig against glibc 2.17 (.ci/zig-link.sh, the Python wheel's
# linker too), in the repository's one target directory: the engine's
# dependencies the Python package compiled are reused here.
# shellcheck source=.ci/zig-link.sh
source "$ROOT/.ci/zig-link.sh"
step "napi build --release --platform --target x86_64-unknown-linux-gnu: cargo compiles the engine, the longest step (minutes)"
(cd "$NODE_DIR" && loud "$ROOT/target/node-build.log" env CARGO_TARGET_DIR="$ROOT/target" \
  npm run build -- --target x86_64-unknown-linux-gnu)
bash "$ROOT/.ci/glibc-floor.sh" "$NODE_DIR"/wmreplay.*.node

# The napi commands rewrite package.json and write binaries beside it, so they
# run on a copy of the package's files, never on the checkout.
step "napi create-npm-dirs, artifacts, pre-publish (in target/npm/stage)"
rm -rf "$OUT"
mkdir -p "$STAGE/artifacts"
(cd "$NODE_DIR" && cp package.json index.js index.mjs index.d.ts index.d.mts agents.js agents.mjs agents.d.ts agents.d.mts \
  README.md LICENSE-MIT LICENSE-APACHE "$STAGE/")
cp "$NODE_DIR"/wmreplay.*.node "$STAGE/artifacts/"
cd "$STAGE"
"$NAPI" create-npm-dirs
for dir in npm/*/; do
  platform=$(basename "$dir")
  # The per-platform package's own README (create-npm-dirs writes a stub) and
  # both license texts.
  if [[ ! -f $NODE_DIR/npm/$platform/README.md ]]; then
    echo "node-package: bindings/node/npm/$platform/README.md is missing" >&2
    exit 1
  fi
  cp "$NODE_DIR/npm/$platform/README.md" "$NODE_DIR/LICENSE-MIT" "$NODE_DIR/LICENSE-APACHE" "$dir"
  (cd "$dir" && npm pkg set \
    "description=The prebuilt $platform binary of wmreplay, which installs it as an optional dependency." \
    'files[]=LICENSE-MIT' 'files[]=LICENSE-APACHE')
done
# Puts each .node into its platform's package.
"$NAPI" artifacts
# Adds the platform packages to optionalDependencies; publishes nothing.
"$NAPI" pre-publish -t npm --skip-optional-publish --no-gh-release
# The published main package needs neither the build scripts nor the CLI.
npm pkg delete scripts devDependencies

step "npm pack"
for dir in "$STAGE" "$STAGE"/npm/*/; do
  (cd "$dir" && npm pack --pack-destination "$OUT" --loglevel=warn >/dev/null)
done
cd "$ROOT"
rm -rf "$STAGE"
for tgz in "$OUT"/*.tgz; do
  echo "$(basename "$tgz"): $(stat -c %s "$tgz") bytes"
  tar tzf "$tgz" | sed 's/^/  /'
done

PROJECT=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-npm-XXXXXX")
trap 'rm -rf "$PROJECT"' EXIT

step "install the tarballs in a fresh npm project and run the tests there, without Rust"
(
  # node and npm stay reachable through a directory of their own; every
  # directory holding cargo, rustc or rustup leaves PATH.
  mkdir "$PROJECT/.bin"
  for tool in node npm npx; do
    ln -s "$(readlink -f "$(command -v "$tool")")" "$PROJECT/.bin/$tool"
  done
  path=$PROJECT/.bin
  IFS=: read -ra dirs <<<"$PATH"
  for d in "${dirs[@]}"; do
    [[ -n $d && ! -x $d/cargo && ! -x $d/rustc && ! -x $d/rustup ]] && path+=":$d"
  done
  export PATH=$path
  if command -v cargo || command -v rustc; then
    echo "node-package: a Rust toolchain is still on PATH" >&2
    exit 1
  fi
  echo "no cargo, no rustc on PATH"

  cd "$PROJECT"
  npm init -y >/dev/null
  npm install --offline --no-audit --no-fund "$OUT"/*.tgz
  npm ls --all
  # The optional peer is not installed, and nothing needs it.
  [[ ! -e node_modules/@openai ]] || { echo "node-package: @openai/agents came with wmreplay" >&2; exit 1; }
  node -e "require('wmreplay'); require('wmreplay/agents'); import('wmreplay/agents').then(() => console.log('wmreplay and wmreplay/agents load without @openai/agents'))"
  # The SDK at the versions the package is tested with.
  sdk=$(cd "$NODE_DIR" && node -p "const d = require('./package.json').devDependencies; ['@openai/agents', 'zod'].map((n) => n + '@' + d[n]).join(' ')")
  # shellcheck disable=SC2086 # two package specs
  npm install --prefer-offline --no-audit --no-fund --loglevel=error $sdk
  npm ls @openai/agents zod
  # The tests as shipped in the repository, but requiring the installed
  # package (by name, from the project's node_modules; the ES module and the
  # types are checked through that name too, TypeScript taken from
  # bindings/node/node_modules).
  cp -r "$NODE_DIR/test" "$PROJECT/test"
  WMREPLAY_PACKAGE=wmreplay WMREPLAY_REPO=$ROOT WMREPLAY_BIN=$WMREPLAY_BIN WMREPLAY_REQUIRE_FRAMEWORKS=1 \
    node --test test/
  # In the project, so that `import 'wmreplay'` finds its node_modules.
  step "the docs' JavaScript examples that need the package, as written (.ci/doc-package-blocks.py)"
  mkdir "$PROJECT/doc-blocks"
  python3 "$ROOT/.ci/doc-package-blocks.py" js "$(command -v node)" "$PROJECT/doc-blocks"
)

step "done: $(cd "$OUT" && echo *.tgz) in target/npm"
