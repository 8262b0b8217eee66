#!/usr/bin/env bash
# The Python package on musl libc (Alpine and other musl distributions): a
# musllinux_1_2 x86-64 wheel, installed into a CPython linked against musl
# (.ci/musl-python.sh builds one from source: no container is needed) and
# tested there with the package's own suite.
#
#   bash .ci/python-musl.sh          # from the repository root
#
# 1. .ci/musl-python.sh: musl 1.2.5 and CPython 3.11 into target/musl-python
#    (about 2 min the first time; kept afterwards), with pip and pytest.
# 2. maturin (the build virtualenv of .ci/python-package.sh, or a new one)
#    builds the abi3 wheel for x86_64-unknown-linux-musl, linked by zig, tagged
#    musllinux_1_2, in the `platform-check` profile (optimised, without the
#    release's link-time optimisation: this wheel is built to be tested, the
#    release workflow builds the one published).
# 3. The wheel's extension must need musl's libc alone; a virtualenv of the
#    musl CPython installs it and pytest offline (--no-index: that CPython has
#    no ssl) and runs a copy of bindings/python/tests against it. The agent
#    frameworks' tests are skipped (their HTTP clients import ssl).
#
# Needs Rust (rustup), gcc, make, Python 3, and the CLI the tests compare with
# (target/debug/wmreplay, built if absent, or WMREPLAY_BIN). Exits non-zero on
# any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
step() { echo "== python-musl: $* ($((SECONDS - START)) s)"; }
MATURIN=maturin==1.16.0
ZIGLANG=ziglang==0.17.1
TARGET=x86_64-unknown-linux-musl
OUT=$ROOT/target/wheels-musl
MUSL_PY=$ROOT/target/musl-python

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-python-musl.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

step "a musl CPython (.ci/musl-python.sh)"
bash "$ROOT/.ci/musl-python.sh" "$MUSL_PY"
PY=$MUSL_PY/bin/python3

if [ -n "${WMREPLAY_BIN:-}" ]; then
  BIN=$WMREPLAY_BIN
else
  BIN=$ROOT/target/debug/wmreplay
  [ -x "$BIN" ] || { step "cargo build (the CLI the tests compare with)"; cargo build --bin wmreplay; }
fi

BUILD=$ROOT/target/python-build-venv
# (The Python package's script makes it anew without zig, which it takes from
# .ci/zig-link.sh.)
if [[ ! -x $BUILD/bin/maturin ]] || ! "$BUILD/bin/python" -c 'import ziglang' 2>/dev/null; then
  step "build virtualenv: $MATURIN $ZIGLANG"
  python3 -m venv "$BUILD"
  "$BUILD/bin/python" -m pip install --quiet --disable-pip-version-check "$MATURIN" "$ZIGLANG"
fi

step "rustup target add $TARGET"
rustup target add "$TARGET"

step "musllinux_1_2 wheel (maturin --zig --target $TARGET, profile platform-check) -> target/wheels-musl/"
rm -rf "$OUT"
(
  cd bindings/python
  export PATH="$BUILD/bin:$PATH" VIRTUAL_ENV="$BUILD" CARGO_TARGET_DIR="$ROOT/target"
  maturin build --profile platform-check --locked --zig --target "$TARGET" \
    --compatibility musllinux_1_2 --out "$OUT"
)
WHEEL=$(ls "$OUT"/wmreplay-*.whl)
case "$(basename "$WHEEL")" in
  *-cp39-abi3-musllinux_1_2_x86_64.whl) ;;
  *) echo "python-musl: unexpected wheel tag: $WHEEL" >&2; exit 1 ;;
esac

step "the extension needs musl's libc alone"
(cd "$WORK" && python3 -m zipfile -e "$WHEEL" unpacked)
needed=$(readelf -d "$WORK/unpacked/wmreplay/_wmreplay.abi3.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u | tr '\n' ' ')
echo "NEEDED: $needed"
for lib in $needed; do
  case $lib in
    libc.so | libc.musl-x86_64.so.1) ;;
    *) echo "python-musl: the extension needs $lib" >&2; exit 1 ;;
  esac
done

step "a virtualenv of the musl CPython: the wheel and pytest, offline"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-index --find-links "$MUSL_PY/wheels" "$WHEEL" pytest
cp -r bindings/python/tests "$WORK/tests"
rm -rf "$WORK/tests/__pycache__"

step "pytest (a copy of bindings/python/tests, against the installed musl wheel)"
(
  cd "$WORK/tests"
  "$WORK/venv/bin/python" -c 'import sys, sysconfig, wmreplay; print("wmreplay", wmreplay.__version__, "from", wmreplay.__file__, "on", sysconfig.get_config_var("HOST_GNU_TYPE") or sys.platform)'
  WMREPLAY_REPO=$ROOT WMREPLAY_BIN=$BIN WMREPLAY_EXPECT_PREFIX=$WORK/venv \
    "$WORK/venv/bin/python" -m pytest -p no:cacheprovider -ra .
)
step "done"
