#!/usr/bin/env bash
# The wheel is the product: build the sdist and the wheel from this tree, install the wheel
# (never -e) in a fresh virtual environment and with `uv tool install`, and run the README's
# sample gates from outside the checkout, so nothing of the source tree can stand in for a
# module the wheel lacks: the sample passes (exit 0), the regression sample fails (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/release-ledger-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT

.venv/bin/python -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; exit 1; }
wheel=$(ls "$work"/dist/*.whl)
ls "$work"/dist/*.tar.gz >/dev/null
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel"

expect() {  # expect CODE LEDGER-COMMAND... : run a gate in $work, fail unless it exits CODE
  local want=$1; shift
  local got=0
  (cd "$work" && "$@" >"$work/gate.log" 2>&1) || got=$?
  if [ "$got" != "$want" ]; then
    echo "expected exit $want, got $got: $*"; tail -30 "$work/gate.log"; exit 1
  fi
  echo "ok (exit $got): ${*##*/}"
}

"$root/examples/make-sample-repo.sh" "$work/sample" >/dev/null
"$root/examples/make-sample-repo.sh" "$work/regression" --regression >/dev/null
export LEDGER_URL="sqlite:///$work/ledger.db"
expect 0 "$work/venv/bin/ledger" gate --repo "$work/sample" --base v1.0.0
expect 1 "$work/venv/bin/ledger" gate --repo "$work/regression" --base v1.0.0
expect 0 "$work/venv/bin/python" -m release_ledger runs

export UV_TOOL_DIR="$work/uv-tools" UV_TOOL_BIN_DIR="$work/uv-bin"
.venv/bin/uv tool install -q "$wheel"
expect 0 "$work/uv-bin/ledger" gate --repo "$work/sample" --base v1.0.0
