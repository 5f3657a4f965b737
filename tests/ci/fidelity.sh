#!/usr/bin/env bash
# Fidelity: what the official RocketMQ 4 clients and mqadmin need of the broker (issue #15).
# The in-process Rust tests (broker/tests/fidelity.rs, mqadmin.rs), then against the `rocklet` binary:
#   - the Go v4 client (github.com/apache/rocketmq-client-go/v2, broker/tests/v4-go): the
#     offset message id of a send result is the one consumers see;
#   - the Java v4 client (Maven org.apache.rocketmq:rocketmq-client 5.5.0,
#     broker/tests/v4-java): DefaultLitePullConsumer receives (LITE_PULL_MESSAGE), the
#     TransactionMQProducer's send result names the transaction id its listener is given, a
#     push consumer group of 2 rebalances within 2 s of the second member joining
#     (NOTIFY_CONSUMER_IDS_CHANGED), request() gets the reply a push consumer made with
#     MessageUtil.createReplyMessage (SEND_REPLY_MESSAGE_V2 pushed back, issue #34);
#   - mqadmin (Maven org.apache.rocketmq:rocketmq-tools 5.5.0, MQAdminStartup, every command in
#     one JVM: broker/tests/v4-java/src/AdminTest.java): clusterList, brokerStatus,
#     updateTopic, topicList, topicRoute, topicStatus, updateSubGroup -o true,
#     producerConnection, consumerConnection, consumerProgress, queryMsgById,
#     queryMsgByKey, queryMsgByOffset, queryCq, getConsumerConfig, brokerConsumeStats,
#     getBrokerConfig, updateBrokerConfig, getNamesrvConfig, wipeWritePerm / addWritePerm (sends stopped and
#     restored), resetOffsetByTime (group online: on the broker at once; offline) and
#     deleteTopic, consumerStatus -i (relayed to the client), deleteSubGroup, updateTopic -o
#     true and updateOrderConf (an order topic: its conf in routes, with orderMessageEnable on
#     in both name servers; a v4 producer sends to the queues it names), each command's
#     output checked -- side by side (issue #33): the same
#     program then runs against Apache RocketMQ 5.5.0 (name server and broker from the Maven
#     jars of tests/bench/apache.sh, cluster and broker named `rocklet`), same checks;
#   - SQL92 filters (issue #34): Apache's own filter module (Maven org.apache.rocketmq:rocketmq-filter
#     5.5.0, tests/sql92/Sql92Check.java) evaluates every case of tests/vectors/sql92.json and
#     sql92-random.json and must give what they say, as core/tests/sql92.rs does for Rocklet
#     (run by rust.sh).
# Installs into .tools/fidelity (gitignored), idempotently: Go modules and build cache, the
# Maven repository and the jars (about 80 MB), the compiled Java tests.
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
PID=; DIR=

echo "== rust: fidelity tests"
nice -n 10 cargo build -p rocklet-broker --bin rocklet
nice -n 10 cargo test -p rocklet-broker --test fidelity --test mqadmin
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/rocklet

echo "== go: install (idempotent)"
if ! command -v go >/dev/null; then
  apt-get update -qq && apt-get install -y -qq golang >/dev/null
fi
export GOMODCACHE=$TOOLS/go/mod GOCACHE=$TOOLS/go/cache GOPATH=$TOOLS/go GOFLAGS=-modcacherw
(cd broker/tests/v4-go && nice -n 10 go build -o "$TOOLS/v4-go-test" .)

echo "== java: install (idempotent)"
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
JARS=$TOOLS/jars
POM=broker/tests/v4-java/pom.xml
# The jars are fetched again only when the pom changes.
if ! cmp -s "$POM" "$JARS/.pom" 2>/dev/null; then
  rm -rf "$JARS"
  (cd broker/tests/v4-java && mvn -q -B -Dmaven.repo.local="$TOOLS/m2" dependency:copy-dependencies \
    -DoutputDirectory="$JARS" -DincludeScope=runtime)
  cp "$POM" "$JARS/.pom"
