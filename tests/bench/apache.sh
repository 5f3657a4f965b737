#!/usr/bin/env bash
# Apache RocketMQ 5.5.0 for the side-by-side benchmark, sourced by tests/bench/run.sh (and
# usable alone: `source tests/bench/apache.sh; apache_install && apache_start ...`).
#
# The name server and the proxy in local mode (proxy and broker in one JVM, RocketMQ 5's
# default deployment for gRPC clients), from Maven jars (tests/bench/apache/pom.xml, about
# 100 MB into .tools/bench-apache, fetched once), on 127.0.0.1, -Xmx1g, async flush. The
# recipe: /work/shared/recipes/apache-rocketmq.md. tests/ci/import.sh sources this file for
# apache_free_port and apache_wait_for and starts the plain broker (no proxy) with the same flags.
# Sourcing only defines variables and functions.
#
# Functions (each returns non-zero with a message on failure):
#   apache_install          jars and JVM; fails when Maven Central cannot be reached
#   apache_start DIR        name server + proxy; sets APACHE_GRPC (host:port), APACHE_PID
#                           (the proxy+broker JVM), APACHE_NS_PID
#   apache_topic T TYPE     mqadmin updateTopic (TYPE: NORMAL, TRANSACTION, FIFO, DELAY)
#   apache_group G          mqadmin updateSubGroup
#   apache_stop             stops both JVMs

APACHE_ROOT=${APACHE_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
APACHE_TOOLS=$APACHE_ROOT/.tools/bench-apache
APACHE_JARS=$APACHE_TOOLS/jars
APACHE_CLUSTER=RockletBenchCluster
APACHE_OPENS="--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.misc=ALL-UNNAMED"
APACHE_PID=; APACHE_NS_PID=; APACHE_GRPC=; APACHE_NS=; APACHE_DIR=

apache_install() {
  if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null; } \
      || { echo "apache: cannot install Java 17 and Maven"; return 1; }
  fi
  local pom=$APACHE_ROOT/tests/bench/apache/pom.xml
  if ! cmp -s "$pom" "$APACHE_JARS/.pom" 2>/dev/null; then
    rm -rf "$APACHE_JARS"
    (cd "$APACHE_ROOT/tests/bench/apache" && timeout 900 mvn -q -B -Dmaven.repo.local="$APACHE_TOOLS/m2" \
      dependency:copy-dependencies -DoutputDirectory="$APACHE_JARS" -DincludeScope=runtime) \
      || { echo "apache: Maven could not fetch RocketMQ 5.5.0 (Maven Central unreachable?)"; return 1; }
    cp "$pom" "$APACHE_JARS/.pom"
  fi
}

# A port p of 127.0.0.1 with p - 2 (RocketMQ's fast remoting port), p and p + 1 (HA) free.
# Picked below the kernel's ephemeral range: a port inside it can be the local end of some
# client's connection, which the probe below does not see and which makes the broker's bind
# fail ("Address already in use" for the HA port, seen once in CI on 2026-12-03).
apache_free_port() {
  local p q lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$lo" -gt 12000 ] 2>/dev/null || lo=32768
  while :; do
    p=$(( RANDOM % (lo - 12000) + 10002 ))
    for q in $((p - 2)) "$p" $((p + 1)); do
      (exec 3<>"/dev/tcp/127.0.0.1/$q") 2>/dev/null && continue 2
    done
    echo "$p"
    return
  done
}

# Waits for `text` in `file`, or fails after `secs` seconds.
apache_wait_for() {
  local file=$1 text=$2 secs=$3 i
  for ((i = 0; i < secs * 5; i++)); do
    grep -q "$text" "$file" 2>/dev/null && return 0
    sleep 0.2
  done
  grep -v '|-INFO' "$file" | tail -20
  echo "apache: no \"$text\" in $file after ${secs}s"
  return 1
}

