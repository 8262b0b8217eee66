#!/usr/bin/env bash
# A CPython dynamically linked against musl libc, for testing musllinux wheels
# (a cp39-abi3-musllinux_1_2_x86_64 wheel's extension needs an interpreter
# that loads it with musl's dynamic linker). Built from source in about two
# minutes on 2 cores (three with MUSL_PY_SSL=1), with nothing but gcc, make,
# Python 3 (its pip downloads the wheels) and the package registries:
#
# - musl 1.2.5, built into DEST/musl (its own dynamic linker,
#   DEST/musl/lib/ld-musl-x86_64.so.1, and its musl-gcc): Debian 12's musl
#   package is 1.2.3, whose loader does not apply DT_RELR relocations (musl
#   1.2.4+ does), and wheels built on Alpine bundle a libgcc_s linked with them:
#   importing such an extension crashes there. Nothing is installed system-wide.
# - CPython 3.11.2 (Debian 12's source), zlib (pip needs it to unpack wheels)
#   and libffi (ctypes) from Debian's archive; SQLite's amalgamation from the
#   better-sqlite3 npm package (Debian ships SQLite unamalgamated). Every
#   download is checked against its SHA-256.
# - With MUSL_PY_SSL=1 also OpenSSL 3.5 (the openssl-src crate's copy), for
#   the ssl and _hashlib modules: httpx, and so openai and openai-agents,
#   import ssl. Not built at all: bz2, lzma, readline, curses, dbm, uuid,
#   tkinter.
# - pip is never pointed at an index (without ssl it could not reach one): the
#   wheels (pip itself, pytest or MUSL_PY_PACKAGES) are downloaded by the
#   host's pip for CPython 3.11 on musllinux_1_2/1_1 x86-64 (binary only),
#   kept in DEST/wheels, and installed from there with --no-index.
#
#   bash .ci/musl-python.sh [DEST]     # DEST: target/musl-python by default
#   MUSL_PY_PACKAGES="pytest pyyaml==6.0.3" bash .ci/musl-python.sh
#   MUSL_PY_SSL=1 bash .ci/musl-python.sh
#   DEST/bin/python3 -m pip install --no-index --find-links DEST/wheels ...
#
# DEST is taken from the repository root. Idempotent: an interpreter already
# in DEST that works (with ssl, if asked for) is kept; the wheels of
# MUSL_PY_PACKAGES are downloaded and installed each run (seconds). Prints
# each step with the seconds elapsed, and the time each took at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$SECONDS
STEPS=()
step_name=
step_start=$SECONDS
step() {
  if [[ -n $step_name ]]; then STEPS+=("$((SECONDS - step_start)) s  $step_name"); fi
  step_name=$*
  step_start=$SECONDS
  echo "== musl-python: $* ($((SECONDS - START)) s)"
}

DEST=${1:-target/musl-python}
mkdir -p "$DEST"
DEST=$(realpath "$DEST")
PY=$DEST/bin/python3
MUSL=$DEST/musl
PACKAGES=${MUSL_PY_PACKAGES:-pytest}
# 1: also OpenSSL (the ssl and _hashlib modules), for packages that import
# ssl (httpx, openai, ...): about a minute more.
SSL=${MUSL_PY_SSL:-0}
JOBS=$(nproc 2>/dev/null || echo 2)
PYVER=3.11

# Sources, pinned by SHA-256. Debian's pool keeps a file while any release
# refers to it (CPython, zlib and libffi: Debian 12; musl 1.2.5: Debian 13).
DEBIAN=http://deb.debian.org/debian/pool/main
SRC_MUSL="$DEBIAN/m/musl/musl_1.2.5.orig.tar.gz a9a118bbe84d8764da0ea0d28b3ab3fae8477fc7e4085d90102b8596fc7c75e4"
SRC_PYTHON="$DEBIAN/p/python3.11/python3.11_3.11.2.orig.tar.gz 2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849"
SRC_ZLIB="$DEBIAN/z/zlib/zlib_1.2.13.dfsg.orig.tar.bz2 71feb7947e3c00ef125f83b79a4e529bde31171e5babe48b391f06758d1ab0a1"
SRC_FFI="$DEBIAN/libf/libffi/libffi_3.4.4.orig.tar.gz d66c56ad259a82cf2a9dfc408b32bf5da52371500b84745f7fb8b645712df676"
SRC_SQLITE="https://registry.npmjs.org/better-sqlite3/-/better-sqlite3-13.2.0.tgz 40487589df3496f2ee0079d22b73c63fccebe7db0e8ee9a2c42421861e321e0b"
# OpenSSL 3.5 (LTS) as the openssl-src crate vendors it (crates.io keeps every
# version; Debian's pool drops an OpenSSL source once a fix replaces it).
SRC_OPENSSL="https://static.crates.io/crates/openssl-src/openssl-src-300.5.5%2B3.5.5.crate 3f1787d533e03597a7934fd0a765f0d28e94ecc5fb7789f8053b1e699a56f709"

