#!/usr/bin/env bash
# The command line on other platforms, built here and run: aarch64 Linux with
# glibc 2.17 (cross-built with cargo-zigbuild, from PyPI, and run under
# qemu-user, from Debian's packages) and x86-64 Windows (cross-built for
# windows-gnu with zig, run under Wine, from Debian's packages); with
# WMREPLAY_PLATFORMS_MUSL=1, x86-64 musl too (statically linked, run natively;
# left out of CI for time: the musllinux wheel's suite, .ci/python-musl.sh,
# runs the engine on musl there). Each runs the same commands as this machine's build: `gen` (the
# same bytes), `respond` with windows, tokenizers, formats and cache marks,
# `replay`, `stats` and `search`, on the example log and on a generated one, and
# every output must equal the host's byte for byte (the scanner's SIMD paths
# differ between x86-64 and aarch64). Then the aarch64 binary's glibc floor is
# checked (`.ci/glibc-floor.sh`: nothing above GLIBC_2.17).
#
# The builds use the `platform-check` profile (unoptimised: they are run once,
# on small logs) and target/'s shared cache. macOS is built and tested by the
# release workflow only (.github/workflows/release.yml), and so are Windows's
# MSVC builds, which are what the packages ship. Wine 8.0 lacks one function
# Rust's std calls (ProcessPrng): .ci/wine/ gives it to the test run.
#
#   bash .ci/platforms.sh              # needs Rust (rustup), gcc, Python 3; root
#                                      # or sudo to install qemu-user and Wine
#                                      # if missing
#   HOST_BIN=target/release/wmreplay bash .ci/platforms.sh
#   WMREPLAY_PLATFORMS_MUSL=1 bash .ci/platforms.sh   # and x86-64 musl
#   bash .ci/platforms.sh --install    # only install qemu-user and Wine
#
# Exits non-zero on any failure, naming the platform and the command.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
step() { echo "== platforms: $* ($((SECONDS - START)) s)"; }

WINE=/usr/lib/wine/wine64
# qemu-user and Wine from Debian's packages, if missing (`--install`: only
# that, which CI does in the background while it compiles).
install_emulators() {
  if ! command -v qemu-aarch64 >/dev/null || [[ ! -e /usr/aarch64-linux-gnu/lib/libc.so.6 ]] ||
    [[ ! -x $WINE ]]; then
    step "apt-get install qemu-user libc6-arm64-cross wine64"
    SUDO=
    if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 qemu-user libc6-arm64-cross wine64 >/dev/null
  fi
}
if [[ ${1:-} == --install ]]; then
  install_emulators
  step "installed"
  exit 0
fi

HOST_BIN=${HOST_BIN:-$ROOT/target/debug/wmreplay}
if [[ ! -x $HOST_BIN ]]; then
  step "cargo build --bin wmreplay (the host's output is the reference)"
  cargo build --bin wmreplay
fi
HOST_BIN=$(realpath "$HOST_BIN")

ZIG_VENV=$ROOT/target/zig-venv
if [[ ! -x $ZIG_VENV/bin/cargo-zigbuild ]]; then
  step "cargo-zigbuild and zig from PyPI (into target/zig-venv)"
  python3 -m venv "$ZIG_VENV"
  "$ZIG_VENV/bin/pip" install --quiet --disable-pip-version-check cargo-zigbuild
fi
export PATH=$ZIG_VENV/bin:$PATH

TARGETS=(aarch64-unknown-linux-gnu.2.17 x86_64-pc-windows-gnu)
MUSL=
if [[ ${WMREPLAY_PLATFORMS_MUSL:-} == 1 ]]; then
  TARGETS+=(x86_64-unknown-linux-musl)
  MUSL=$ROOT/target/x86_64-unknown-linux-musl/platform-check/wmreplay
fi
step "rustup target add ${TARGETS[*]%.2.17}"
rustup target add "${TARGETS[@]%.2.17}"

install_emulators