fi
rm -rf "$TOOLS/classes"
javac -d "$TOOLS/classes" -cp "$JARS/*" broker/tests/v4-java/src/*.java

echo "== java: SQL92 table against Apache RocketMQ's filter module"
SQL_JARS=$TOOLS/sql92-jars
SQL_POM=tests/sql92/pom.xml
if ! cmp -s "$SQL_POM" "$SQL_JARS/.pom" 2>/dev/null; then
  rm -rf "$SQL_JARS"
  (cd tests/sql92 && mvn -q -B -Dmaven.repo.local="$TOOLS/m2" dependency:copy-dependencies \
    -DoutputDirectory="$SQL_JARS" -DincludeScope=runtime)
  cp "$SQL_POM" "$SQL_JARS/.pom"
fi
rm -rf "$TOOLS/sql92-classes"
javac -d "$TOOLS/sql92-classes" -cp "$SQL_JARS/*" tests/sql92/Sql92Check.java
echo "-- SQL92: tests/vectors/sql92.json and sql92-random.json with rocketmq-filter 5.5.0"
if timeout 120 java -cp "$SQL_JARS/*:$TOOLS/sql92-classes" Sql92Check tests/vectors/sql92.json \
  tests/vectors/sql92-random.json; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: SQL92 table against Apache RocketMQ's filter module"
fi

java_test() { timeout 300 java -cp "$JARS/*:$TOOLS/classes" V4JavaTest "$NS" "$@"; }
# mqadmin writes its logs and message body files under user.home.
mqadmin_test() { timeout 300 java -Duser.home="$DIR" -cp "$JARS/*:$TOOLS/classes" AdminTest "$NS" rocklet; }

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
  [ -n "$PID" ] || return 0
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  rm -rf "$DIR"
}
trap 'stop_broker' EXIT

# Runs one client test: name, then the command; counts it and shows the broker log on failure.
check() {
  local name=$1; shift
  echo "-- $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAILED: $name"; echo "-- broker log"; tail -40 "$DIR/broker.log"
  fi
}

start_broker "$(printf 'order_message_enable = true\n[core]\ntransaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000')"
check "go v4 client: send result offsetMsgId = consumed offsetMsgId" timeout 300 "$TOOLS/v4-go-test" "$NS"
check "java v4 client: DefaultLitePullConsumer receives" java_test litepull
check "java v4 client: transaction id of the send result = executeLocalTransaction's = checkLocalTransaction's" java_test txn
check "java v4 client: a group of 2 rebalances within 2 s of the second joining" java_test rebalance
check "java v4 client: request() gets the consumer's reply (MessageUtil.createReplyMessage, pushed back)" java_test reply
check "mqadmin (rocketmq-tools 5.5.0) against rocklet" mqadmin_test
stop_broker

echo "== mqadmin side by side: the same AdminTest against Apache RocketMQ 5.5.0"
# shellcheck source=tests/bench/apache.sh
source "$ROOT/tests/bench/apache.sh"
apache_install
AP=$(mktemp -d)
AP_PIDS=()
stop_apache_pair() {
  local p
  for p in "${AP_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${AP_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  AP_PIDS=()
}
trap 'stop_broker; stop_apache_pair; rm -rf "$AP"' EXIT
mkdir -p "$AP/ns" "$AP/broker"
AP_NS=127.0.0.1:$(apache_free_port)
printf 'listenPort=%s\nbindAddress=127.0.0.1\norderMessageEnable=true\n' "${AP_NS#*:}" > "$AP/ns/namesrv.conf"
# shellcheck disable=SC2086
java -Xmx256m $APACHE_OPENS -Duser.home="$AP/ns" -Drocketmq.home.dir="$AP/ns" -cp "$APACHE_JARS/*" \
  org.apache.rocketmq.namesrv.NamesrvStartup -c "$AP/ns/namesrv.conf" > "$AP/ns/out.log" 2>&1 &
AP_PIDS+=($!)
apache_wait_for "$AP/ns/out.log" "boot success" 120
# Cluster and broker named as rocklet's, so the same checks hold.
cat > "$AP/broker/broker.conf" <<CONF
brokerClusterName=rocklet
brokerName=rocklet
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
namesrvAddr=$AP_NS
listenPort=$(apache_free_port)
bindAddress=127.0.0.1
storePathRootDir=$AP/broker/store
storePathCommitLog=$AP/broker/store/commitlog
mappedFileSizeCommitLog=67108864
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
CONF
# shellcheck disable=SC2086
java -Xmx512m -XX:MaxDirectMemorySize=256m $APACHE_OPENS -Duser.home="$AP/broker" -Drocketmq.home.dir="$AP/broker" \
  -cp "$APACHE_JARS/*" org.apache.rocketmq.broker.BrokerStartup -c "$AP/broker/broker.conf" > "$AP/broker/out.log" 2>&1 &
AP_PIDS+=($!)
apache_wait_for "$AP/broker/out.log" "boot success" 120
echo "-- mqadmin (rocketmq-tools 5.5.0) against Apache RocketMQ 5.5.0"
if timeout 300 java -Duser.home="$AP" -cp "$JARS/*:$TOOLS/classes" AdminTest "$AP_NS" apache; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAILED: mqadmin against Apache RocketMQ 5.5.0"; tail -20 "$AP/broker/out.log"
fi
stop_apache_pair

echo "fidelity: done in $(( $(date +%s) - t0 ))s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
