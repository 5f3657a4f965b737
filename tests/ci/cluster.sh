#!/usr/bin/env bash
# Cluster mode (issue #14): 3-node broker groups on a real etcd (Debian's etcd-server,
# installed here if missing), processes on 127.0.0.1 only. The tests start etcd themselves on
# free ports in a temporary directory:
# - broker/tests/cluster.rs (own gRPC test client): the master killed with SIGKILL
#   ROCKLET_CLUSTER_KILLS times (default 10) under load, every acknowledged message
#   delivered, none rolled back delivered, failover p50/max printed; a divergent tail cut on
#   rejoin; etcd frozen (fencing); the new master carrying on; v4 routes; async replication.
# - broker/tests/cluster_clients.rs (official clients, unmodified): producers on the Python v5
#   client (rocketmq-python-client 5.1.2) and the v4 Java client (rocketmq-client 5.5.0) while
#   the master is killed ROCKLET_CLUSTER_KILLS times; every acknowledged message delivered,
#   open transactions checked by the new master, nothing rolled back delivered, failover
#   p50/max per client printed and asserted (v4: p50 < 1 s, max < 3 s; its routes polled at
#   the client's default 30 s, so it fails over through a replica forwarding its writes).
# - broker/tests/cluster_groups.rs (official Python v5 and v4 Java clients): groups g1 and g2
#   host one topic (placement in etcd); each client's sends land on both, a consumer of each
#   receives from both; g1's master killed, routes name only g2 and g2 keeps serving both
#   clients' sends and receives.
# - broker/tests/cluster_faults.rs (issue #32; every replication link through a proxy that
#   can stall or cut one replica's link, etcd links through cuttable proxies): a replica
#   SIGSTOPped 15 s (on a 3-member etcd) and a replica's link stalled 10 s then cut 5 s, writes
#   going on within 3 s; async replication with the replicas 10 s behind and the master
#   killed, nothing acknowledged earlier than the stated bound (4 s) before the kill lost; the
#   master cut from etcd, its clients answered by the new master within 3 s.
# - broker/tests/cluster_rolling.rs (issue #33; official Python v5 and v4 Java producers): a
#   rolling restart with SIGTERM, the replicas first, the master last (it hands mastership to
#   an in-sync replica, and passes requests on until its clients' routes have moved, before
#   it stops), then `rocklet admin cluster handoff`; nothing acknowledged lost, nothing rolled
#   back delivered, the longest gap between acknowledgements printed per client and asserted
#   (< 1 s for both).
# - broker/tests/cluster_backup.rs: `rocklet admin backup` against a replica's listener, the
#   backup restored into a standalone broker that serves every acknowledged message.
# - sim/ (rocklet-sim, issue #32 item 2): a deterministic simulation of a whole group under
#   faults, ROCKLET_SIM_SEEDS seeds (default 1500) of sync and of async replication, every
#   invariant of broker/README.md's "The simulation" checked; a failing seed is printed with
#   its history (replay: cargo run -p rocklet-sim --release -- --seed N [--async]).
# Installs into .tools/cluster (gitignored), idempotently: a venv with the Python client, the
# v4 client's jars (Maven Central), V4Producer and V4Groups compiled with javac.
# Long form: ROCKLET_CLUSTER_KILLS=100 bash tests/ci/cluster.sh; the simulation's long form is
# in broker/README.md ("The simulation").
# Run from anywhere: bash tests/ci/cluster.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/cluster
VENV=$TOOLS/venv
PY=${PYTHON:-python3}
PY_CLIENT="rocketmq-python-client==5.1.2"
CLIENTS=$ROOT/broker/tests/cluster-clients
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS"
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
if ! command -v etcd >/dev/null; then
  echo "== etcd: install Debian's etcd-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi
etcd --version | sed -n 1p
# Debian's package may start a system etcd on 2379; the tests use their own on free ports.

SIM_SEEDS=${ROCKLET_SIM_SEEDS:-1500}
echo "== simulation: $SIM_SEEDS seeds per replication mode"
cargo build -p rocklet-sim --release --locked
cargo run -q -p rocklet-sim --release --locked -- --seeds "$SIM_SEEDS"
cargo run -q -p rocklet-sim --release --locked -- --seeds "$SIM_SEEDS" --async

echo "== clients: install (idempotent)"
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -c 'import rocketmq' 2>/dev/null || "$VENV/bin/python" -m pip install -q "$PY_CLIENT"
if ! command -v javac >/dev/null || ! command -v mvn >/dev/null; then
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
JARS=$TOOLS/jars
# The jars are fetched again only when the pom changes.
if ! cmp -s "$CLIENTS/pom.xml" "$JARS/.pom" 2>/dev/null; then
  rm -rf "$JARS"
  (cd "$CLIENTS" && mvn -q -B -Dmaven.repo.local="$TOOLS/m2" dependency:copy-dependencies \
    -DoutputDirectory="$JARS" -DincludeScope=runtime)
  cp "$CLIENTS/pom.xml" "$JARS/.pom"
fi
rm -rf "$TOOLS/classes"
javac -d "$TOOLS/classes" -cp "$JARS/*" "$CLIENTS/V4Producer.java" "$CLIENTS/V4Groups.java"

echo "== cluster tests (kills: ${ROCKLET_CLUSTER_KILLS:-10})"
export ROCKLET_PYTHON=$VENV/bin/python ROCKLET_V4_CLASSPATH="$JARS/*:$TOOLS/classes"
nice cargo test -p rocklet-broker --locked --test cluster --test cluster_clients --test cluster_partition --test cluster_groups --test cluster_faults --test cluster_rolling --test cluster_backup -- --include-ignored --test-threads 1 --nocapture 2>&1 \
  | grep -vE "^\s+(at |[0-9]+: )"
echo "cluster: ok in $(( $(date +%s) - t0 ))s"