# Does DEST hold a working musl interpreter? (musl's loader, zlib, pip, and
# the musllinux tags pip installs wheels by.)
works() {
  [[ -x $PY ]] || return 1
  readelf -l "$PY" 2>/dev/null | grep -q "interpreter: $MUSL/lib/ld-musl-x86_64.so.1" || return 1
  if [[ $SSL == 1 ]]; then "$PY" -c 'import ssl, _hashlib' 2>/dev/null || return 1; fi
  "$PY" - <<'EOF' >/dev/null 2>&1
import zlib, ctypes, sqlite3, json
from pip._vendor.packaging import tags
names = {str(t) for t in tags.sys_tags()}
assert "cp311-abi3-musllinux_1_2_x86_64" in names, names
assert not any("manylinux" in n for n in names)
EOF
}

# The host's pip downloads the wheels (Debian's python3 may come without it);
# make builds.
missing=()
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v make >/dev/null || missing+=(make)
# OpenSSL needs the kernel's headers (musl has none of its own) and perl.
if [[ $SSL == 1 ]]; then
  [[ -d /usr/include/linux ]] || missing+=(linux-libc-dev)
  command -v perl >/dev/null || missing+=(perl)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
  step "apt-get install ${missing[*]}"
  SUDO=
  if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi

if works; then
  step "kept $PY ($("$PY" --version), musl $("$MUSL/lib/ld-musl-x86_64.so.1" 2>&1 | sed -n 's/^Version //p'))"
else
  # Only a folder this script made (or an empty one) is emptied.
  if [[ -n $(ls -A "$DEST") && ! -e $DEST/.musl-python ]]; then
    echo "musl-python: $DEST is not empty and was not made by this script; give another folder" >&2
    exit 1
  fi
  rm -rf "$DEST"
  mkdir -p "$DEST"
  touch "$DEST/.musl-python"
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-musl-python-XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  DEPS=$WORK/deps
  LOGS=$WORK/logs
  mkdir -p "$WORK/dl" "$DEPS/lib" "$DEPS/include" "$LOGS"
  # Runs a build command with its output in a log, shown if it fails.
  logged() {
    local log=$LOGS/$1
    shift
    if ! "$@" >"$log" 2>&1; then
      echo "musl-python: failed: $*" >&2
      tail -40 "$log" >&2
      exit 1
    fi
  }

  step "download the sources (deb.debian.org, registry.npmjs.org)"
  # Downloaded and checked by Python (no curl needed), in parallel, each
  # unpacked into WORK/NAME without its top directory.
  sources=("musl $SRC_MUSL" "python $SRC_PYTHON" "zlib $SRC_ZLIB" "libffi $SRC_FFI" "sqlite $SRC_SQLITE")
  if [[ $SSL == 1 ]]; then sources+=("openssl $SRC_OPENSSL"); fi
  python3 - "$WORK" "${sources[@]}" <<'EOF'
import concurrent.futures, hashlib, os, sys, tarfile, time, urllib.request

work = sys.argv[1]

