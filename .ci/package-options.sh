# Sourced by .ci/python-package.sh and .ci/node-package.sh with their
# arguments: the options both take, and `loud`.
#
# -v: every tool's output as it goes. Without it the long builds' output
# (cargo's, pip's) goes to a file under target/, shown when a step fails.
# --dist: the engine built as it is published (fully optimised: thin LTO,
# one codegen unit; minutes longer). By default it is built to be tried and
# tested: no LTO, 16 codegen units, no debug info.
VERBOSE=0
DIST=0
for arg in "$@"; do
  case "$arg" in
    -v | --verbose) VERBOSE=1 ;;
    --dist) DIST=1 ;;
    *)
      echo "usage: $0 [-v] [--dist]  (-v: every tool's output; --dist: optimised as published)" >&2
      exit 2
      ;;
  esac
done
if ((!DIST)); then
  export CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    CARGO_PROFILE_RELEASE_DEBUG=false
fi
# loud LOG CMD...: runs CMD, its output in LOG unless -v.
loud() {
  local log=$1
  shift
  if ((VERBOSE)); then
    "$@"
  elif ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "(the whole output: $log; -v shows it as it goes)" >&2
    return 1
  fi
}
