#!/usr/bin/env bash
# Rocklet against Apache RocketMQ 5.5.0 (issue #16), the same `rocklet bench` on the same
# machine in one run: the comparison tests/bench/run.sh makes, by itself (a couple of
# minutes). Apache (name server + proxy in local mode, tests/bench/apache.sh) is warmed with a
# send run and a txn run before it is measured. Needs the release binary
# (`cargo build --release -p rocklet-broker`), Java and Maven Central.
#
#   bash tests/bench/vs-apache.sh        # SECS=10 by default; outputs in target/bench-vs-apache/
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${ROCKLET:-$PWD/target/release/rocklet}
out=$PWD/target/bench-vs-apache; rm -rf "$out"; mkdir -p "$out"
data=$PWD/target/bench-data; mkdir -p "$data"
SECS=${SECS:-10}
echo "start $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
d=$data/broker-vs; rm -rf "$d"
"$R" broker --data-dir "$d" --listen 127.0.0.1:0 --flush async > "$out"/broker.log 2>&1 &
bpid=$!
baddr=
while [ -z "$baddr" ]; do
  kill -0 "$bpid" 2>/dev/null || { echo "the broker died:"; cat "$out"/broker.log; exit 1; }
  baddr=$(grep -o 'addr=127\.0\.0\.1:[0-9]*' "$out"/broker.log | head -1 | cut -d= -f2); sleep 0.05
done
for k in send txn; do
  "$R" bench $k --endpoint "$baddr" --broker-pid "$bpid" --clients 16 --consumers 8 --drain-timeout 120 --duration "$SECS" --quiet > "$out"/rocklet_$k.out 2>&1
  echo "rocklet $k: $(grep -E '^result:' "$out"/rocklet_$k.out)"
done
kill "$bpid"; wait "$bpid" 2>/dev/null
source tests/bench/apache.sh
apache_install > "$out"/apache-install.log 2>&1 || { echo "apache install failed"; exit 1; }
rm -rf "$data/apache-vs"; apache_start "$data/apache-vs" > "$out"/apache-start.log 2>&1 && apache_topic RockletBenchNormal NORMAL && apache_topic RockletBenchTxn TRANSACTION && apache_group RockletBenchConsumer || { echo "apache start failed"; cat "$out"/apache-start.log; apache_stop; exit 1; }
for k in send txn; do
  "$R" bench $k --endpoint "$APACHE_GRPC" --clients 16 --consumers 8 --drain-timeout 120 --duration "$SECS" --quiet > "$out"/apache_warm_$k.out 2>&1
  echo "apache warm-up $k: $(grep -E '^result:' "$out"/apache_warm_$k.out)"
done
for k in send txn; do
  "$R" bench $k --endpoint "$APACHE_GRPC" --broker-pid "$APACHE_PID" --clients 16 --consumers 8 --drain-timeout 120 --duration "$SECS" --quiet > "$out"/apache_$k.out 2>&1
  echo "apache $k: $(grep -E '^result:' "$out"/apache_$k.out)"
done
apache_stop
echo "end $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
