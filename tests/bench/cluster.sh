#!/usr/bin/env bash
# Cluster mode benchmarks (issue #14): transactions (prepare + commit, 1 KiB, 16 clients over
# gRPC) against one broker with sync flush, then a 3-node group on etcd with sync and with
# async replication (every node with sync flush), then the rate at which a replica that was
# down catches up. Everything on this machine: etcd, the three brokers and the bench share its
# cores, so read ratios rather than absolute figures.
#
#   bash tests/bench/cluster.sh [ROCKLET_BINARY]     # default target/release/rocklet
#   SECS=20 ...                                       # seconds per run (default 10)
#
# Prints a Markdown section on stdout (tests/bench/run.sh appends it to docs/benchmarks.md);
# raw outputs in target/bench-cluster/.
set -euo pipefail
cd "$(dirname "$0")/../.."
R=${1:-target/release/rocklet}
[ -x "$R" ] || { echo "no $R: build it (cargo build --release -p rocklet-broker)" >&2; exit 1; }
command -v etcd >/dev/null || { echo "etcd not found: apt-get install etcd-server" >&2; exit 1; }
SECS=${SECS:-10}
out=$PWD/target/bench-cluster
rm -rf "$out"; mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
result() { grep '^result:' "$1" | tr ' ' '\n' | grep "^$2=" | cut -d= -f2; }
fsyncs() { curl -s "http://127.0.0.1:$1/metrics" | awk '/^rocklet_fsyncs_total /{print $2}'; }
bench() { # name endpoint metrics-port -> txn/s, p99 ms, the measured broker's fsyncs per txn
  local f0 f1 ops
  f0=$(fsyncs "$3")
  nice "$R" bench txn --endpoint "$2" --duration "$SECS" --clients 16 --size 1024 >"$out/$1.out" 2>&1 || true
  f1=$(fsyncs "$3"); ops=$(result "$out/$1.out" ops)
  echo "$(result "$out/$1.out" per_s) $(result "$out/$1.out" p99_ms)" \
    "$(python3 -c "print(f'{(${f1:-0}-${f0:-0})/max(1,${ops:-0}):.3f}')" 2>/dev/null || echo "?")"
}
wait_port() { for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; return 1; }

# One broker.
p=$(port); sm=$(port)
"$R" broker --listen 127.0.0.1:$p --metrics-listen 127.0.0.1:$sm --remoting-listen off --namesrv-listen off --flush sync \
  --data-dir "$out/single" >"$out/single.log" 2>&1 & pids+=($!)
wait_port "$p"
read -r single_tps single_p99 single_fs < <(bench single 127.0.0.1:$p "$sm")
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true

group() { # mode -> starts etcd + 3 nodes, sets ports[] eps[] mports[]
  ec=$(port); ep=$(port)
  etcd --data-dir "$out/etcd-$1" --listen-client-urls http://127.0.0.1:$ec --advertise-client-urls http://127.0.0.1:$ec \
    --listen-peer-urls http://127.0.0.1:$ep --initial-advertise-peer-urls http://127.0.0.1:$ep \
    --initial-cluster default=http://127.0.0.1:$ep >"$out/etcd-$1.log" 2>&1 & pids+=($!)
  wait_port "$ec"
  ports=(); mports=(); nodes=()
  for i in 1 2 3; do
    local gp mp; gp=$(port); mp=$(port); ports+=("$gp"); mports+=("$mp")
    "$R" broker --listen 127.0.0.1:$gp --metrics-listen 127.0.0.1:$mp --remoting-listen off --namesrv-listen off \
      --flush sync --data-dir "$out/$1-n$i" --cluster etcd=http://127.0.0.1:$ec --broker-name bench \
      --node-id $i --replication "$1" >"$out/$1-n$i.log" 2>&1 & pids+=($!); nodes+=($!)
  done
  for gp in "${ports[@]}"; do wait_port "$gp"; done
  # The master: the node whose metrics say it has an epoch.
  master=
  for _ in $(seq 100); do
    for i in 0 1 2; do
      e=$(curl -s "http://127.0.0.1:${mports[$i]}/metrics" | awk '/^rocklet_cluster_master_epoch /{print $2}')
      if [ "${e:-0}" != 0 ]; then master=$i; break 2; fi
    done
    sleep 0.1
  done
  [ -n "$master" ] || { echo "no master elected" >&2; exit 1; }
  # Until the SyncStateSet holds all three.
  for _ in $(seq 100); do
    n=$(curl -s "http://127.0.0.1:${mports[$master]}/metrics" | awk '/^rocklet_cluster_in_sync_replicas /{print $2}')
    [ "${n:-0}" = 3 ] && break; sleep 0.1
  done
}
stop_group() { cleanup; pids=(); }

