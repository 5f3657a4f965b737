#!/usr/bin/env bash
# Import and record-format golden checks (issue #15 item 10), with Apache RocketMQ 5.5.0's own
# code (Maven: rocketmq-broker, -namesrv, -store, -client; tests/rocketmq/):
#   1. broker/tests/import.rs: synthetic RocketMQ stores through `rocklet import`.
#   2. RocketMQ -> Rocklet: an embedded DefaultMessageStore writes records (with and without
#      enabledAppendPropCRC; batch, IPv6, zlib, MESSAGE_MAGIC_CODE_V2, inner batch, half,
#      blanks) and RocketMQ's MessageDecoder reads them back; broker/tests/rocketmq_golden.rs
#      checks that decode_rocketmq reads each the same and decode exactly those with the CRC.
#   3. Import: a 5.5.0 broker (BrokerStartup + NamesrvStartup from the jars) gets the Java v4
#      client's scenario (ImportScenario produce: normal, batch, 100 KiB compressed, delay
#      levels and timers delivered and waiting, transactions committed / rolled back / pending,
#      consumer offsets) and is stopped; `rocklet import` converts its store (which it must
#      leave unchanged); every record passes `decode` (enabledAppendPropCRC=true). Then the
#      same consumer group (ImpGroup), with a producer of the pending transaction's group
#      answering its check, reads Apache restarted on a copy of the store and rocklet on the
#      imported data directory: the two outputs must be equal.
#   3b. Export round trip (issue #34, item 1): the same scenario (keys prefixed rt-) against
#      rocklet on the imported data directory, which is stopped and exported with `rocklet
#      export` (the source must stay unchanged); group ImpGroup then reads Apache 5.5.0
#      started on the export and rocklet on a copy of the data directory: the outputs must be
#      equal, and Apache must check the pending transaction (the Java checker commits it).
#   4. Rocklet -> RocketMQ: rocklet (1 MiB preallocated segments) takes the v4 client's
#      messages; every record of its segment files passes CommitLog.checkMessageAndReturnSize
#      with forceVerifyPropCRC=true; a 5.5.0 broker started on those segment files serves the
#      same normal messages as rocklet did.
#   5. SQL92 filters side by side (issue #34): a 5.5.0 broker with enablePropertyFilter=true
#      and rocklet (in process) get the same five messages from the official v4 Java client
#      (broker/tests/v4-java/src/V4Sql.java) and read them with `MessageSelector.bySql` for
#      each expression of broker/tests/sql92.rs's table: the deliveries must be equal (and
#      the table's).
# Installs into .tools/import (gitignored), idempotently: the Maven repository and jars
# (about 95 MB), the compiled Java helpers. Each JVM is started only for its step and stopped
# after it. Run from anywhere: bash tests/ci/import.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/import
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS"
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
step() { echo "== import: $* ($(( $(date +%s) - t0 ))s)"; }

step "rust: build, synthetic stores"
nice -n 10 cargo build -p rocklet-broker --bin rocklet
nice -n 10 cargo test -p rocklet-broker --test import
nice -n 10 cargo test -p rocklet-broker --test rocketmq_golden --no-run
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/rocklet
golden_test() { nice -n 10 cargo test -q -p rocklet-broker --test rocketmq_golden "$1" -- --exact --nocapture; }

step "java: install (idempotent)"
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
JARS=$TOOLS/jars
POM=tests/rocketmq/pom.xml
# The jars are fetched again only when the pom changes, the classes when a source does.
if ! cmp -s "$POM" "$JARS/.pom" 2>/dev/null; then
  rm -rf "$JARS"
  (cd tests/rocketmq && mvn -q -B -Dmaven.repo.local="$TOOLS/m2" dependency:copy-dependencies \
    -DoutputDirectory="$JARS" -DincludeScope=runtime)
  cp "$POM" "$JARS/.pom"
