#!/usr/bin/env bash
# Benchmark smoke (seconds, debug builds): every `rocklet bench` mode embedded (memory and
# file, sync and async flush), against a broker process it starts (gRPC), the recovery mode,
# and the peers (SQLite outbox, fsync ceiling), so the tooling cannot rot. Each run checks
# correctness (every committed message consumed exactly once, no rolled-back message consumed,
# no delayed message early, FIFO runs each message group in order) and exits non-zero otherwise. The full measurement is
# tests/bench/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }
export CARGO_TERM_COLOR=never
cargo build -p rocklet-broker --locked --bin rocklet
CARGO_TARGET_DIR="$PWD/target" cargo build --locked --manifest-path tests/bench/Cargo.toml
B=target/debug/rocklet
work=$(mktemp -d "${TMPDIR:-/tmp}/rocklet-bench-ci.XXXXXX")
broker_pid=
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
common=(--count 300 --clients 4 --consumers 2 --size 256 --mix 6:2:2 --check-after-ms 300
        --delay-max-ms 800 --drain-timeout 20 --quiet)
run() { echo "+ rocklet bench $*"; "$B" bench "$@"; }

for mode in send txn delay consume; do
  run "$mode" --embedded "${common[@]}"
done
run consume --embedded --fifo --message-groups 8 "${common[@]}"
run txn --embedded --storage file --dir "$work" --flush sync "${common[@]}"
run txn --embedded --storage file --dir "$work" --flush async "${common[@]}"
run txn --embedded --backlog 2000 --backlog-check-after-ms 60000 "${common[@]}"
run txn --embedded --backlog 500 "${common[@]}"
run recover --dir "$work" --count 2000 --quiet
# Bounded restart (issue 31 item 3): a checkpoint per MB of log while filling, as the
# broker's schedule; the reopen after the simulated kill -9 must replay exactly the records
# after the newest one (the run counts them and fails otherwise).
run recover --dir "$work/checkpointed" --count 5000 --checkpoint-every 1000000 --quiet \
  | tee "$work/recover.out"
grep -q '^checkpoints: [1-9][0-9]* while filling' "$work/recover.out" \
  || { echo "the recover run recorded no checkpoint"; exit 1; }
# Memory per stored message (issue 31): the resident set every 50k stored messages, and its
# slope per message at the end (docs/benchmarks.md, "Memory per stored message"). The run
# fails when the broker's RSS grows by more than 2 MB per million stored messages (2 bytes a
# message; the consume queues in memory took 16, the issue's target is 1.3 over 50M; measured
# after they went to disk: ~0.02).
run send --embedded --storage file --dir "$work" --size 16 --flush async --count 200000 \
  --rss-every 50000 --rss-max-per-million 2000000 --quiet | tee "$work/rss.out"
[ "$(grep -c '^rss: messages_stored=[0-9]* rss_bytes=[0-9]' "$work/rss.out")" -eq 4 ] \
  || { echo "expected 4 rss sample lines"; exit 1; }
grep -q '^rss per stored message: [0-9.]* bytes' "$work/rss.out" || { echo "no rss slope line"; exit 1; }
grep -q '^rss per million stored messages: [0-9.]* MiB' "$work/rss.out" \
  || { echo "no rss per million line"; exit 1; }
# Retention's cost (issue 31 item 2): every sealed segment retired every 2,000 stored
# messages while txns run (pending halves and delays carried forward); the run's own checks
# (exactly once, nothing early) must hold across it (docs/benchmarks.md, "Retention").
run txn --embedded --storage file --dir "$work" --flush sync --segment-size 262144 \
  --retain-every 2000 --count 6000 --clients 4 --consumers 2 --size 256 --mix 6:2:2 \
  --check-after-ms 300 --delay-max-ms 800 --drain-timeout 20 --quiet | tee "$work/retain.out"
grep -q '^retention: [0-9]* runs, [1-9][0-9]* segments retired' "$work/retain.out" \
  || { echo "retention retired nothing"; exit 1; }

# A broker process over gRPC loopback (a free port; the address is read from its log).
cat > "$work/broker.toml" <<TOML
[core]
transaction_timeout_ms = 300
TOML
"$B" broker --data-dir "$work/data" --listen 127.0.0.1:0 --config "$work/broker.toml" \
  >"$work/broker.log" 2>&1 &
