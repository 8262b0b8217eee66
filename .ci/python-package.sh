#!/usr/bin/env bash
# The Python package (bindings/python): builds its installable artifacts and
# tests the installed wheel.
#
#   bash .ci/python-package.sh        # from the repository root
#
# 1. A build virtualenv gets maturin from PyPI.
# 2. maturin makes the sdist, which carries the engine crate it depends on
#    (../..), into target/wheels/.
# 3. pip builds the wheel from the sdist alone, as a user without the
#    repository would (proving the sdist complete), through maturin's PEP 517
#    backend: abi3, release, linked by zig against glibc 2.17 (.ci/zig-link.sh,
#    the Node package's linker too) so that it is an honest manylinux2014 wheel (maturin's auditwheel check refuses the tag if
#    the extension needs newer symbols; linked against this machine's glibc it
#    would be manylinux_2_34). That wheel is the one tested: one build, not
#    one from the repository and another from the sdist.
# 4. A fresh virtualenv, with cargo and rustc taken off PATH, installs the
#    wheel (binary only) with its extras `agents` and `langchain` (the agent
#    frameworks, at the versions in bindings/python/tests/requirements-frameworks.txt)
#    and pytest, and runs a copy of bindings/python/tests against the installed
#    package (conftest.py refuses any other copy), the frameworks' tests
#    required (WMREPLAY_REQUIRE_FRAMEWORKS: a missing framework fails, not skips).
#
# Needs Rust, Python 3 (venv, pip) and the CLI built by `cargo build` (the
# tests compare request bodies with `wmreplay respond`; built here if absent).
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The options (-v, --dist) and `loud`, shared with the other package script.
# shellcheck source=.ci/package-options.sh
source "$ROOT/.ci/package-options.sh" "$@"
OUT=$ROOT/target/wheels
# Pinned: the version this script was measured with.
MATURIN=maturin==1.16.0
COMPAT=manylinux2014

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-python.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The build virtualenv is made anew each run, at the same path: PyO3's build
# script keys on the interpreter's path, so a rerun rebuilds only what changed.
BUILD=$ROOT/target/python-build-venv
pip_quiet=(--quiet --disable-pip-version-check)

step() { echo "== [${SECONDS}s] $*"; }

venv() {
  if ! python3 -m venv "$1" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
    rm -rf "$1"
    python3 -m venv "$1"
  fi
}

step "build virtualenv: $MATURIN"
python3 --version
rm -rf "$BUILD"
venv "$BUILD"
"$BUILD/bin/python" -m pip install "${pip_quiet[@]}" "$MATURIN"
"$BUILD/bin/maturin" --version

if [ -n "${WMREPLAY_BIN:-}" ]; then
  BIN=$WMREPLAY_BIN
else
  BIN=$ROOT/target/debug/wmreplay
  [ -x "$BIN" ] || { step "cargo build (the CLI the tests compare with; set WMREPLAY_BIN to use another)"; cargo build --bin wmreplay; }
fi

step "sdist -> target/wheels/"
mkdir -p "$OUT"
rm -f "$OUT"/wmreplay-*.whl "$OUT"/wmreplay-*.tar.gz
(cd bindings/python && PATH="$BUILD/bin:$PATH" VIRTUAL_ENV="$BUILD" maturin sdist --out "$OUT")
SDIST=$(ls "$OUT"/wmreplay-*.tar.gz)

step "the wheel, built by pip from the sdist alone (release, zig, $COMPAT) -> target/wheels/: cargo compiles the engine, the longest step (minutes)"
# maturin's PEP 517 backend takes the wheel's build settings from
# MATURIN_PEP517_ARGS; maturin comes from the build virtualenv (no build
# isolation), zig links (.ci/zig-link.sh), and the repository's one target
# directory keeps what the registry's crates compiled to for the Node
# package and the next run. A user's pip builds the
# sdist the same way, in an isolated environment with maturin from PyPI.
# shellcheck source=.ci/zig-link.sh
source "$ROOT/.ci/zig-link.sh"
(cd "$WORK" && loud "$ROOT/target/python-wheel-build.log" env PATH="$BUILD/bin:$PATH" \
  CARGO_TARGET_DIR="$ROOT/target" \
  MATURIN_PEP517_ARGS="--locked --target x86_64-unknown-linux-gnu --compatibility $COMPAT" \
  "$BUILD/bin/python" -m pip wheel -v --disable-pip-version-check --no-build-isolation \
  --no-cache-dir --no-deps -w "$OUT" "$SDIST")
WHEEL=$(ls "$OUT"/wmreplay-*.whl)
case "$(basename "$WHEEL")" in
  *-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) ;;
  *) echo "unexpected wheel tag: $WHEEL" >&2; exit 1 ;;
esac
bash "$ROOT/.ci/glibc-floor.sh" "$WHEEL"