group sync
read -r sync_tps sync_p99 sync_fs < <(bench sync 127.0.0.1:${ports[$master]} "${mports[$master]}")
# Catch-up: one replica down while the master takes writes, then back.
r=$(( (master + 1) % 3 ))
kill -9 "${nodes[$r]}"; wait "${nodes[$r]}" 2>/dev/null || true
nice "$R" bench send --endpoint 127.0.0.1:${ports[$master]} --duration "$SECS" --clients 16 --size 1024 >"$out/behind.out" 2>&1 || true
lag=$(curl -s "http://127.0.0.1:${mports[$master]}/metrics" | awk -v n=$((r + 1)) '$1 == "rocklet_cluster_replication_lag_bytes{replica=\""n"\"}" {print $2}')
t0=$(date +%s.%N)
"$R" broker --listen 127.0.0.1:${ports[$r]} --metrics-listen 127.0.0.1:${mports[$r]} --remoting-listen off --namesrv-listen off \
  --flush sync --data-dir "$out/sync-n$((r + 1))" --cluster etcd=http://127.0.0.1:$ec --broker-name bench \
  --node-id $((r + 1)) >>"$out/sync-n$((r + 1)).log" 2>&1 & pids+=($!)
caught=
for _ in $(seq 600); do
  l=$(curl -s "http://127.0.0.1:${mports[$master]}/metrics" | awk -v n=$((r + 1)) '$1 == "rocklet_cluster_replication_lag_bytes{replica=\""n"\"}" {print $2}')
  if [ "${l:-1}" = 0 ] && grep -q "following the master" "$out/sync-n$((r + 1)).log"; then caught=$(date +%s.%N); break; fi
  sleep 0.05
done
stop_group
group async
read -r async_tps async_p99 async_fs < <(bench async 127.0.0.1:${ports[$master]} "${mports[$master]}")
stop_group

ratio() { python3 -c "print(f'{$1/$2:.2f}')" 2>/dev/null || echo "?"; }
catch_s=$( [ -n "$caught" ] && python3 -c "print(f'{$caught-$t0:.2f}')" || echo "?")
rate=$( [ -n "$caught" ] && [ -n "${lag:-}" ] && python3 -c "print(f'{${lag}/($caught-$t0)/1048576:.1f}')" || echo "?")
cat <<MD
## Cluster mode (issue #14)

\`bash tests/bench/cluster.sh $R\` on $(date -u '+%Y-%m-%d'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end:
transactions (prepare + commit, 1 KiB, 16 gRPC clients, ${SECS} s) against the master. etcd,
all three brokers and the bench share this machine's cores, so the ratios say more than the
figures. Every node runs \`--flush sync\`.

| setup | txn/s | p99 ms | vs single | master's fsyncs per txn |
|---|---|---|---|---|
| one broker, sync flush | ${single_tps:-?} | ${single_p99:-?} | 1.00 | ${single_fs:-?} |
| 3 nodes, sync replication (2 of 3, all of the SyncStateSet) | ${sync_tps:-?} | ${sync_p99:-?} | $(ratio "${sync_tps:-0}" "${single_tps:-1}") | ${sync_fs:-?} |
| 3 nodes, async replication | ${async_tps:-?} | ${async_p99:-?} | $(ratio "${async_tps:-0}" "${single_tps:-1}") | ${async_fs:-?} |

Replica catch-up: a replica down while the master took ${SECS} s of sends was ${lag:-?} bytes
behind; restarted, it held the whole log again after ${catch_s} s (${rate} MiB/s, start-up and
recovery included). Failover time is measured by \`tests/ci/cluster.sh\` (kill -9 of the
master to the first acknowledgement by the new one, see broker/README.md).
MD