broker_pid=$!
addr=
for _ in $(seq 1 200); do
  addr=$(grep -o 'addr=127\.0\.0\.1:[0-9]*' "$work/broker.log" | head -1 | cut -d= -f2 || true)
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || { echo "broker did not start:"; cat "$work/broker.log"; exit 1; }
for mode in send txn delay consume; do
  run "$mode" --endpoint "$addr" "${common[@]}"
done
# The broker's own CPU per message, read from /proc/<pid>/stat before and after.
run send --endpoint "$addr" --broker-pid "$broker_pid" "${common[@]}" | tee "$work/cpu.out"
grep -q '^broker CPU [0-9.]* µs per message' "$work/cpu.out" || { echo "no broker CPU line"; exit 1; }
run consume --endpoint "$addr" --fifo --topic RockletBenchFifo --group RockletBenchFifo "${common[@]}"
# The v4 path as v4 clients take it (issue 34): the name server's route, then the broker it
# names (tests/bench/v4-vs-apache.sh runs the same against Apache RocketMQ 5.5.0).
ns=$(sed -n 's/.*namesrv=Some(\([^)]*\)).*/\1/p' "$work/broker.log" | head -1)
[ -n "$ns" ] || { echo "no name server address in the broker log"; exit 1; }
run send --remoting "$ns" --broker-pid "$broker_pid" --count 300 --clients 4 --size 256 \
  --drain-timeout 20 --quiet | tee "$work/v4.out"
grep -q "(the route of name server $ns)" "$work/v4.out" || { echo "the v4 run did not use the name server"; exit 1; }
kill "$broker_pid"; wait "$broker_pid" || true; broker_pid=

# Backup and restore (issue 31, item 4): a full backup of a broker process's log, an
# incremental one after more writes (it must copy less), the restore opened by a broker
# (docs/benchmarks.md, "Backup and restore", is the same script at 1.5 GB).
echo "+ tests/bench/backup.sh (2000 + 500 messages of 4 KiB, 8 MiB segments)"
bash tests/bench/backup.sh "$B" "$work/backup-bench" 2000 4096 500 8388608

# The stack's floors (tests/bench/floor.sh measures them): the same bench, exactly once,
# against broker/examples/grpc_floor.rs and remoting_floor.rs.
cargo build -p rocklet-broker --locked --example grpc_floor --example remoting_floor
floor() { # $1 example, $2 the address's pattern in its log; sets broker_pid and addr
  target/debug/examples/"$1" 127.0.0.1:0 >"$work/$1.log" 2>&1 &
  broker_pid=$!
  addr=
  for _ in $(seq 1 200); do
    addr=$(grep -oE "$2" "$work/$1.log" | head -1 | grep -oE '127\.0\.0\.1:[0-9]+' || true)
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "$1 did not start:"; cat "$work/$1.log"; exit 1; }
}
floor grpc_floor 'addr=127\.0\.0\.1:[0-9]+'
# Commits only: the floor holds a prepared message until its end and asks no checks.
for mode in send txn; do
  run "$mode" --endpoint "$addr" --broker-pid "$broker_pid" --count 300 --clients 4 --consumers 2 \
    --size 256 --drain-timeout 20 --quiet
done
kill "$broker_pid"; wait "$broker_pid" || true; broker_pid=
floor remoting_floor 'remoting=127\.0\.0\.1:[0-9]+'
run send --remoting "$addr" --broker-pid "$broker_pid" --count 300 --clients 4 --size 256 --drain-timeout 20 --quiet
kill "$broker_pid"; wait "$broker_pid" || true; broker_pid=

P=target/debug
echo "+ outbox-sqlite (NORMAL, FULL)"
"$P/outbox-sqlite" --dir "$work" --count 300 --size 256 --threads 4 --sync normal
"$P/outbox-sqlite" --dir "$work" --count 30 --size 256 --threads 4 --sync full
echo "+ fsync-ceiling"
"$P/fsync-ceiling" --dir "$work" --seconds 0.3
echo "bench smoke: OK"