def get(spec):
    name, url, sha = spec.split()
    path = os.path.join(work, "dl", url.rsplit("/", 1)[1])
    for attempt in range(3):
        try:
            with urllib.request.urlopen(url, timeout=120) as r, open(path, "wb") as f:
                f.write(r.read())
            break
        except OSError as e:
            if attempt == 2:
                sys.exit(f"musl-python: cannot download {url}: {e}")
            time.sleep(3)
    with open(path, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    if got != sha:
        sys.exit(f"musl-python: {url}: sha256 {got}, expected {sha}")
    dest = os.path.join(work, name)
    with tarfile.open(path) as t:
        members = []
        for m in t.getmembers():
            # Without the top directory (python-3.11.2/, package/, ...).
            rest = m.name.split("/", 1)[1:]
            if rest and rest[0] and not rest[0].startswith("/") and ".." not in rest[0].split("/"):
                m.name = rest[0]
                if m.islnk():
                    m.linkname = m.linkname.split("/", 1)[-1]
                members.append(m)
        if hasattr(tarfile, "tar_filter"):  # Python 3.12+ warns without a filter
            t.extractall(dest, members, filter="tar")
        else:
            t.extractall(dest, members)
    os.remove(path)
    return name

with concurrent.futures.ThreadPoolExecutor(len(sys.argv) - 2) as pool:
    for name in pool.map(get, sys.argv[2:]):
        print(f"  {name}: ok")
EOF

  step "musl 1.2.5 -> $MUSL (its dynamic linker and musl-gcc)"
  (
    cd "$WORK/musl"
    # Shared only (CPython links nothing statically against libc).
    logged musl-configure ./configure --prefix="$MUSL" --syslibdir="$MUSL/lib" --disable-static
    logged musl-make make -j"$JOBS"
    logged musl-install make install
  )
  # The loader's library path: its own directory only, never the host's
  # glibc libraries in /lib and /usr/lib (musl's default path).
  mkdir -p "$MUSL/etc"
  echo "$MUSL/lib" >"$MUSL/etc/ld-musl-x86_64.path"
  CC=$MUSL/bin/musl-gcc
  { "$MUSL/lib/ld-musl-x86_64.so.1" 2>&1 || true; } | sed -n 's/^Version /  musl /p'

  step "zlib, libffi, SQLite (static, -fPIC, with musl-gcc)"
  # SQLite's one big file compiles in the background meanwhile.
  (cd "$WORK/sqlite/deps/sqlite3" &&
    "$CC" -O1 -fPIC -DSQLITE_THREADSAFE=1 -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_MATH_FUNCTIONS \
      -c sqlite3.c -o sqlite3.o >"$LOGS/sqlite" 2>&1 &&
    ar rcs "$DEPS/lib/libsqlite3.a" sqlite3.o && cp sqlite3.h "$DEPS/include/") &
  sqlite_pid=$!
  (
    cd "$WORK/zlib"
    logged zlib-configure env CC="$CC" CFLAGS="-O2 -fPIC" ./configure --static --prefix="$DEPS"
    logged zlib-make make libz.a
    cp libz.a "$DEPS/lib/" && cp zlib.h zconf.h "$DEPS/include/"
  )
  (
    cd "$WORK/libffi"
    logged libffi-configure env CC="$CC" CFLAGS="-O2 -fPIC" ./configure --prefix="$DEPS" \
      --disable-shared --enable-static --with-pic --disable-docs --disable-multi-os-directory \
      --disable-exec-static-tramp
    logged libffi-make make -j"$JOBS"
    logged libffi-install make install
  )
  if ! wait "$sqlite_pid"; then
    echo "musl-python: SQLite failed" >&2
    tail -40 "$LOGS/sqlite" >&2
    exit 1
  fi

  ssl_configure=(py_cv_module__ssl=n/a py_cv_module__hashlib=n/a)
  if [[ $SSL == 1 ]]; then
    step "OpenSSL 3.5 (static, no apps, tests, docs, engines or legacy provider)"
    # The kernel's headers, and nothing else of the host's /usr/include.
    mkdir -p "$WORK/kernel-include"
    ln -s /usr/include/linux /usr/include/asm-generic "$WORK/kernel-include/"
    ln -s "/usr/include/$(gcc -print-multiarch)/asm" "$WORK/kernel-include/asm"
    (
      cd "$WORK/openssl/openssl"
      # openssldir /etc/ssl: Debian's CA certificates, for whoever needs them.
      logged openssl-configure ./Configure linux-x86_64 CC="$CC" no-shared no-tests no-docs \
        no-apps no-module no-engine no-afalgeng no-legacy no-comp -O1 -fPIC \
        -isystem "$WORK/kernel-include" --prefix="$DEPS" --libdir=lib --openssldir=/etc/ssl
      logged openssl-make make -j"$JOBS" build_libs
      logged openssl-install make install_dev
    )
    ssl_configure=(--with-openssl="$DEPS" --with-openssl-rpath=no)
  fi

  step "CPython 3.11.2: configure"
  cd "$WORK/python"
  # Built with musl-gcc, CPython 3.11's configure finds the platform triplet
  # x86_64-linux-musl but gcc's --print-multiarch says x86_64-linux-gnu, and
  # it stops; and setup.py would add the host's (glibc) /usr/include/
  # x86_64-linux-gnu and /usr/local to every extension's search paths.
  # shellcheck disable=SC2016 # the literal $(...) of configure
  sed -i 's/MULTIARCH=\$(\$CC --print-multiarch 2>\/dev\/null)/MULTIARCH=/' configure
  sed -i -e 's/^        self\.add_multiarch_paths()$/        pass  # musl: not the host multiarch directories/' \
    -e "s|^            add_dir_to_list(self.compiler.library_dirs, '/usr/local/lib')$|            pass|" \
    -e "s|^            add_dir_to_list(self.compiler.include_dirs, '/usr/local/include')$|            pass|" setup.py
  # make install compiles the standard library three times (plain, -O, -OO):
  # the plain one is enough here.
  # shellcheck disable=SC2016 # the literal $(...) of Makefile.pre.in
  sed -i 's/\$(PYTHON_FOR_BUILD) -Wi -OO\? \$(DESTDIR)\$(LIBDEST)\/compileall.py/true/' Makefile.pre.in
  if grep -q 'print-multiarch 2>/dev/null)$' configure || grep -qE "add_multiarch_paths\(\)$|'/usr/local/(lib|include)'\)$" setup.py ||
    grep -q -- '-Wi -O' Makefile.pre.in; then
    echo "musl-python: the patches to configure, setup.py or Makefile.pre.in did not apply" >&2
    exit 1
  fi
  # -O1, no -g, no PGO/LTO: built once, run for tests. The modules whose
  # libraries are not built here are disabled outright, so that nothing of the
  # host's (glibc) can be picked up; pkg-config sees only DEPS.
  logged python-configure env CC="$CC" OPT="-DNDEBUG -fwrapv -O1" \
    CPPFLAGS="-I$DEPS/include" LDFLAGS="-L$DEPS/lib" \
    PKG_CONFIG_LIBDIR="$DEPS/lib/pkgconfig" PKG_CONFIG_PATH= \
    ZLIB_CFLAGS="-I$DEPS/include" ZLIB_LIBS="-L$DEPS/lib -lz" \
    LIBFFI_CFLAGS="-I$DEPS/include" LIBFFI_LIBS="-L$DEPS/lib -lffi" \
    LIBSQLITE3_CFLAGS="-I$DEPS/include" LIBSQLITE3_LIBS="-L$DEPS/lib -lsqlite3 -lm" \
    py_cv_module__bz2=n/a py_cv_module__lzma=n/a \
    py_cv_module__uuid=n/a py_cv_module_readline=n/a py_cv_module__curses=n/a \
    py_cv_module__curses_panel=n/a py_cv_module__dbm=n/a py_cv_module__gdbm=n/a \
    py_cv_module__tkinter=n/a py_cv_module_nis=n/a py_cv_module_ossaudiodev=n/a \
    py_cv_module_xxlimited=n/a py_cv_module_xxlimited_35=n/a \
    ./configure --prefix="$DEST" --disable-test-modules --with-ensurepip=no "${ssl_configure[@]}"

  step "CPython 3.11.2: make -j$JOBS"
  logged python-make make -j"$JOBS"
  step "CPython 3.11.2: make install -> $DEST"
  logged python-install make install
  cd "$ROOT"
  rm -rf "$WORK"
  trap - EXIT
fi

step "wheels for musllinux x86-64 CPython $PYVER (host pip, PyPI): pip $PACKAGES"
# Binary only (pip downloads for another platform only so): a requirement
# with no musllinux or pure-Python wheel fails here, naming it.
# shellcheck disable=SC2086 # PACKAGES: requirement words
python3 -m pip download --quiet --disable-pip-version-check --dest "$DEST/wheels" \
  --only-binary=:all: --implementation cp --python-version "$PYVER" \
  --platform musllinux_1_2_x86_64 --platform musllinux_1_1_x86_64 \
  pip $PACKAGES

step "pip install --no-index (pip, $PACKAGES)"
# (pip says so on every run without the ssl module, which it does not need here.)
no_ssl_warning='Disabling truststore since ssl support is missing'
pip_offline=(--quiet --disable-pip-version-check --root-user-action=ignore --no-index --find-links "$DEST/wheels")
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  # pip runs from its own wheel to install itself.
  pip_wheel=$(find "$DEST/wheels" -name 'pip-*-py3-none-any.whl' | sort -V | tail -1)
  "$PY" "$pip_wheel/pip" install "${pip_offline[@]}" pip 2>&1 | { grep -v "$no_ssl_warning" || true; }
fi
# shellcheck disable=SC2086 # PACKAGES: requirement words
"$PY" -m pip install "${pip_offline[@]}" $PACKAGES 2>&1 | { grep -v "$no_ssl_warning" || true; }

step "checks: musl's loader, the stdlib, the musllinux tags, an extension module, pytest"
interp=$(readelf -l "$PY" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
needed=$(readelf -d "$PY" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "  $PY: interpreter $interp, needs $needed"
[[ $interp == "$MUSL/lib/ld-musl-x86_64.so.1" ]]
"$PY" - <<'EOF'
import importlib, sys, sysconfig
from pip._vendor.packaging import tags
have, missing = [], []
for name in ["zlib", "ctypes", "sqlite3", "json", "_decimal", "_asyncio", "_multiprocessing",
             "_posixshmem", "_socket", "select", "mmap", "pyexpat", "_elementtree",
             "unicodedata", "_zoneinfo", "_ssl", "_hashlib", "_bz2", "_lzma", "readline",
             "_curses", "_dbm", "_gdbm", "_uuid", "_tkinter", "_crypt", "ossaudiodev"]:
    try:
        importlib.import_module(name)
        have.append(name)
    except ImportError:
        missing.append(name)
print("  modules:", " ".join(have))
print("  without:", " ".join(missing))
for need in ["zlib", "ctypes", "sqlite3", "json", "_decimal", "_asyncio", "_multiprocessing"]:
    assert need in have, f"{need} does not import"
import ctypes, sqlite3
libc = ctypes.CDLL(None)
assert libc.strlen(b"musl") == 4
assert sqlite3.connect(":memory:").execute("select 6 * 7").fetchone() == (42,)
names = [str(t) for t in tags.sys_tags()]
musl = [n for n in names if "musllinux" in n]
assert "cp311-abi3-musllinux_1_2_x86_64" in names and "cp39-abi3-musllinux_1_2_x86_64" in names, names
assert not any("manylinux" in n for n in names), names
print("  SOABI", sysconfig.get_config_var("SOABI"), "| first musllinux tags:", ", ".join(musl[:2]))
EOF
if [[ $SSL == 1 ]]; then
  "$PY" -c 'import ssl, hashlib; ssl.create_default_context(); hashlib.sha3_256(); print("  ssl:", ssl.OPENSSL_VERSION)'
fi
# An extension module, compiled here with musl-gcc against these headers and
# loaded by this interpreter.
EXT=$(mktemp -d "${TMPDIR:-/tmp}/wmreplay-musl-ext-XXXXXX")
cat >"$EXT/muslcheck.c" <<'EOF'
#include <Python.h>
#include <stdio.h>
static PyObject *hello(PyObject *self, PyObject *args) {
  char buf[32];
  snprintf(buf, sizeof buf, "musl %d", 42);
  return PyUnicode_FromString(buf);
}
static PyMethodDef methods[] = {{"hello", hello, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "muslcheck", NULL, -1, methods};
PyMODINIT_FUNC PyInit_muslcheck(void) { return PyModule_Create(&module); }
EOF
"$MUSL/bin/musl-gcc" -shared -fPIC -O1 -I"$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
  "$EXT/muslcheck.c" -o "$EXT/muslcheck.abi3.so"
(cd "$EXT" && "$PY" -c 'import muslcheck; assert muslcheck.hello() == "musl 42"; print("  extension module: muslcheck.abi3.so loaded")')
rm -rf "$EXT"
echo "  installed: $("$PY" -m pip list --disable-pip-version-check --format=freeze 2>/dev/null | tr '\n' ' ')"
"$PY" -m pytest --version

step "done"
echo "== musl-python: step times"
for s in "${STEPS[@]}"; do echo "  $s"; done
echo "musl-python: $PY ready in $((SECONDS - START)) s"
