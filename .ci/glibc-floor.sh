#!/usr/bin/env bash
# Checks that Linux binaries run on glibc 2.17 (manylinux2014, CentOS 7, Amazon
# Linux 2): every versioned glibc symbol each one needs (`objdump -T`) is
# GLIBC_2.17 or older. A statically linked binary (musl) needs none.
#
#   bash .ci/glibc-floor.sh FILE...      # a binary, a .so, a .node, or a .whl
#
# Prints, per file, the newest GLIBC version it needs; exits 1 naming the file
# and the symbols when one needs more.
set -euo pipefail
FLOOR=2.17
status=0
newer() { # is version $1 above $FLOOR?
  [[ $(printf '%s\n%s\n' "$1" "$FLOOR" | sort -V | tail -1) != "$FLOOR" ]]
}
check() { # FILE [LABEL]
  local file=$1 label=${2:-$1} dyn versions newest bad=()
  if ! dyn=$(objdump -T "$file" 2>/dev/null); then
    # objdump refuses a file with no dynamic symbols: a static binary has no
    # interpreter; anything else is not a binary it can read.
    if readelf -l "$file" 2>/dev/null | grep -q 'Elf file type' && ! readelf -l "$file" | grep -q INTERP; then
      echo "glibc-floor: $label: statically linked, needs no glibc"
      return
    fi
    echo "glibc-floor: $label: objdump cannot read it" >&2
    status=1
    return
  fi
  versions=$(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$dyn" | sed 's/GLIBC_//' | sort -uV || true)
  if [[ -z $versions ]]; then
    echo "glibc-floor: $label: no versioned glibc symbol (musl)"
    return
  fi
  newest=$(tail -1 <<<"$versions")
  for v in $versions; do
    if newer "$v"; then bad+=("$v"); fi
  done
  if ((${#bad[@]})); then
    echo "glibc-floor: $label needs GLIBC_$newest, above $FLOOR; its symbols of ${bad[*]}:" >&2
    for v in "${bad[@]}"; do
      grep -F "(GLIBC_$v)" <<<"$dyn" | awk -v v="$v" '{print "  " $NF " (GLIBC_" v ")"}' >&2
    done
    status=1
  else
    echo "glibc-floor: $label: newest GLIBC_$newest (floor $FLOOR)"
  fi
}
for f in "$@"; do
  if [[ $f == *.whl ]]; then
    dir=$(mktemp -d)
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$f" "$dir"
    while IFS= read -r so; do
      check "$so" "$(basename "$f"):${so#"$dir"/}"
    done < <(find "$dir" -name '*.so')
    rm -rf "$dir"
  else
    check "$f"
  fi
done
exit $status