# The Wine shim is built meanwhile: zig compiles MinGW's C runtime for it
# the first time (about a minute, mostly on one core).
PRNG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-prng-XXXXXX")
PRNG_LOG=$PRNG_DIR/build.log
trap 'rm -rf "$PRNG_DIR"' EXIT
step "ProcessPrng for Wine (.ci/wine/bcryptprimitives.c, built with zig), in the background"
python-zig cc -target x86_64-windows-gnu -shared -O2 -o "$PRNG_DIR/bcryptprimitives.dll" \
  "$ROOT/.ci/wine/bcryptprimitives.c" "$ROOT/.ci/wine/bcryptprimitives.def" -ladvapi32 \
  >"$PRNG_LOG" 2>&1 &
PRNG_PID=$!

declare -A RUN
# The command line without the JetStream client, which nothing below runs;
# every target in one cargo, so that the stretches where one target's build
# runs a crate at a time (build scripts, the crate itself) leave the other
# core to another's.
TARGET_ARGS=()
for target in "${TARGETS[@]}"; do TARGET_ARGS+=(--target "$target"); done
step "cargo zigbuild --profile platform-check --no-default-features --features cli --bin wmreplay ${TARGET_ARGS[*]}"
cargo zigbuild --profile platform-check --no-default-features --features cli --bin wmreplay "${TARGET_ARGS[@]}"
A64=$ROOT/target/aarch64-unknown-linux-gnu/platform-check/wmreplay
RUN[aarch64-gnu]="qemu-aarch64 -L /usr/aarch64-linux-gnu $A64"
if [[ -n $MUSL ]]; then RUN[x86_64-musl]="$MUSL"; fi
WIN_DIR=$ROOT/target/x86_64-pc-windows-gnu/platform-check
step "ProcessPrng for Wine (.ci/wine/bcryptprimitives.c, built with zig) joined"
if ! wait "$PRNG_PID"; then
  cat "$PRNG_LOG"
  echo "platforms: bcryptprimitives.dll could not be built" >&2
  exit 1
fi
mkdir -p "$WIN_DIR"
cp "$PRNG_DIR/bcryptprimitives.dll" "$WIN_DIR/"
RUN[x86_64-windows]="$WINE $WIN_DIR/wmreplay.exe"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-platforms-XXXXXX")
trap '/usr/lib/wine/wineserver -k 2>/dev/null || true; rm -rf "$WORK" "$PRNG_DIR"' EXIT
# A Wine prefix of the run's own, made without the Mono and Gecko installers
# (seconds instead of a minute), and quiet.
export WINEPREFIX=$WORK/wine WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
$WINE wineboot --init 2>/dev/null
EXAMPLE=$ROOT/examples/working_memory.log