fi
SUM=$(cat tests/rocketmq/src/*.java | sha256sum | cut -c1-64)
if [ "$(cat "$TOOLS/classes/.sum" 2>/dev/null)" != "$SUM" ]; then
  rm -rf "$TOOLS/classes"
  javac -nowarn -d "$TOOLS/classes" -cp "$JARS/*" tests/rocketmq/src/*.java 2>&1 | { grep -v '^Note:' || true; }
  echo "$SUM" > "$TOOLS/classes/.sum"
fi
OPENS="--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED"
CP="$JARS/*:$TOOLS/classes"

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${IMPORT_KEEP:-}" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# Runs a Java helper; its log (RocketMQ's logback is chatty) is shown only on failure, its own
# lines always.
java_run() {
  local log=$1; shift
  # shellcheck disable=SC2086
  if ! timeout 300 java -Xmx256m $OPENS -Duser.home="$WORK/client" -cp "$CP" "$@" > "$log" 2>&1; then
    grep -v '|-INFO' "$log" | tail -40
    echo "FAILED: java $*"
    return 1
  fi
  grep -E '^(golden|produce|consume|dump)' "$log" || true
}

# Port picking and log waiting, shared with the side-by-side benchmark's Apache start-up:
# apache_free_port (p - 2, p and p + 1 free, as a 5.5.0 broker needs) and apache_wait_for.
# shellcheck source=tests/bench/apache.sh
source "$ROOT/tests/bench/apache.sh"

NS_PORT=$(apache_free_port)
NS=127.0.0.1:$NS_PORT
start_namesrv() {
  mkdir -p "$WORK/ns"
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$NS_PORT" > "$WORK/ns/namesrv.conf"
  # shellcheck disable=SC2086
  java -Xmx256m $OPENS -Duser.home="$WORK/ns" -Drocketmq.home.dir="$WORK/ns" -cp "$CP" \
    org.apache.rocketmq.namesrv.NamesrvStartup -c "$WORK/ns/namesrv.conf" > "$WORK/ns/out.log" 2>&1 &
  NS_PID=$!
  PIDS+=("$NS_PID")
  apache_wait_for "$WORK/ns/out.log" "boot success" 90
}

# Starts a 5.5.0 broker on store root $2 (commit-log files of $3 bytes), named $1, with extra
# config lines $4.
start_apache() {
  local name=$1 store=$2 size=$3 dir=$WORK/$1 port
  port=$(apache_free_port)
  mkdir -p "$dir"
  cat > "$dir/broker.conf" <<EOF
brokerClusterName=ImpCluster
brokerName=imp
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
namesrvAddr=$NS
listenPort=$port
bindAddress=127.0.0.1
storePathRootDir=$store
storePathCommitLog=$store/commitlog
mappedFileSizeCommitLog=$size
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
enabledAppendPropCRC=true
transactionTimeOut=2000
transactionCheckInterval=3000
${4:-}
EOF
  # shellcheck disable=SC2086
  java -Xmx512m -XX:MaxDirectMemorySize=256m $OPENS -Duser.home="$dir" -Drocketmq.home.dir="$dir" -cp "$CP" \
    org.apache.rocketmq.broker.BrokerStartup -c "$dir/broker.conf" > "$dir/out.log" 2>&1 &
  APACHE_PID=$!
  PIDS+=("$APACHE_PID")
  apache_wait_for "$dir/out.log" "boot success" 120
  echo "apache broker $name on $store up"
}

# Stops the broker: cleanly ($1 = TERM: it persists offsets and checkpoints, 10-15 s), or at
# once when nothing of its store is used afterwards ($1 = KILL).
stop_apache() {
  kill -"$1" "$APACHE_PID"
  wait "$APACHE_PID" 2>/dev/null || true
}

# Starts rocklet on data dir $1 with config lines $2; sets ROCKLET_PID and ROCKLET_NS.
start_rocklet() {
  local data=$1
  printf '%s\n' "$2" > "$WORK/rocklet.toml"
  RUST_LOG=info "$BIN" broker --listen 127.0.0.1:0 --data-dir "$data" --config "$WORK/rocklet.toml" \
    2> "$WORK/rocklet.log" &
  ROCKLET_PID=$!
  PIDS+=("$ROCKLET_PID")
  ROCKLET_NS=
  for _ in $(seq 100); do
    ROCKLET_NS=$(sed -n 's/.*namesrv=Some(\([^)]*\)).*/\1/p' "$WORK/rocklet.log" | head -1)
    [ -n "$ROCKLET_NS" ] && break
    sleep 0.2
  done
  [ -n "$ROCKLET_NS" ] || { cat "$WORK/rocklet.log"; echo "FAILED: rocklet did not start"; exit 1; }
}

stop_rocklet() {
  kill "$ROCKLET_PID"
  wait "$ROCKLET_PID" 2>/dev/null || true
}

same() {
  if cmp -s "$1" "$2"; then
    echo "ok: $(wc -l < "$1") messages, $(basename "$1") = $(basename "$2")"
  else
    diff -u "$1" "$2" | head -60
    echo "FAILED: $(basename "$1") and $(basename "$2") differ"
    exit 1
  fi
}