# Waits until something accepts on 127.0.0.1:$1.
apache_wait_port() {
  local port=$1 secs=$2 i
  for ((i = 0; i < secs * 5; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.2
  done
  echo "apache: nothing listens on 127.0.0.1:$port after ${secs}s"
  return 1
}

apache_start() {
  APACHE_DIR=$1
  rm -rf "$APACHE_DIR"; mkdir -p "$APACHE_DIR/ns" "$APACHE_DIR/proxy"
  local ns_port broker_port grpc_port remoting_port cp="$APACHE_JARS/*"
  ns_port=$(apache_free_port); broker_port=$(apache_free_port)
  grpc_port=$(apache_free_port); remoting_port=$(apache_free_port)
  APACHE_NS=127.0.0.1:$ns_port
  printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$ns_port" > "$APACHE_DIR/ns/namesrv.conf"
  # shellcheck disable=SC2086
  java -Xmx256m $APACHE_OPENS -Duser.home="$APACHE_DIR/ns" -Drocketmq.home.dir="$APACHE_DIR/ns" -cp "$cp" \
    org.apache.rocketmq.namesrv.NamesrvStartup -c "$APACHE_DIR/ns/namesrv.conf" > "$APACHE_DIR/ns/out.log" 2>&1 &
  APACHE_NS_PID=$!
  apache_wait_for "$APACHE_DIR/ns/out.log" "boot success" 120 || return 1
  local d=$APACHE_DIR/proxy
  cat > "$d/broker.conf" <<EOF
brokerClusterName=$APACHE_CLUSTER
brokerName=rocklet-bench
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=127.0.0.1
namesrvAddr=$APACHE_NS
listenPort=$broker_port
bindAddress=127.0.0.1
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
storePathRootDir=$d/store
storePathCommitLog=$d/store/commitlog
mappedFileSizeCommitLog=268435456
transactionTimeOut=6000
transactionCheckInterval=30000
transactionCheckMax=15
EOF
  cat > "$d/rmq-proxy.json" <<EOF
{"rocketMQClusterName": "$APACHE_CLUSTER", "proxyMode": "local", "namesrvAddr": "$APACHE_NS",
 "grpcServerPort": $grpc_port, "remotingListenPort": $remoting_port}
EOF
  # shellcheck disable=SC2086
  java -Xmx1g -XX:MaxDirectMemorySize=512m $APACHE_OPENS -Duser.home="$d" -Drocketmq.home.dir="$d" \
    -Dcom.rocketmq.proxy.configPath="$d/rmq-proxy.json" -cp "$cp" \
    org.apache.rocketmq.proxy.ProxyStartup -pm local -bc "$d/broker.conf" -pc "$d/rmq-proxy.json" \
    > "$d/out.log" 2>&1 &
  APACHE_PID=$!
  apache_wait_port "$grpc_port" 180 || return 1
  APACHE_GRPC=127.0.0.1:$grpc_port
  # The proxy's port opens before its broker has registered with the name server; a topic
  # made for the cluster before then is made on no broker at all, and mqadmin says success.
  local i
  for ((i = 0; i < 60; i++)); do
    apache_admin clusterList >/dev/null && grep -q rocklet-bench "$APACHE_DIR/admin.log" && break
    sleep 1
  done
  [ "$i" -lt 60 ] || { echo "apache: the broker did not register with the name server in 60 s"; return 1; }
  echo "apache: name server $APACHE_NS, proxy (local mode) gRPC $APACHE_GRPC, pid $APACHE_PID"
}

apache_admin() {
  # shellcheck disable=SC2086
  timeout 120 java -Xmx256m $APACHE_OPENS -Duser.home="$APACHE_DIR/admin" -cp "$APACHE_JARS/*" \
    org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$APACHE_NS" > "$APACHE_DIR/admin.log" 2>&1 \
    || { tail -20 "$APACHE_DIR/admin.log"; echo "apache: mqadmin $1 failed"; return 1; }
}

apache_topic() {
  if [ "$2" = NORMAL ]; then
    apache_admin updateTopic -c "$APACHE_CLUSTER" -t "$1"
  else
    apache_admin updateTopic -c "$APACHE_CLUSTER" -t "$1" -a "+message.type=$2"
  fi
}

apache_group() { apache_admin updateSubGroup -c "$APACHE_CLUSTER" -g "$1"; }

apache_stop() {
  local p
  for p in "$APACHE_PID" "$APACHE_NS_PID"; do
    [ -n "$p" ] && kill "$p" 2>/dev/null
  done
  for p in "$APACHE_PID" "$APACHE_NS_PID"; do
    [ -n "$p" ] && wait "$p" 2>/dev/null
  done
  APACHE_PID=; APACHE_NS_PID=
}