# One command, run by the host's binary and each platform's, in directories
# of their own: the outputs must be equal. `{LOG}`, `{GEN}` and `{DIR}` stand
# for the run's copy of the example, its generated log and its directory.
checks=0
same() {
  local name=$1
  shift
  mkdir -p "$WORK/host"
  (cd "$WORK/host" && expand "$WORK/host" "$@" | run_args "$HOST_BIN") >"$WORK/want" || {
    echo "platforms: the host's binary failed: $name" >&2
    exit 1
  }
  for platform in "${!RUN[@]}"; do
    mkdir -p "$WORK/$platform"
    # shellcheck disable=SC2086 # RUN's words: the emulator and the binary
    (cd "$WORK/$platform" && expand "$WORK/$platform" "$@" | run_args ${RUN[$platform]}) >"$WORK/got" || {
      echo "platforms: $platform failed: $name" >&2
      exit 1
    }
    if ! cmp -s "$WORK/want" "$WORK/got"; then
      echo "platforms: $platform differs from the host: $name" >&2
      cmp "$WORK/want" "$WORK/got" >&2 || true
      diff <(fold -w 200 "$WORK/want") <(fold -w 200 "$WORK/got") | head -20 >&2
      exit 1
    fi
  done
  checks=$((checks + 1))
}
# The arguments, one a line, with the placeholders filled in.
expand() {
  local dir=$1
  shift
  for a in "$@"; do
    a=${a//\{LOG\}/$dir/example.log}
    a=${a//\{GEN\}/$dir/gen.log}
    a=${a//\{DIR\}/$dir}
    printf '%s\n' "$a"
  done
}
# Runs the command (its words first) with the arguments read from stdin.
run_args() {
  local args=()
  while IFS= read -r a; do args+=("$a"); done
  "$@" "${args[@]}"
}

step "the same outputs on x86-64 glibc (host), ${!RUN[*]}"
# `gen` writes the same bytes everywhere; its log is then an input below,
# with a copy of the example (each platform's search indexes sit next to
# its own logs).
for platform in host "${!RUN[@]}"; do
  mkdir -p "$WORK/$platform"
  cp "$EXAMPLE" "$WORK/$platform/example.log"
  if [[ $platform == host ]]; then bin=$HOST_BIN; else bin=${RUN[$platform]}; fi
  $bin gen "$WORK/$platform/gen.log" --size 1MiB --seed 7
done
for platform in "${!RUN[@]}"; do
  cmp "$WORK/host/gen.log" "$WORK/$platform/gen.log" || {
    echo "platforms: $platform: gen wrote other bytes" >&2
    exit 1
  }
done
checks=$((checks + 1))

for log in '{LOG}' '{GEN}'; do
  same "respond $log" respond "$log" --text 'What next?'
  same "respond $log --tail 5 --session" respond "$log" --text hi --tail 5 --session s-42
  same "respond $log --max-tokens o200k" respond "$log" --text hi --max-tokens 2000 --start-on text_input
  same "respond $log --max-tokens cl100k" respond "$log" --text hi --max-tokens 1500 --tokenizer cl100k_base
  same "respond $log --model --cache auto" respond "$log" --text hi --model claude-sonnet-4-5 --cache auto --tail 80 --mark-pending
  same "respond $log --format openai --record js" respond "$log" --text hi --format openai --record js --tail 50
  same "replay $log ndjson" replay "$log" --format ndjson --tail 100
  same "replay $log xml" replay "$log" --format xml --max-tokens 3000
  same "stats $log" stats "$log" --skips 5
  same "search $log" search "$log" 'invoice lisbon deploy' --limit 5 --index '{DIR}/idx'
  same "respond $log --recall" respond "$log" --text 'what about the invoice?' --recall 3 --tail 10
done

# The server: records appended through POST /v1/records, then what
# /v1/search, /v1/context and /v1/stats answer, and the log's bytes.
port=18790
for platform in host "${!RUN[@]}"; do
  mkdir -p "$WORK/serve-$platform"
  cp "$EXAMPLE" "$WORK/serve-$platform/example.log"
  if [[ $platform == host ]]; then bin=$HOST_BIN; else bin=${RUN[$platform]}; fi
  port=$((port + 1))
  # shellcheck disable=SC2086 # the emulator and the binary
  (cd "$WORK/serve-$platform" && python3 "$ROOT/.ci/serve-check.py" "$port" example.log $bin) \
    >"$WORK/serve-$platform.out" || {
    echo "platforms: $platform: the server check failed" >&2
    exit 1
  }
  if [[ $platform != host ]] && ! cmp -s "$WORK/serve-host.out" "$WORK/serve-$platform.out"; then
    echo "platforms: $platform: the server answered other bytes than the host's" >&2
    diff "$WORK/serve-host.out" "$WORK/serve-$platform.out" | head -20 >&2
    exit 1
  fi
done
checks=$((checks + 1))
echo "platforms: $checks commands (the last a server session) gave the host's bytes on ${!RUN[*]}"

step "the library's unit tests on Windows, under Wine"
# Built as the CLI was (zig, windows-gnu); the tests that need Unix are left
# out by cfg, the rest (file locks, positional I/O, the writer's journal,
# search) run as they do here.
# (The build's output goes to a file, then stderr: `tee /dev/stderr` would
# reopen, and truncate, a log file that stderr is redirected to.)
cargo-zigbuild test --no-run --profile platform-check --lib --no-default-features \
  --features cli --target x86_64-pc-windows-gnu >"$WORK/lib-tests.log" 2>&1 || {
  cat "$WORK/lib-tests.log" >&2
  exit 1
}
tail -n 2 "$WORK/lib-tests.log"
tests=$(sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))$/\1/p' "$WORK/lib-tests.log")
cp "$WIN_DIR/bcryptprimitives.dll" "$(dirname "$ROOT/$tests")/"
(cd "$WORK" && $WINE "$ROOT/$tests" -q)

step "glibc floor of the aarch64 binary"
bash "$ROOT/.ci/glibc-floor.sh" "$A64" ${MUSL:+"$MUSL"}
step "done"