# Apache may check a pending transaction again before the op record of the first answer is
# written; answered commit twice, it writes the committed message twice (at-least-once, as
# RocketMQ documents): the same message id at the next queue offset. Such a second copy is
# one message, not a difference (counted and shown).
drop_second_commits() {
python3 - "$1" <<'PY'
import re, sys
# Lines sort by topic, queue and a zero-padded queue offset (not JSON numbers: read by regex).
path = sys.argv[1]
kept, seen, dropped = [], set(), []
for line in open(path, encoding="utf-8"):
    topic = re.search(r'"topic":"([^"]*)"', line).group(1)
    msg_id = re.search(r'"msgId":"([^"]*)"', line).group(1)
    place = re.search(r'"queueId":(\d+),"queueOffset":(\d+)', line).groups()
    if '"PGROUP":' in line and (topic, msg_id) in seen:
        dropped.append(f"{topic} queue {place[0]} offset {place[1]} {msg_id}")
        continue
    seen.add((topic, msg_id))
    kept.append(line)
open(path, "w", encoding="utf-8").writelines(kept)
for d in dropped:
    print("apache committed a transaction twice, second copy set aside:", d)
PY
}

step "RocketMQ -> Rocklet: records written by RocketMQ's CommitLog, read by Rocklet's decoder"
java_run "$WORK/golden-crc.log" Golden write "$WORK/golden-crc" true "$WORK/golden-crc.jsonl"
java_run "$WORK/golden-nocrc.log" Golden write "$WORK/golden-nocrc" false "$WORK/golden-nocrc.jsonl"
ROCKLET_GOLDEN_CRC=$WORK/golden-crc ROCKLET_GOLDEN_NOCRC=$WORK/golden-nocrc golden_test rocketmq_written_records_read_by_rocklet

step "import: Apache RocketMQ 5.5.0 writes the scenario's store"
start_namesrv
# The scenario's topics exist from the start (4 queues, as auto-creation makes them), so the
# client does not wait for the name server to learn of topics it creates.
mkdir -p "$WORK/store/config"
printf '{"topicConfigTable":{%s}}\n' \
  "$(for t in ImpNormal ImpDelay ImpTxn; do printf '"%s":{"topicName":"%s","readQueueNums":4,"writeQueueNums":4,"perm":6},' "$t" "$t"; done | sed 's/,$//')" \
  > "$WORK/store/config/topics.json"
start_apache run1 "$WORK/store" 16777216
java_run "$WORK/produce.log" ImportScenario produce "$NS"
stop_apache TERM
cp -a --sparse=always "$WORK/store" "$WORK/store-copy"
(cd "$WORK/store" && find . -type f -exec sha256sum {} + | sort) > "$WORK/store.sum"

step "import: rocklet import"
"$BIN" import --from-rocketmq "$WORK/store" --data-dir "$WORK/data"
rm -rf "$WORK/data"
"$BIN" import --from-rocketmq "$WORK/store" --data-dir "$WORK/data" --json > "$WORK/report.json"
(cd "$WORK/store" && find . -type f -exec sha256sum {} + | sort) | cmp -s - "$WORK/store.sum" \
  || { echo "FAILED: rocklet import changed the store"; exit 1; }
echo "ok: the store is unchanged"
ROCKLET_IMPORT_STORE=$WORK/store ROCKLET_IMPORT_REPORT=$WORK/report.json golden_test apache_broker_store_imports

step "import: what group ImpGroup gets from Apache (restarted on a copy) and from rocklet"
start_apache run2 "$WORK/store-copy" 16777216
java_run "$WORK/consume-apache.log" ImportScenario consume "$NS" "$WORK/apache.jsonl"
stop_apache KILL
start_rocklet "$WORK/data" "$(printf '[core]\ntransaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000')"
java_run "$WORK/consume-rocklet.log" ImportScenario consume "$ROCKLET_NS" "$WORK/rocklet.jsonl"
stop_rocklet
grep '^consume: check' "$WORK/consume-apache.log" "$WORK/consume-rocklet.log" | sed "s|$WORK/||" || true
drop_second_commits "$WORK/apache.jsonl"
same "$WORK/apache.jsonl" "$WORK/rocklet.jsonl"

