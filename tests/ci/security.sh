#!/usr/bin/env bash
# Security: the official clients, unmodified, against rocklet with authentication, ACLs and
# TLS on (the broker's in-process tests, broker/tests/security.rs, run in broker.sh):
# - Python `rocketmq-python-client` 5.1.2 (pytest, broker/tests/security-clients): signed send,
#   transaction and receive; wrong secret, unknown key, no credentials refused (40100); Pub
#   without Sub (40300); Deny beats Allow; TLS permissive and enforcing (`tls_enable=True`,
#   a CA made with openssl at run time); a plaintext client against enforcing refused;
#   `rocklet admin` without credentials or as a normal user refused, users added at once.
# - Node `rocketmq-client-nodejs` 1.0.8 with sessionCredentials: the same refusals.
# - Java `rocketmq-client` 5.5.0 (v4 API) with AclClientRPCHook (broker/tests/java-acl):
#   send, transaction, push consumer; wrong secret, unknown key, no hook refused (16).
# Installs what it needs into .tools/security and .tools/java (gitignored), idempotently:
# a venv, an npm folder, a JDK and Maven via apt when missing, Maven's repository.
# Run from anywhere: bash tests/ci/security.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/security
VENV=$TOOLS/venv
NODE_DIR=$TOOLS/node
M2=$ROOT/.tools/java/m2
JAVA_OUT=$ROOT/target/java-acl
PY=${PYTHON:-python3}
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS" "$JAVA_OUT"
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }

echo "== tools: python client, node client, JDK + Maven, openssl (idempotent)"
need_apt=()
"$PY" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v openssl >/dev/null || need_apt+=(openssl)
java_ok() {
  command -v java >/dev/null && command -v mvn >/dev/null &&
    java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ { exit !($2 >= 17) }'
}
java_ok || need_apt+=(default-jdk-headless maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are needed (Node 20)"; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if ! "$VENV/bin/python" -c 'import rocketmq, pytest' 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "rocketmq-python-client==5.1.2" pytest
fi
if [ ! -f "$NODE_DIR/node_modules/rocketmq-client-nodejs/package.json" ]; then
  mkdir -p "$NODE_DIR"
  [ -f "$NODE_DIR/package.json" ] || echo '{"name":"rocklet-security-compat","private":true}' > "$NODE_DIR/package.json"
  (cd "$NODE_DIR" && npm install --no-audit --no-fund --loglevel=error "rocketmq-client-nodejs@1.0.8" >/dev/null)
fi

echo "== rust: build the rocklet binary"
nice -n 10 cargo build -p rocklet-broker --bin rocklet
BIN=$ROOT/target/debug/rocklet

echo "== python: official v5 client with credentials and TLS"
ROCKLET_BIN=$BIN "$VENV/bin/python" -m pytest -q -p no:cacheprovider broker/tests/security-clients

echo "== node: official v5 client with sessionCredentials"
ROCKLET_BIN=$BIN NODE_PATH=$NODE_DIR/node_modules node --test broker/tests/security-clients/

echo "== java: v4 client with AclClientRPCHook"
nice -n 10 mvn -B -q -Dmaven.repo.local="$M2" -f broker/tests/java-acl/pom.xml \
  compile dependency:build-classpath -Dmdep.outputFile="$JAVA_OUT/classpath.txt" >"$JAVA_OUT/mvn.log" 2>&1 ||
  { cat "$JAVA_OUT/mvn.log"; exit 1; }
RUN=$(mktemp -d)
cat > "$RUN/rocklet.toml" <<'TOML'
[[auth.users]]
access_key = "rocketmq2"
secret_key = "12345678"
super_user = true

# RetryAclTest's user: a v4 push consumer's retry cycle with nothing but its own topics and groups.
[[auth.users]]
access_key = "app"
secret_key = "app-secret"

[[auth.acls]]
user = "app"
resource = "Topic:AclRetry*"
actions = ["Pub", "Sub"]
decision = "Allow"

[[auth.acls]]
user = "app"
resource = "Group:AclRetry*"
actions = ["Sub"]
decision = "Allow"

[core]
flush = "sync"
transaction_timeout_ms = 1000
transaction_check_interval_ms = 1000
TOML
RUST_LOG=info "$BIN" broker --listen 127.0.0.1:0 --data-dir "$RUN/data" --config "$RUN/rocklet.toml" 2> "$RUN/broker.log" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$RUN"' EXIT
NS=
for _ in $(seq 100); do
  NS=$(sed -n 's/.*namesrv=Some(\([^)]*\)).*/\1/p' "$RUN/broker.log" | head -1)
  [ -n "$NS" ] && break
  sleep 0.2
done
[ -n "$NS" ] || { cat "$RUN/broker.log"; echo "broker did not start"; exit 1; }
if ! timeout 300 java -Drocketmq.log.root="$RUN/client-logs" -cp "$JAVA_OUT/classes:$(cat "$JAVA_OUT/classpath.txt")" \
  rocklet.AclTest "$NS" rocketmq2 12345678 2>&1 | { grep -v ' INFO ' || true; }; then
  echo "-- broker log"; tail -30 "$RUN/broker.log"; exit 1
fi
echo "== java: v4 push consumer's retry cycle as a normal user (issue 29: retry topics are their groups')"
if ! timeout 300 java -Drocketmq.log.root="$RUN/client-logs" -cp "$JAVA_OUT/classes:$(cat "$JAVA_OUT/classpath.txt")" \
  rocklet.RetryAclTest "$NS" app app-secret 2>&1 | { grep -v ' INFO ' || true; }; then
  echo "-- broker log"; tail -30 "$RUN/broker.log"; exit 1
fi
kill "$PID"; wait "$PID" || true
trap - EXIT
rm -rf "$RUN"
echo "security: done in $(( $(date +%s) - t0 ))s"
