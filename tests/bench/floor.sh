#!/usr/bin/env bash
# The floor of the gRPC serving stack (issue #16): the same `rocklet bench send|txn
# --endpoint … --broker-pid …` against `rocklet broker --flush async` and against
# broker/examples/grpc_floor.rs (the broker's tonic/h2 settings and protocol types, an
# in-memory queue behind them), interleaved over ROUNDS rounds (the order alternates), each
# server started fresh per round; and `rocklet bench send --remoting` against the broker's
# remoting listener and against broker/examples/remoting_floor.rs (the broker's remoting
# codec and record encoder, the same in-memory idea). One line per run: server, work, ops/s,
# server CPU per op.
# PROFILE=1 then profiles the floor under the send bench with `perf record -g`.
#
#   bash tests/bench/floor.sh     # ROUNDS=3 SECS=10; outputs in $CARGO_TARGET_DIR/bench-floor/
set -uo pipefail
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-$PWD/target}
nice cargo build --release --locked -p rocklet-broker --bin rocklet --example grpc_floor --example remoting_floor || exit 1
R=$T/release/rocklet
F=$T/release/examples/grpc_floor
RF=$T/release/examples/remoting_floor
out=${OUT:-$T/bench-floor}; rm -rf "$out"; mkdir -p "$out"
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-10}
echo "start $(date -u) commit $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg)"

# Starts a server (broker|floor|rfloor) for round $2; sets pid, addr (gRPC) and raddr
# (remoting).
start() {
  local who=$1 log=$out/$1_$2.log
  case $who in
    broker) rm -rf "$out/data"
      "$R" broker --data-dir "$out/data" --listen 127.0.0.1:0 --flush async > "$log" 2>&1 & ;;
    floor) "$F" 127.0.0.1:0 > "$log" 2>&1 & ;;
    rfloor) "$RF" 127.0.0.1:0 > "$log" 2>&1 & ;;
  esac
  pid=$!
  addr=; raddr=
  while [ -z "$addr$raddr" ] || { [ "$who" = broker ] && [ -z "$raddr" ]; }; do
    kill -0 "$pid" 2>/dev/null || { echo "$who died:"; cat "$log"; exit 1; }
    sleep 0.05
    addr=$(grep -o ' addr=127\.0\.0\.1:[0-9]*' "$log" | head -1 | cut -d= -f2)
    raddr=$(grep -oE 'remoting=(Some\()?127\.0\.0\.1:[0-9]+' "$log" | head -1 | grep -oE '127\.0\.0\.1:[0-9]+')
  done
}

field() { grep -E '^result:' "$1" | grep -o " $2=[^ ]*" | cut -d= -f2; }

line() {
  local who=$1 round=$2 k=$3 o=$4
  printf '%-6s round %s %-13s ok=%s ops/s=%s p99_ms=%s server_cpu_us_per_op=%s bench_cpu_us=%s load=%s\n' \
    "$who" "$round" "$k" "$(field "$o" ok)" "$(field "$o" per_s)" "$(field "$o" p99_ms)" \
    "$(field "$o" broker_cpu_us)" "$(field "$o" bench_cpu_us)" "$(cut -d' ' -f1 /proc/loadavg)"
}

# gRPC send and txn, then (broker) remoting send against the same process.
run() {
  local who=$1 round=$2
  start "$who" "$round"
  for k in send txn; do
    local o=$out/${who}_${k}_$round.out
    "$R" bench $k --endpoint "$addr" --broker-pid "$pid" --clients 16 --consumers 8 --drain-timeout 120 --duration "$SECS" --quiet > "$o" 2>&1
    line "$who" "$round" "$k" "$o"
  done
  if [ "$who" = floor ]; then
    kill "$pid"; wait "$pid" 2>/dev/null
    start rfloor "$round"; who=rfloor
  fi
  local o=$out/${who}_remoting_$round.out
  "$R" bench send --remoting "$raddr" --broker-pid "$pid" --clients 16 --drain-timeout 120 --duration "$SECS" --quiet > "$o" 2>&1
  line "$who" "$round" "remoting-send" "$o"
  kill "$pid"; wait "$pid" 2>/dev/null
}

for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then run broker "$r"; run floor "$r"; else run floor "$r"; run broker "$r"; fi
done
rm -rf "$out/data"
echo "end $(date -u) load $(cut -d' ' -f1-3 /proc/loadavg)"

# Profiles server $1 (floor|rfloor) under one send run over $2 (endpoint|remoting); prints
# the grouped self-time shares and the syscalls' inclusive shares (pattern $3).
profile() {
  local who=$1 via=$2 calls=$3 a
  start "$who" profile
  local extra=()
  if [ "$via" = endpoint ]; then a=$addr; extra=(--consumers 8); else a=$raddr; fi
  "$PERF" record -g -F 999 -p "$pid" -o "$out/$who-send.perf" > "$out/perf-record-$who.log" 2>&1 &
  local ppid=$!
  sleep 0.5
  "$R" bench send --"$via" "$a" --broker-pid "$pid" --clients 16 "${extra[@]}" --drain-timeout 120 --duration "$SECS" --quiet > "$out/${who}_send_profile.out" 2>&1
  kill -INT "$ppid"; wait "$ppid" 2>/dev/null
  kill "$pid"; wait "$pid" 2>/dev/null
  echo "profiled ($who): $(grep -E '^result:' "$out/${who}_send_profile.out")"
  "$PERF" report -i "$out/$who-send.perf" --no-children --sort dso,sym --stdio 2>/dev/null \
    | grep -E '^ +[0-9]' > "$out/$who-send.self.txt"
  echo "self-time by symbol: $out/$who-send.self.txt; grouped (tests/bench/perf-groups.py):"
  python3 tests/bench/perf-groups.py < "$out/$who-send.self.txt"
  echo "inclusive, by syscall:"
  "$PERF" report -i "$out/$who-send.perf" --children --sort sym --stdio -g none 2>/dev/null \
    | grep -E "\] ($calls)\$"
}

if [ "${PROFILE:-0}" = 1 ]; then
  PERF=${PERF:-$(command -v perf || ls /usr/bin/perf_* 2>/dev/null | tail -1)}
  profile floor endpoint 'entry_SYSCALL_64_after_hwframe|__GI___writev|__libc_recv|epoll_wait|syscall|do_futex|net_rx_action|schedule'
  profile rfloor remoting 'entry_SYSCALL_64_after_hwframe|__GI___writev|__libc_write|__libc_recv|__libc_read|read|write|epoll_wait|syscall|do_futex|net_rx_action|schedule'
fi
