#!/usr/bin/env bash
# Fidelity: what the official RocketMQ 4 clients and mqadmin need of the broker (issue #15).
# The in-process Rust tests (broker/tests/fidelity.rs), then against the `rocklet` binary:
#   - the Go v4 client (github.com/apache/rocketmq-client-go/v2, broker/tests/v4-go): the
#     offset message id of a send result is the one consumers see;
# Installs into .tools/fidelity (gitignored), idempotently: Go modules and build cache there.
# Run from anywhere: bash tests/ci/fidelity.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/fidelity
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS"
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
passed=0; failed=0

echo "== rust: fidelity tests"
nice -n 10 cargo build -p rocklet-broker --bin rocklet
nice -n 10 cargo test -p rocklet-broker --test fidelity
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/rocklet

echo "== go: install (idempotent)"
if ! command -v go >/dev/null; then
  apt-get update -qq && apt-get install -y -qq golang >/dev/null
fi
export GOMODCACHE=$TOOLS/go/mod GOCACHE=$TOOLS/go/cache GOPATH=$TOOLS/go GOFLAGS=-modcacherw
(cd broker/tests/v4-go && nice -n 10 go build -o "$TOOLS/v4-go-test" .)

# Starts a broker (extra config lines in $1) and sets PID, DIR and NS (the name server).
start_broker() {
  DIR=$(mktemp -d)
  printf '%s\n' "${1:-}" > "$DIR/rocklet.toml"
  RUST_LOG=info "$BIN" broker --listen 127.0.0.1:0 --data-dir "$DIR/data" --config "$DIR/rocklet.toml" 2> "$DIR/broker.log" &
  PID=$!
  NS=
  for _ in $(seq 100); do
    NS=$(sed -n 's/.*namesrv=Some(\([^)]*\)).*/\1/p' "$DIR/broker.log" | head -1)
    [ -n "$NS" ] && break
    sleep 0.2
  done
  [ -n "$NS" ] || { cat "$DIR/broker.log"; echo "broker did not start"; exit 1; }
}

stop_broker() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$DIR"
}
trap 'stop_broker' EXIT

# Runs one client test: name, then the command; counts it and shows the broker log on failure.
check() {
  local name=$1; shift
  echo "-- $name"
  if timeout 300 "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: $name"; echo "-- broker log"; tail -40 "$DIR/broker.log"
  fi
}

start_broker
check "go v4 client: send result offsetMsgId = consumed offsetMsgId" "$TOOLS/v4-go-test" "$NS"
stop_broker

echo "fidelity: done in $(( $(date +%s) - t0 ))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