step "what the artifacts carry"
"$BUILD/bin/python" - "$WHEEL" "$SDIST" <<'EOF'
import sys, tarfile, zipfile
from email.parser import Parser

wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
need = ["wmreplay/__init__.py", "wmreplay/__init__.pyi", "wmreplay/_wmreplay.pyi",
        "wmreplay/types.py", "wmreplay/py.typed", "wmreplay/_wmreplay.abi3.so",
        "wmreplay/sessions/__init__.py", "wmreplay/sessions/langchain.py",
        "wmreplay-0.1.0.dist-info/licenses/LICENSE-MIT",
        "wmreplay-0.1.0.dist-info/licenses/LICENSE-APACHE"]
missing = [n for n in need if n not in names]
assert not missing, f"the wheel lacks {missing}"
meta = Parser().parsestr(zipfile.ZipFile(wheel).read("wmreplay-0.1.0.dist-info/METADATA").decode())
assert meta["License-Expression"] == "MIT OR Apache-2.0", meta["License-Expression"]
assert sorted(meta.get_all("License-File")) == ["LICENSE-APACHE", "LICENSE-MIT"]
assert meta["Description-Content-Type"].startswith("text/markdown")
assert "## Errors" in meta.get_payload(), "the README is not the long description"
# The frameworks are extras, never plain requirements.
assert sorted(meta.get_all("Provides-Extra")) == ["agents", "langchain", "test"], meta.get_all("Provides-Extra")
requires = meta.get_all("Requires-Dist")
assert "openai-agents>=0.2 ; extra == 'agents'" in requires, requires
assert "langchain-core>=0.3 ; extra == 'langchain'" in requires, requires
assert all("extra ==" in r for r in requires), requires
print("wheel:", meta["Name"], meta["Version"], "|", meta["License-Expression"], "|",
      len(meta.get_all("Classifier")), "classifiers |", meta["Keywords"])
members = tarfile.open(sdist).getnames()
root = "wmreplay-0.1.0/"
need = ["PKG-INFO", "pyproject.toml", "README.md", "LICENSE-MIT", "LICENSE-APACHE",
        "Cargo.toml", "src/lib.rs", "src/append.rs", "bindings/python/Cargo.toml",
        "bindings/python/Cargo.lock", "bindings/python/src/lib.rs",
        "bindings/shared/Cargo.toml", "bindings/shared/src/lib.rs",
        "python/wmreplay/__init__.py"]
missing = [n for n in need if root + n not in members]
assert not missing, f"the sdist lacks {missing}"
print("sdist:", len(members), "files, the engine crate included")
EOF

step "fresh virtualenv without cargo or rustc: install the wheel[agents,langchain] and pytest"
# PATH without the directories that hold cargo or rustc.
CLEAN_PATH=
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  if [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ]; then
    CLEAN_PATH=${CLEAN_PATH:+$CLEAN_PATH:}$d
  fi
done
TEST=$WORK/test
venv "$TEST"
cp -r bindings/python/tests "$WORK/tests"
rm -rf "$WORK/tests/__pycache__"
(
  export PATH="$CLEAN_PATH"
  unset CARGO RUSTC CARGO_HOME RUSTUP_HOME RUSTUP_TOOLCHAIN
  # (A bare `! command -v cargo` would not stop the script under set -e.)
  if command -v cargo || command -v rustc; then
    echo "cargo or rustc is still on PATH" >&2
    exit 1
  fi
  echo "no cargo, no rustc on PATH"
  # Binary only: nothing may be compiled to install these. The frameworks come
  # through the wheel's extras, pinned to the versions tested with.
  "$TEST/bin/python" -m pip install "${pip_quiet[@]}" --only-binary=:all: \
    -c "$WORK/tests/requirements-frameworks.txt" "$WHEEL[agents,langchain]" pytest
  "$TEST/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -E '^(openai-agents|langchain-core) '
  cd "$WORK/tests"
  "$TEST/bin/python" -c 'import wmreplay, sys; print("wmreplay from", wmreplay.__file__); assert wmreplay.__file__.startswith(sys.prefix)'
  step "pytest (a copy of bindings/python/tests, against the installed wheel)"
  WMREPLAY_REPO=$ROOT WMREPLAY_BIN=$BIN WMREPLAY_EXPECT_PREFIX=$TEST \
    WMREPLAY_REQUIRE_FRAMEWORKS=1 OPENAI_AGENTS_DISABLE_TRACING=1 \
    "$TEST/bin/python" -m pytest -p no:cacheprovider -ra .
  step "the docs' Python examples that need the package, as written (.ci/doc-package-blocks.py)"
  mkdir "$WORK/doc-blocks"
  "$TEST/bin/python" "$ROOT/.ci/doc-package-blocks.py" python "$TEST/bin/python" "$WORK/doc-blocks"
)

step "artifacts"
ls -l "$OUT"/wmreplay-*
echo "python package: OK in ${SECONDS}s"
