#!/usr/bin/env bash
# console part of CI: the operator console (`rocklet broker --console-listen`) in headless
# Chromium against a real broker fed by the official RocketMQ 5 Python client.
#   1. tools (idempotent): Debian's chromium (apt, never a browser download), a venv with
#      rocketmq-python-client 5.1.2, npm playwright-core into .tools/console
#   2. the console's Rust tests (broker/tests/console.rs: the JSON API, paging, resolve,
#      stories, dead letters, access)
#   3. a broker with authentication on (the console then needs a super user) and a 1 s
#      time-series step; broker/tests/console-browser/console.test.cjs: the overview sees the
#      backlog grow, a parked transaction is committed by hand, the consumer receives it, the
#      message is found by key with its history; the audit record is in the broker's log
#   4. broker/tests/cluster_console.rs: a 3-node group on etcd (Debian's etcd-server); a
#      replica's console shows the master, the SyncStateSet and the lag, and a transaction
#      committed from the replica's page (chromium: console-browser/cluster.test.cjs) and
#      API is carried out by the master
# Screenshots: target/console-artifacts/ (printed at the end). Run from anywhere; needs root
# for apt-get (skipped when chromium is there).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/console
VENV=$TOOLS/venv
ART=$ROOT/target/console-artifacts
PY=${PYTHON:-python3}
t0=$(date +%s)
step() { echo "== console: $* ($(( $(date +%s) - t0 ))s)"; }
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

step "tools"
need_apt=()
dpkg -s chromium >/dev/null 2>&1 || need_apt+=(chromium)
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed (Node 20)"; exit 1; }
mkdir -p "$TOOLS"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -c 'import rocketmq' 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "rocketmq-python-client==5.1.2"
fi
if [ ! -d "$TOOLS/node_modules/playwright-core" ]; then
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$TOOLS" playwright-core@1.65.1
fi

step "rust: the console's API tests"
nice -n 10 cargo test -q -p rocklet-broker --test console
nice -n 10 cargo test -q -p rocklet-broker --lib console::

step "build the rocklet binary"
nice -n 10 cargo build -q -p rocklet-broker --bin rocklet
BIN=$ROOT/target/debug/rocklet

step "start a broker with the console"
WORK=$(mktemp -d)
BROKER_PID=
cleanup() {
  [ -z "$BROKER_PID" ] || kill "$BROKER_PID" 2>/dev/null || true
  [ -z "$BROKER_PID" ] || wait "$BROKER_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
read -r GRPC_PORT CONSOLE_PORT < <("$PY" - <<'PY'
import socket
s = [socket.socket() for _ in range(2)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
)
AK=console-admin
SK=console-secret-$RANDOM$RANDOM
cat > "$WORK/rocklet.toml" <<TOML
listen = "127.0.0.1:$GRPC_PORT"
data_dir = "$WORK/data"
remoting_listen = "off"
namesrv_listen = "off"
console_listen = "127.0.0.1:$CONSOLE_PORT"
console_sample_ms = 1000
[core]
flush = "async"
flush_interval_ms = 50
segment_size = 67108864
transaction_timeout_ms = 1000
transaction_check_interval_ms = 2000
[[auth.users]]
access_key = "$AK"
secret_key = "$SK"
super_user = true
TOML
"$BIN" broker --config "$WORK/rocklet.toml" > "$WORK/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 100); do
  grep -q "serving the operator console" "$WORK/broker.log" && break
  kill -0 "$BROKER_PID" 2>/dev/null || { cat "$WORK/broker.log"; exit 1; }
  sleep 0.1
done
grep -q "serving the operator console" "$WORK/broker.log" || { cat "$WORK/broker.log"; exit 1; }
# Without credentials the console refuses (authentication is on).
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$CONSOLE_PORT/api/overview" || true)
[ "$code" = 401 ] || { echo "expected 401 without credentials, got $code"; exit 1; }

step "headless chromium"
rm -rf "$ART"
mkdir -p "$ART"
if ! NODE_PATH="$TOOLS/node_modules" node "$ROOT/broker/tests/console-browser/console.test.cjs" \
  "http://127.0.0.1:$CONSOLE_PORT" "127.0.0.1:$GRPC_PORT" "$AK" "$SK" "$VENV/bin/python" "$ART"; then
  echo "---- broker log (last 60 lines)"; tail -n 60 "$WORK/broker.log"; exit 1
fi
grep "transaction resolved by an operator from the console" "$WORK/broker.log" | grep -q "operator=\"\?$AK" \
  || { echo "no audit record naming the operator in the broker's log"; tail -n 40 "$WORK/broker.log"; exit 1; }
[ "$(grep -c 'transaction resolved by an operator from the console.*resolution="rollback"' "$WORK/broker.log")" = 2 ] \
  || { echo "expected 2 audited rollbacks in the broker's log"; exit 1; }
grep "transaction resolved by an operator from the console" "$WORK/broker.log"
cp "$WORK/broker.log" "$ART/broker.log"

step "cluster: a replica's console on a 3-node group (etcd), in headless chromium"
if ! command -v etcd >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi
ROCKLET_CONSOLE_NODE_PATH="$TOOLS/node_modules" nice -n 10 cargo test -q -p rocklet-broker \
  --test cluster_console -- --include-ignored --nocapture

step "done: screenshots in $ART"
ls "$ART"