step "export round trip: traffic on rocklet (the imported store), rocklet export, Apache 5.5.0 on the export"
# The scenario again against rocklet on the imported data directory, every key prefixed rt-:
# sends, a committed, a rolled-back and a pending transaction, delays delivered and waiting,
# group ImpGroup 5 messages short of each queue's end.
start_rocklet "$WORK/data" "$(printf '[core]\ntransaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000')"
java_run "$WORK/rt-produce.log" ImportScenario produce "$ROCKLET_NS" rt-
stop_rocklet
cp -a --sparse=always "$WORK/data" "$WORK/data-copy"
(cd "$WORK/data" && find . -type f ! -name LOCK -exec sha256sum {} + | sort) > "$WORK/data.sum"
"$BIN" export --from "$WORK/data" --to-rocketmq "$WORK/exported" --commitlog-file-size 16777216 | tee "$WORK/export.txt"
(cd "$WORK/data" && find . -type f ! -name LOCK -exec sha256sum {} + | sort) | cmp -s - "$WORK/data.sum" \
  || { echo "FAILED: rocklet export changed its source"; exit 1; }
echo "ok: the data directory is unchanged"
grep -q 'pending .* of group ImpTxnGroup' "$WORK/export.txt" \
  || { echo "FAILED: the export names no pending transaction of ImpTxnGroup"; exit 1; }
# What ImpGroup reads from its committed offsets on, with a producer of ImpTxnGroup answering
# the pending transaction's check: from Apache started on the export, and from rocklet on a
# copy of the data directory it was exported from.
start_apache run5 "$WORK/exported" 16777216
java_run "$WORK/rt-consume-apache.log" ImportScenario consume "$NS" "$WORK/rt-apache.jsonl" rt-
stop_apache KILL
start_rocklet "$WORK/data-copy" "$(printf '[core]\ntransaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000')"
java_run "$WORK/rt-consume-rocklet.log" ImportScenario consume "$ROCKLET_NS" "$WORK/rt-rocklet.jsonl" rt-
stop_rocklet
grep -q '^consume: check of rt-pending-1, .*: commit' "$WORK/rt-consume-apache.log" \
  || { echo "FAILED: Apache did not check the exported pending transaction (rt-pending-1)"; exit 1; }
echo "ok: Apache checked the pending transaction rt-pending-1 and the Java checker answered"
drop_second_commits "$WORK/rt-apache.jsonl"
same "$WORK/rt-apache.jsonl" "$WORK/rt-rocklet.jsonl"

step "Rocklet -> RocketMQ: rocklet's segment files in RocketMQ's CommitLog and a 5.5.0 broker"
start_rocklet "$WORK/rdata" "$(printf '[core]\nsegment_size = 1048576\nmax_message_size = 262144\nmax_batch_size = 262144\n\n[[topics]]\nname = "GoldenTopic"\nqueues = 4')"
java_run "$WORK/golden-produce.log" ImportScenario golden-produce "$ROCKLET_NS" GoldenTopic
java_run "$WORK/dump-rocklet.log" ImportScenario dump "$ROCKLET_NS" GoldenDump "$WORK/rocklet-golden.jsonl" GoldenTopic
stop_rocklet
ls -l "$WORK/rdata"
java_run "$WORK/golden-check.log" Golden check "$WORK/rdata" 52
mkdir -p "$WORK/store3/commitlog" "$WORK/store3/config"
cp --sparse=always "$WORK"/rdata/[0-9]* "$WORK/store3/commitlog/"
printf '{"topicConfigTable":{"GoldenTopic":{"topicName":"GoldenTopic","readQueueNums":4,"writeQueueNums":4,"perm":6}}}\n' \
  > "$WORK/store3/config/topics.json"
start_apache run3 "$WORK/store3" 1048576
java_run "$WORK/dump-apache.log" ImportScenario dump "$NS" GoldenDump "$WORK/apache-golden.jsonl" GoldenTopic
stop_apache KILL
same "$WORK/rocklet-golden.jsonl" "$WORK/apache-golden.jsonl"

step "SQL92: the official v4 Java client's bySql deliveries, Apache 5.5.0 and rocklet"
t5=$(date +%s)
javac -nowarn -d "$TOOLS/v4sql-classes" -cp "$JARS/*" broker/tests/v4-java/src/V4Sql.java 2>&1 | { grep -v '^Note:' || true; }
start_apache run4 "$WORK/store4" 16777216 "enablePropertyFilter=true"
ROCKLET_SQL92_APACHE_NS=$NS ROCKLET_V4_CLASSPATH="$JARS/*:$TOOLS/v4sql-classes" \
  nice -n 10 cargo test -p rocklet-broker --test sql92 -- --ignored the_official_v4_java_client \
  --nocapture 2>&1 | grep -E '^(rocklet|apache): |^test |test result|panicked|FAILED|REFUSED|left|right'
stop_apache KILL
echo "SQL92 side by side in $(( $(date +%s) - t5 ))s"

kill "$NS_PID"
wait "$NS_PID" 2>/dev/null || true
echo "import: done in $(( $(date +%s) - t0 ))s"
