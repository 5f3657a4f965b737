#!/usr/bin/env bash
# The RocketMQ 4 (remoting) path, Rocklet against Apache RocketMQ 5.5.0 (issue #34), in one
# run on one machine: the same `rocklet bench send --remoting <name server>` (the v4 Java
# client's pattern: SEND_MESSAGE_V2 one at a time per producer connection, PULL_MESSAGE of 32
# with long polling per queue) against each broker through its name server, with the broker's
# CPU time per message from /proc/PID/stat. Both topics have 8 queues (mqadmin's default;
# Rocklet's broker runs with default_queues = 8). Apache is name server + broker in local
# proxy mode (tests/bench/apache.sh; the proxy idles, v4 clients talk to the broker), warmed
# with one run before it is measured. Needs the release binary
# (`cargo build --release -p rocklet-broker`), Java and Maven Central.
#
#   bash tests/bench/v4-vs-apache.sh   # SECS=10 CLIENTS=16; outputs in target/bench-v4-vs-apache/
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${ROCKLET:-$PWD/target/release/rocklet}
out=$PWD/target/bench-v4-vs-apache; rm -rf "$out"; mkdir -p "$out"
data=$PWD/target/bench-data; mkdir -p "$data"
SECS=${SECS:-10}
args=(--clients "${CLIENTS:-16}" --size 1024 --drain-timeout 120 --duration "$SECS" --quiet)
echo "start $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
result() { grep -E '^result:' "$1" || { tail -5 "$1"; echo "(no result)"; }; }

d=$data/broker-v4vs; rm -rf "$d"; mkdir -p "$d"
printf '[core]\ndefault_queues = 8\n' > "$d.toml"
"$R" broker --data-dir "$d" --listen 127.0.0.1:0 --flush async --config "$d.toml" > "$out"/broker.log 2>&1 &
bpid=$!
ns=
while [ -z "$ns" ]; do
  kill -0 "$bpid" 2>/dev/null || { echo "the broker died:"; cat "$out"/broker.log; exit 1; }
  ns=$(sed -n 's/.*namesrv=Some(\([^)]*\)).*/\1/p' "$out"/broker.log | head -1); sleep 0.05
done
"$R" bench send --remoting "$ns" --broker-pid "$bpid" "${args[@]}" > "$out"/rocklet_v4.out 2>&1
echo "rocklet v4: $(result "$out"/rocklet_v4.out)"
kill "$bpid"; wait "$bpid" 2>/dev/null

source tests/bench/apache.sh
apache_install > "$out"/apache-install.log 2>&1 || { echo "apache install failed"; exit 1; }
rm -rf "$data/apache-v4vs"
apache_start "$data/apache-v4vs" > "$out"/apache-start.log 2>&1 \
  || { echo "apache start failed"; cat "$out"/apache-start.log; apache_stop; exit 1; }
# The warm-up run creates the topic (8 queues) through the name server's cluster info.
"$R" bench send --remoting "$APACHE_NS" "${args[@]}" > "$out"/apache_warm_v4.out 2>&1
echo "apache warm-up v4: $(result "$out"/apache_warm_v4.out)"
"$R" bench send --remoting "$APACHE_NS" --broker-pid "$APACHE_PID" "${args[@]}" > "$out"/apache_v4.out 2>&1
echo "apache v4: $(result "$out"/apache_v4.out)"
apache_stop
echo "end $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"
