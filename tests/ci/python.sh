#!/usr/bin/env bash
# Python binding: build the wheel (dev profile), install it into a fresh venv, run pytest
# against the installed wheel (not the source tree), mypy --strict on the examples, stubtest.
# Idempotent; run from anywhere: bash tests/ci/python.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYDIR=$ROOT/bindings-python
BUILD_VENV=$ROOT/.venv               # maturin, mypy (kept between runs)
TEST_VENV=$ROOT/.venv/wheel-test     # recreated each run: only the wheel and test tools
WHEELS=$ROOT/target/wheels/rocklet-ci
PY=${PYTHON:-python3}
t0=$(date +%s)
cd "$ROOT"

if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi

[ -x "$BUILD_VENV/bin/python" ] || "$PY" -m venv "$BUILD_VENV"
"$BUILD_VENV/bin/python" -m pip install -q --upgrade pip
"$BUILD_VENV/bin/python" -m pip install -q "maturin==1.16.*"

echo "== build wheel"
rm -rf "$WHEELS"
nice -n 10 "$BUILD_VENV/bin/maturin" build --profile dev -m "$PYDIR/Cargo.toml" -o "$WHEELS" \
  --interpreter "$BUILD_VENV/bin/python"
WHEEL=$(ls "$WHEELS"/rocklet-*.whl)

echo "== install into a fresh venv"
rm -rf "$TEST_VENV"
"$PY" -m venv "$TEST_VENV"
"$TEST_VENV/bin/python" -m pip install -q --upgrade pip
"$TEST_VENV/bin/python" -m pip install -q pytest mypy "$WHEEL"

echo "== pytest (against the installed wheel)"
# Run from outside the source tree so `import rocklet` can only find the installed wheel.
cd "$TEST_VENV"
"$TEST_VENV/bin/python" -c 'import rocklet, sys; p = rocklet.__file__; print("rocklet from", p); sys.exit("not the wheel" if "site-packages" not in p else 0)'
ROCKLET_REPO="$ROOT" ROCKLET_EXPECT_WHEEL=1 "$TEST_VENV/bin/python" -m pytest -q -p no:cacheprovider "$PYDIR/tests"

echo "== mypy --strict (examples, tests' view of the stubs)"
"$TEST_VENV/bin/python" -m mypy --strict --no-incremental "$PYDIR/examples"

echo "== stubtest"
"$TEST_VENV/bin/python" -m mypy.stubtest rocklet._rocklet

cd "$ROOT"
echo "python: ok in $(( $(date +%s) - t0 ))s"
