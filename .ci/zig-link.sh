# Sourced by .ci/python-package.sh and .ci/node-package.sh: zig as the C
# compiler and linker of x86_64-unknown-linux-gnu against glibc 2.17, so that
# the wheel and the `.node` load on any Linux with glibc 2.17 or later
# (manylinux2014), not only on one as new as this machine's.
#
# Both packages link through the same two wrapper scripts, at fixed paths,
# rather than each tool's own (maturin's `--zig` writes one that runs
# maturin, cargo-zigbuild one that runs cargo-zigbuild): cargo keeps the
# linker in every compiled crate's fingerprint, so with two linkers the second
# package compiled all ~280 of the engine's dependencies again, minutes on 2
# cores, where with one it reuses the first's.
#
# The wrappers call `cargo-zigbuild zig cc`, which adapts rustc's linker
# arguments to zig's; cargo-zigbuild and zig come from PyPI, into
# target/zig-venv (the pair .ci/platforms.sh uses for its cross builds).
ZIG_VENV=$ROOT/target/zig-venv
if [[ ! -x $ZIG_VENV/bin/cargo-zigbuild ]]; then
  echo "== cargo-zigbuild and zig from PyPI (into target/zig-venv)"
  python3 -m venv "$ZIG_VENV"
  "$ZIG_VENV/bin/pip" install --quiet --disable-pip-version-check cargo-zigbuild==0.24.1 ziglang==0.17.1
fi
for tool in cc c++; do
  cat >"$ZIG_VENV/bin/zig$tool-x86_64-linux-gnu.2.17" <<EOF
#!/bin/sh
# $tool for x86_64-unknown-linux-gnu, glibc 2.17 (written by .ci/zig-link.sh)
export CARGO_ZIGBUILD_ZIG_COMMAND="$ZIG_VENV/bin/python3" CARGO_ZIGBUILD_ZIG_COMMAND_ARGS="-m ziglang"
exec "$ZIG_VENV/bin/cargo-zigbuild" zig $tool -- -g -fno-sanitize=all -target x86_64-linux-gnu.2.17 "\$@"
EOF
  chmod +x "$ZIG_VENV/bin/zig$tool-x86_64-linux-gnu.2.17"
done
# (With --target given, cargo links build scripts and proc macros for this
# machine with the same linker: they load on it all the same.)
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$ZIG_VENV/bin/zigcc-x86_64-linux-gnu.2.17
export CC_x86_64_unknown_linux_gnu=$ZIG_VENV/bin/zigcc-x86_64-linux-gnu.2.17
export CXX_x86_64_unknown_linux_gnu=$ZIG_VENV/bin/zigc++-x86_64-linux-gnu.2.17
