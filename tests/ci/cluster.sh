#!/usr/bin/env bash
# Cluster mode (issue #14): a 3-node broker group on a real etcd (Debian's etcd-server,
# installed here if missing), processes on 127.0.0.1 only. The tests start etcd themselves on
# free ports in a temporary directory (broker/tests/cluster.rs): the master killed with
# SIGKILL ROCKLET_CLUSTER_KILLS times (default 10) under load — every acknowledged message
# delivered, none rolled back delivered, failover p50/max printed — and a divergent tail cut
# on rejoin. Long form: ROCKLET_CLUSTER_KILLS=100 bash tests/ci/cluster.sh
# Run from anywhere: bash tests/ci/cluster.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
if ! command -v etcd >/dev/null; then
  echo "== etcd: install Debian's etcd-server"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
fi
etcd --version | head -1
# Debian's package may start a system etcd on 2379; the tests use their own on free ports.
echo "== cluster tests (kills: ${ROCKLET_CLUSTER_KILLS:-10})"
nice cargo test -p rocklet-broker --locked --test cluster -- --include-ignored --test-threads 1 --nocapture 2>&1 \
  | grep -vE "^\s+(at |[0-9]+: )"
echo "cluster: ok in $(( $(date +%s) - t0 ))s"
