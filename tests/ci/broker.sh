#!/usr/bin/env bash
# Broker: the `rocklet` binary's Rust tests (unit, gRPC in-process, kill -9 / restart as a
# process), then the official RocketMQ 5 clients, unmodified, against a broker the tests
# start: Python `rocketmq-python-client` (pytest) and Node `rocketmq-client-nodejs` (node --test).
# Installs what it needs into .tools/broker (gitignored), idempotently. No protoc needed: the
# schema is compiled by protox at build time. Run from anywhere: bash tests/ci/broker.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/broker
VENV=$TOOLS/venv
NODE_DIR=$TOOLS/node
PY=${PYTHON:-python3}
PY_CLIENT="rocketmq-python-client==5.1.2"
NODE_CLIENT="rocketmq-client-nodejs@1.0.8"
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS"

command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed (Node 20)"; exit 1; }

echo "== clients: install (idempotent)"
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -c 'import rocketmq, pytest' 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "$PY_CLIENT" pytest
fi
if [ ! -f "$NODE_DIR/node_modules/rocketmq-client-nodejs/package.json" ]; then
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"rocklet-broker-compat","private":true}' > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error "$NODE_CLIENT" >/dev/null)
fi

echo "== rust: build and test rocklet-broker"
# (builds the `rocklet` binary too: the process and client tests run it)
nice -n 10 cargo test -p rocklet-broker
BIN=$ROOT/target/debug/rocklet
[ -x "$BIN" ] || { echo "rocklet binary missing at $BIN"; exit 1; }

echo "== python: official client against rocklet"
ROCKLET_BIN=$BIN "$VENV/bin/python" -m pytest -q -p no:cacheprovider broker/tests/compat

echo "== node: official client against rocklet"
ROCKLET_BIN=$BIN NODE_PATH=$NODE_DIR/node_modules node --test broker/tests/compat/

echo "broker: done in $(( $(date +%s) - t0 ))s"
