#!/usr/bin/env bash
# The full benchmark run: builds release binaries, measures Rocklet (core, embedded file
# storage, broker over gRPC loopback, backlog, delays, recovery, memory, start-up) and its
# peers (SQLite outbox, PostgreSQL outbox when a local PostgreSQL is installed, the disk's
# fsync ceiling) in one go, and rewrites docs/benchmarks.md.
#
#   bash tests/bench/run.sh            # full run (a few minutes)
#   QUICK=1 bash tests/bench/run.sh    # smaller counts, same sections (a sanity check)
#   NO_PG=1 ...                        # skip PostgreSQL
#
# Raw outputs stay in target/bench-run/ for the record.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/target/bench-run
rm -rf "$out"; mkdir -p "$out"
doc=$root/docs/benchmarks.md
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
q() { if [ -n "${QUICK:-}" ]; then echo "$2"; else echo "$1"; fi; }

echo "== building (release)"
nice cargo build --release --locked -p rocklet-broker --bin rocklet || exit 1
nice cargo build --release --locked -p rocklet-core --features std --example send_loop --example pending_memory || exit 1
CARGO_TARGET_DIR=$root/target nice cargo build --release --locked --manifest-path tests/bench/Cargo.toml || exit 1
R=$root/target/release/rocklet
EX=$root/target/release/examples
P=$root/target/release
data=$root/target/bench-data
mkdir -p "$data"
failed=()

# Runs a measurement, keeps its output; `res NAME KEY` reads a `result:` field back.
m() {
  local name=$1; shift
  echo "== $name: $*"
  if "$@" >"$out/$name.out" 2>"$out/$name.err"; then :; else
    echo "   FAILED (exit $?): see $out/$name.out"; failed+=("$name")
  fi
  grep -v '^result:' "$out/$name.out" | sed 's/^/   /'
}
res() { sed -n 's/^result: //p' "$out/$1.out" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
line() { grep -m1 "$2" "$out/$1.out" 2>/dev/null || echo "(not measured)"; }
ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
pct() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { if (b > 0) printf "%.0f %%", 100 * a / b; else printf "n/a" }'; }

COUNT_FILE=$(q 200000 20000)
SYNC_SECS=$(q 10 3)
GRPC_SECS=$(q 10 3)
BACKLOG=$(q 1000000 100000)

# --- fsync ceiling --------------------------------------------------------------------------
m fsync "$P/fsync-ceiling" --dir "$data" --seconds "$(q 5 2)" --size 4096

# --- core in memory, one thread (no consumer) -----------------------------------------------
# The allocation-free path (send_ref, prepare_ref + end_transaction) with the log's memory
# prepared ahead and growing into fresh pages, and the owned-Request path through execute.
m core_send "$EX/send_loop" send "$(q 2000000 200000)" prepared
m core_txn "$EX/send_loop" txn "$(q 1000000 100000)" prepared
m core_send_fresh "$EX/send_loop" send "$(q 2000000 200000)" fresh
m core_txn_fresh "$EX/send_loop" txn "$(q 1000000 100000)" fresh
m core_send_request "$EX/send_loop" send-request "$(q 2000000 200000)" fresh
m core_txn_request "$EX/send_loop" txn-request "$(q 1000000 100000)" fresh
core_send=$(grep -o ': [0-9]*/s' "$out/core_send.out" | head -1 | tr -dc '0-9')
core_txn=$(grep -o ': [0-9]*/s' "$out/core_txn.out" | head -1 | tr -dc '0-9')
core_send_fresh=$(grep -o ': [0-9]*/s' "$out/core_send_fresh.out" | head -1 | tr -dc '0-9')
core_txn_fresh=$(grep -o ': [0-9]*/s' "$out/core_txn_fresh.out" | head -1 | tr -dc '0-9')

# --- embedded file storage, async and sync flush, with consumers and the correctness check ----
m emb_async "$R" bench txn --embedded --storage file --dir "$data" --flush async --clients 16 --count "$COUNT_FILE" --quiet
m emb_sync16 "$R" bench txn --embedded --storage file --dir "$data" --flush sync --clients 16 --duration "$SYNC_SECS" --quiet
m emb_sync64 "$R" bench txn --embedded --storage file --dir "$data" --flush sync --clients 64 --duration "$SYNC_SECS" --quiet
# The disk's fsync rate moves a lot from minute to minute here: measure it again right after.
m fsync_after "$P/fsync-ceiling" --dir "$data" --seconds "$(q 5 2)" --size 4096

# --- peers: SQLite outbox at equal durability ---------------------------------------------------
m sqlite_normal "$P/outbox-sqlite" --dir "$data" --count "$COUNT_FILE" --size 1024 --threads 16 --sync normal
m sqlite_full "$P/outbox-sqlite" --dir "$data" --count "$(q 2000 400)" --size 1024 --threads 16 --sync full

# --- the broker process: start-up time, idle RSS, gRPC loopback --------------------------------
start_broker() { # $1 = flush mode; sets bpid, baddr, startup_ms
  local d=$data/broker-$1
  rm -rf "$d"
  local t0 t1
  t0=$(date +%s%N)
  "$R" broker --data-dir "$d" --listen 127.0.0.1:0 --flush "$1" >"$out/broker-$1.log" 2>&1 &
  bpid=$!
  baddr=
  while [ -z "$baddr" ]; do
    baddr=$(grep -o 'addr=127\.0\.0\.1:[0-9]*' "$out/broker-$1.log" | head -1 | cut -d= -f2)
    kill -0 "$bpid" 2>/dev/null || { echo "broker died"; cat "$out/broker-$1.log"; return 1; }
    [ -n "$baddr" ] || sleep 0.001
  done
  t1=$(date +%s%N)
  startup_ms=$(( (t1 - t0) / 1000000 ))
}
stop_broker() { kill "$bpid" 2>/dev/null; wait "$bpid" 2>/dev/null; }
rss_kib() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }

startups=()
for i in 1 2 3 4 5; do
  start_broker async || break
  startups+=("$startup_ms")
  if [ "$i" = 1 ]; then sleep 2; idle_rss=$(rss_kib "$bpid"); fi
  stop_broker
done
startup_med=$(printf '%s\n' "${startups[@]}" | sort -n | sed -n 3p)
echo "== broker start-up (5 starts, ms): ${startups[*]}; idle RSS ${idle_rss:-?} KiB"

start_broker async
# --broker-pid: the broker process's own CPU time per message, from /proc (independent of
# how loaded the shared machine is).
m grpc_async_txn "$R" bench txn --endpoint "$baddr" --broker-pid "$bpid" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
m grpc_async_send "$R" bench send --endpoint "$baddr" --broker-pid "$bpid" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
m grpc_delay "$R" bench delay --endpoint "$baddr" --clients 16 --consumers 8 --drain-timeout 120 --count "$(q 10000 2000)" --delay-max-ms 10000 --quiet
busy_rss=$(rss_kib "$bpid")
stop_broker
start_broker sync
m grpc_sync_txn "$R" bench txn --endpoint "$baddr" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
m grpc_sync_txn64 "$R" bench txn --endpoint "$baddr" --clients 64 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
# FIFO consumption against normal consumption, back to back: messages loaded into the topic's
# 4 queues, then received and acked; FIFO: 32 message groups, one batch per queue in flight.
CONSUME=$(q 100000 20000)
for c in 2 16; do
  m "grpc_consume$c" "$R" bench consume --endpoint "$baddr" --topic "RockletBenchConsume$c" --group "RockletBenchConsume$c" --consumers "$c" --count "$CONSUME" --quiet
  m "grpc_fifo$c" "$R" bench consume --endpoint "$baddr" --fifo --topic "RockletBenchFifo$c" --group "RockletBenchFifo$c" --consumers "$c" --count "$CONSUME" --quiet
done
stop_broker

# --- against Apache RocketMQ 5.5.0 (proxy in local mode), the same bench, same run ----------
# Name server + proxy/broker JVM from Maven jars (tests/bench/apache.sh), async flush, its
# topics (TRANSACTION-typed for txn) and group created with mqadmin; then the same send and
# txn runs as against Rocklet just above, with the JVM's CPU time per message. Skipped with a
# note when Maven Central cannot be reached (NO_APACHE=1 skips it too). The JVM keeps about a
# core busy even idle, so it is stopped before anything else is measured.
# Sourcing only defines functions: apache_free_port serves the PostgreSQL run below too.
# shellcheck source=tests/bench/apache.sh
source tests/bench/apache.sh
apache_status="not run (NO_APACHE=1)"
if [ -z "${NO_APACHE:-}" ]; then
  if apache_install >"$out/apache-install.log" 2>&1; then
    if apache_start "$data/apache" >"$out/apache-start.log" 2>&1 &&
       apache_topic RockletBenchNormal NORMAL && apache_topic RockletBenchTxn TRANSACTION &&
       apache_group RockletBenchConsumer; then
      cat "$out/apache-start.log"
      # A JVM right after its start runs interpreted: warm its JIT up before measuring.
      m apache_warmup "$R" bench send --endpoint "$APACHE_GRPC" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
      m apache_warmup_txn "$R" bench txn --endpoint "$APACHE_GRPC" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
      m apache_send "$R" bench send --endpoint "$APACHE_GRPC" --broker-pid "$APACHE_PID" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
      m apache_txn "$R" bench txn --endpoint "$APACHE_GRPC" --broker-pid "$APACHE_PID" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
      apache_rss=$(rss_kib "$APACHE_PID")
      apache_status=measured
    else
      apache_status="could not start (see target/bench-run/apache-start.log)"
      cat "$out/apache-start.log"
    fi
    apache_stop
  else
    apache_status="skipped: Maven Central unreachable or Java missing (target/bench-run/apache-install.log)"
  fi
fi
echo "== apache: $apache_status"

# --- the cost of authentication and TLS: the same async runs, back to back -----------------
# A broker process with a super user (every call signed and checked) and/or TLS enforcing (a
# CA and certificate made here with openssl); the bench signs with MQv2-HMAC-SHA1 as the
# official clients do and talks TLS with the CA.
pki=$data/pki
rm -rf "$pki"; mkdir -p "$pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=bench CA" -keyout "$pki/ca.key" -out "$pki/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$pki/ext.cnf"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 2 -extfile "$pki/ext.cnf" -out "$pki/server.pem" 2>/dev/null
sec_broker() { # $1 = auth|tls|both|none; sets bpid, baddr
  local d=$data/broker-sec-$1
  rm -rf "$d"; mkdir -p "$d"
  : > "$d.toml"
  case $1 in auth|both) printf '[[auth.users]]\naccess_key = "bench"\nsecret_key = "bench-secret"\nsuper_user = true\n' >> "$d.toml" ;; esac
  case $1 in tls|both) printf '[tls]\nmode = "enforcing"\ncert = "%s"\nkey = "%s"\n' "$pki/server.pem" "$pki/server.key" >> "$d.toml" ;; esac
  "$R" broker --data-dir "$d/data" --listen 127.0.0.1:0 --flush async --config "$d.toml" >"$out/broker-sec-$1.log" 2>&1 &
  bpid=$!
  baddr=
  while [ -z "$baddr" ]; do
    baddr=$(grep -o 'addr=127\.0\.0\.1:[0-9]*' "$out/broker-sec-$1.log" | head -1 | cut -d= -f2)
    kill -0 "$bpid" 2>/dev/null || { echo "broker died"; cat "$out/broker-sec-$1.log"; return 1; }
    [ -n "$baddr" ] || sleep 0.01
  done
}
for v in none auth tls both; do
  flags=()
  case $v in auth|both) flags+=(--access-key bench --secret-key bench-secret) ;; esac
  case $v in tls|both) flags+=(--tls-ca "$pki/ca.pem" --tls-domain localhost) ;; esac
  for mode in send txn; do
    sec_broker "$v" || break
    m "sec_${v}_$mode" "$R" bench "$mode" --endpoint "$baddr" "${flags[@]}" --clients 16 --consumers 8 --drain-timeout 120 --duration "$GRPC_SECS" --quiet
    stop_broker
  done
done

# --- pending backlog: memory, END_TRANSACTION cost, checks ----------------------------------
m pending_mem "$EX/pending_memory" "$BACKLOG"
m backlog0 "$R" bench txn --embedded --clients 1 --count "$(q 300000 50000)" --size 128 --quiet
m backlog1m "$R" bench txn --embedded --clients 1 --count "$(q 300000 50000)" --size 128 --backlog "$BACKLOG" --backlog-check-after-ms 3600000 --quiet
# Punctuality: BACKLOG halves stay pending (immunity) while new transactions, all left unknown,
# started at 5,000/s (--rate: their checks come due spread out, not as one burst), come due
# 1 s after their prepare and are checked.
m punctual "$R" bench txn --embedded --clients 4 --count "$(q 50000 10000)" --size 128 --mix 0:0:1 --check-after-ms 1000 --backlog "$BACKLOG" --backlog-check-after-ms 3600000 --rate 5000 --drain-timeout 120 --quiet
# Burst: all BACKLOG halves come due within the few seconds it took to prepare them.
m punctual_burst "$R" bench txn --embedded --clients 16 --count "$(q 100000 20000)" --size 128 --backlog "$BACKLOG" --check-after-ms 3000 --drain-timeout 300 --quiet

# --- delays: 100k over levels 1 s and 5 s and arbitrary times up to 10 s -------------------
m delay "$R" bench delay --embedded --clients 16 --count "$(q 100000 20000)" --delay-max-ms 10000 --quiet

# --- recovery -------------------------------------------------------------------------------
m recover "$R" bench recover --dir "$data" --count "$(q 1000000 100000)" --size 1024 --quiet

# --- the operator console's first paint: 10k topics, 1M pending transactions ----------------
m console env CONSOLE_BENCH_PENDING="$BACKLOG" nice cargo test --release --locked -q -p rocklet-broker \
  --test console -- --ignored --nocapture first_paint

# --- PostgreSQL outbox (Debian's postgresql, on 127.0.0.1, if installed) --------------------
pg_status="not run"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "${NO_PG:-}" ] && [ -n "$pg_bin" ] && [ -x "$pg_bin/pgbench" ]; then
  pgdir=$(mktemp -d "${TMPDIR:-/tmp}/rocklet-pg.XXXXXX")  # readable by the postgres user
  asuser=()
  if [ "$(id -u)" = 0 ]; then chown postgres: "$pgdir" && asuser=(runuser -u postgres --); fi
  port=$(apache_free_port)  # below the ephemeral range (tests/bench/apache.sh)
  if "${asuser[@]}" "$pg_bin/initdb" -D "$pgdir/db" -A trust -U postgres >"$out/pg-init.log" 2>&1 &&
     "${asuser[@]}" "$pg_bin/pg_ctl" -D "$pgdir/db" -l "$pgdir/log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $pgdir -c max_connections=100" start >>"$out/pg-init.log" 2>&1; then
    psqlc=("$pg_bin/psql" -h 127.0.0.1 -p "$port" -U postgres -q -v ON_ERROR_STOP=1)
    "${psqlc[@]}" -c "CREATE TABLE business(id bigserial PRIMARY KEY, amount bigint, payload bytea);
                      CREATE TABLE outbox(id bigserial PRIMARY KEY, body bytea);" postgres
    cat >"$out/pg-writer.sql" <<'SQL'
BEGIN;
INSERT INTO business(amount, payload) VALUES (:client_id, convert_to(repeat('b', 1024), 'UTF8'));
INSERT INTO outbox(body) VALUES (convert_to(repeat('o', 1024), 'UTF8'));
END;
SQL
    cat >"$out/pg-relay.sql" <<'SQL'
DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 256 FOR UPDATE SKIP LOCKED);
SQL
    pg_run() { # $1 name, $2 synchronous_commit
      "${psqlc[@]}" -c "TRUNCATE business, outbox" postgres
      PGOPTIONS="-c synchronous_commit=$2" "$pg_bin/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n \
        -c 16 -j 2 -T "$GRPC_SECS" -f "$out/pg-writer.sql" postgres >"$out/$1.out" 2>&1 &
      local w=$!
      PGOPTIONS="-c synchronous_commit=$2" "$pg_bin/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n \
        -c 1 -T "$((GRPC_SECS + 1))" -f "$out/pg-relay.sql" postgres >"$out/$1-relay.out" 2>&1
      wait "$w"
      "${psqlc[@]}" -c "DELETE FROM outbox" postgres
      local tx rows
      tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out/$1.out")
      rows=$("${psqlc[@]}" -At -c "SELECT count(*) FROM business" postgres)
      local tps
      tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out/$1.out" | head -1)
      echo "result: ok=$([ "$tx" = "$rows" ] && echo 1 || echo 0) ops=$tx rows=$rows per_s=${tps%.*}" >>"$out/$1.out"
      echo "== $1: $tps txn/s ($tx transactions, $rows business rows)"
    }
    pg_run pg_on on
    pg_run pg_off off
    pg_status="measured"
    "${asuser[@]}" "$pg_bin/pg_ctl" -D "$pgdir/db" -m fast stop >/dev/null 2>&1
  else
    pg_status="could not start (see target/bench-run/pg-init.log)"
  fi
  rm -rf "$pgdir"
elif [ -z "$pg_bin" ]; then
  pg_status="PostgreSQL not installed (apt-get install postgresql, then rerun)"
fi
rm -rf "$data"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- derived figures --------------------------------------------------------------------------
fsync_s=$(awk -v a="$(res fsync per_s)" -v b="$(res fsync_after per_s)" 'BEGIN { printf "%.0f", (a + b) / 2 }')
emb_async=$(res emb_async per_s); emb_sync16=$(res emb_sync16 per_s); emb_sync64=$(res emb_sync64 per_s)
fs16=$(awk -v f="$(res emb_sync16 fsyncs)" -v s="$(res emb_sync16 secs)" 'BEGIN { if (s > 0) printf "%.0f", f / s }')
fs64=$(awk -v f="$(res emb_sync64 fsyncs)" -v s="$(res emb_sync64 secs)" 'BEGIN { if (s > 0) printf "%.0f", f / s }')
batch16=$(awk -v o="$(res emb_sync16 ops)" -v f="$(res emb_sync16 fsyncs)" 'BEGIN { if (f > 0) printf "%.1f", 2 * o / f }')
batch64=$(awk -v o="$(res emb_sync64 ops)" -v f="$(res emb_sync64 fsyncs)" 'BEGIN { if (f > 0) printf "%.1f", 2 * o / f }')
sq_n=$(res sqlite_normal per_s); sq_f=$(res sqlite_full per_s)
end0=$(res backlog0 end_mean_us); end1=$(res backlog1m end_mean_us)
per_pending=$(grep -o '([0-9.]* bytes per pending' "$out/pending_mem.out" | grep -o '[0-9.]*' | head -1)
recover_gib=$(res recover gib_per_s)
status() { if [ "$1" = 1 ]; then echo met; else echo "**missed**"; fi; }
ge() { awk -v a="${1:-0}" -v b="$2" 'BEGIN { print (a >= b) ? 1 : 0 }'; }
le() { awk -v a="${1:-999999999}" -v b="$2" 'BEGIN { print (a <= b) ? 1 : 0 }'; }
idle_mib=$(awk -v k="${idle_rss:-0}" 'BEGIN { printf "%.1f", k / 1024 }')
end_ratio=$(ratio "$end1" "$end0")
# The sync-flush bound: what the disk allows (fsyncs/s x writes per fsync / 2 writes per
# transaction), or what the CPU allows (the same run under async flush), whichever is lower.
bound() { awk -v f="${fsync_s:-0}" -v b="${1:-0}" -v a="${emb_async:-0}" 'BEGIN { d = f * b / 2; printf "%.0f", (a > 0 && a < d) ? a : d }'; }
bound16=$(bound "$batch16"); bound64=$(bound "$batch64")
sync_frac16=$(pct "$emb_sync16" "$bound16"); sync_frac64=$(pct "$emb_sync64" "$bound64")
best_frac=$(awk -v a="${emb_sync16:-0}" -v b="${bound16:-0}" -v c="${emb_sync64:-0}" -v d="${bound64:-0}" 'BEGIN { x = (b > 0) ? a / b : 0; y = (d > 0) ? c / d : 0; printf "%.2f", (x > y) ? x : y }')

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo " (working tree has uncommitted changes)")
model=$(lscpu | sed -n 's/^Model name: *//p' | head -1)

{
cat <<EOF
# Benchmarks

Generated by \`bash tests/bench/run.sh\` (one command; raw outputs in \`target/bench-run/\`)${QUICK:+ with QUICK=1 (reduced counts)}.

| | |
|---|---|
| date | $started |
| commit | \`$commit\`$dirty |
| machine | $(nproc) CPUs, $model, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r) |
| load average (1/5/15 min) | at start $load_start, at end $load_end |
| toolchain | $(rustc --version) |

The machine is shared with other developers building at the same time: with a load average
above the CPU count, absolute figures are low and noisy (take single cells as ±50 %); the
ratios measured back to back in the same run are steadier. Every Rocklet run below passed its
correctness check (every committed message consumed exactly once, no rolled-back message
consumed, no delayed message early) unless listed under *Failures*. Bodies are 1 KiB unless
said otherwise.

## Targets

| target | measured | |
|---|---|---|
| core in memory, 1 thread: ≥ 2 M msg/s | $(printf "%'d" "${core_send:-0}") msg/s with the log's memory prepared, $(printf "%'d" "${core_send_fresh:-0}") growing into fresh pages (wall clock) | $(status "$(ge "$core_send" 2000000)") |
| core in memory, 1 thread: ≥ 1 M txn/s | $(printf "%'d" "${core_txn:-0}") txn/s prepared, $(printf "%'d" "${core_txn_fresh:-0}") fresh | $(status "$(ge "$core_txn" 1000000)") |
| sync flush ≥ 80 % of the fsync ceiling × batch | $sync_frac16 of the bound (16 clients, $batch16 writes per fsync: $bound16 txn/s), $sync_frac64 (64 clients, $batch64 per fsync: $bound64 txn/s); the bound is the ceiling × batch ÷ 2 or, when lower, the async-flush rate (CPU) | $(status "$(ge "$best_frac" 0.8)") |
| broker idle RSS < 50 MiB | $idle_mib MiB | $(status "$(le "$idle_mib" 50)") |
| broker start-up < 100 ms | ${startup_med:-?} ms (median of 5; ${startups[*]}) | $(status "$(le "${startup_med:-999}" 100)") |
| ≤ 64 bytes per pending transaction beyond the log | ${per_pending:-?} bytes | $(status "$(le "$per_pending" 64)") |
| END_TRANSACTION cost with 1 M pending ≤ 2× the cost with 0 | ${end_ratio}× (mean $end1 µs vs $end0 µs) | $(status "$(le "$end_ratio" 2)") |
| recovery ≥ 1 GiB/s scanned | ${recover_gib:-?} GiB/s | $(status "$(ge "$recover_gib" 1)") |
| broker CPU over gRPC ≤ 30 µs per message (send + receive + ack) | $(res grpc_async_send broker_cpu_us) µs | $(status "$(le "$(res grpc_async_send broker_cpu_us)" 30)") |
| broker CPU over gRPC ≤ 60 µs per transaction (prepare + commit + receive + ack) | $(res grpc_async_txn broker_cpu_us) µs | $(status "$(le "$(res grpc_async_txn broker_cpu_us)" 60)") |
| ≥ 10× Apache RocketMQ's send throughput, same run | $(ratio "$(res grpc_async_send per_s)" "$(res apache_send per_s)")× ($apache_status) | $(status "$(ge "$(ratio "$(res grpc_async_send per_s)" "$(res apache_send per_s)")" 10)") |
| ≥ 10× Apache RocketMQ's transaction throughput, same run | $(ratio "$(res grpc_async_txn per_s)" "$(res apache_txn per_s)")× | $(status "$(ge "$(ratio "$(res grpc_async_txn per_s)" "$(res apache_txn per_s)")" 10)") |

## Core, in memory, one thread

\`core/examples/send_loop.rs\` (memory storage, 256 MiB segments, no consumer; \`send\` is
\`Broker::send_ref\`, \`txn\` \`prepare_ref\` + \`end_transaction\`, the \`-request\` modes
\`Broker::execute\` with an owned \`Request\`; *prepared*: \`MemStorage::prepare_segments\`
before the clock starts; "of cpu": the loop's own CPU time, kernel included):

- $(line core_send send)
- $(line core_txn txn)
- $(line core_send_fresh send)
- $(line core_txn_fresh txn)
- $(line core_send_request send-request)
- $(line core_txn_request txn-request)

The criterion benchmarks (\`cargo bench -p rocklet-core --features std,testing --bench core\`)
measure the same paths plus pull and the backlog group; they are not rerun here (slow).

## Embedded core, file storage (\`rocklet bench txn --embedded --storage file\`)

Prepare + commit per transaction, consumers receiving and acking in the same loop, group
commit as the broker's driver does it: every in-flight request handled, and one fsync at a
time on a sync thread, overlapped with the handling of the next group.

| flush | clients | txn/s | p50 | p99 | p999 | fsyncs/s |
|---|---:|---:|---:|---:|---:|---:|
| async | 16 | $emb_async | $(res emb_async p50_ms) ms | $(res emb_async p99_ms) ms | $(res emb_async p999_ms) ms | |
| sync | 16 | $emb_sync16 | $(res emb_sync16 p50_ms) ms | $(res emb_sync16 p99_ms) ms | $(res emb_sync16 p999_ms) ms | $fs16 |
| sync | 64 | $emb_sync64 | $(res emb_sync64 p50_ms) ms | $(res emb_sync64 p99_ms) ms | $(res emb_sync64 p999_ms) ms | $fs64 |

**fsync ceiling** of this disk (append 4 KiB + fdatasync), measured before and after the sync
runs, mean $fsync_s fsyncs/s:

- before: $(line fsync fsyncs/s)
- after: $(line fsync_after fsyncs/s)

Under sync flush a transaction is two durable writes (prepare, end), each answered after the
fsync that covers it; one fsync covers every write waiting on it, so the bound is
fsyncs/s × writes per fsync ÷ 2 txn/s: with 16 clients $batch16 writes per fsync → bound
$(awk -v f="${fsync_s:-0}" -v b="${batch16:-0}" 'BEGIN { printf "%.0f", f * b / 2 }') txn/s, measured $emb_sync16; with 64 clients $batch64 → bound
$(awk -v f="${fsync_s:-0}" -v b="${batch64:-0}" 'BEGIN { printf "%.0f", f * b / 2 }') txn/s, measured $emb_sync64.
When that is above what the CPU does with no fsync at all (async flush, $emb_async txn/s), the
CPU is the bound. Sync flush reached $sync_frac16 (16 clients) and $sync_frac64 (64 clients) of
the bound.

## Against the peers, equal durability, same body size and count

SQLite outbox (\`tests/bench\`, rusqlite with bundled SQLite, WAL, 16 writer threads): each
transaction inserts a business row and an outbox row in one \`BEGIN IMMEDIATE\` transaction; a
relay thread reads outbox rows in id order, checks each arrives exactly once and deletes them.

| durability | Rocklet embedded txn/s | SQLite outbox txn/s | Rocklet / SQLite |
|---|---:|---:|---:|
| process crash safe: flush=async vs synchronous=NORMAL | $emb_async | $sq_n | $(ratio "$emb_async" "$sq_n")× |
| power-loss safe: flush=sync vs synchronous=FULL (16 clients) | $emb_sync16 | $sq_f | $(ratio "$emb_sync16" "$sq_f")× |

- $(line sqlite_normal 'SQLite outbox')
- $(line sqlite_full 'SQLite outbox')

PostgreSQL outbox ($pg_status): pgbench, 16 clients, business row + outbox row per
transaction, a concurrent relay deleting outbox rows in id order (\`target/bench-run/pg-*.sql\`).
EOF
if [ "$pg_status" = measured ]; then
cat <<EOF

| durability | Rocklet embedded txn/s | PostgreSQL outbox txn/s | Rocklet / PostgreSQL |
|---|---:|---:|---:|
| synchronous_commit=off vs flush=async | $emb_async | $(res pg_off per_s) | $(ratio "$emb_async" "$(res pg_off per_s)")× |
| synchronous_commit=on vs flush=sync (16 clients) | $emb_sync16 | $(res pg_on per_s) | $(ratio "$emb_sync16" "$(res pg_on per_s)")× |
EOF
else
cat <<EOF
Manual run: \`apt-get install postgresql\` and rerun this script (it starts its own server on
127.0.0.1 in a scratch directory and stops it after).
EOF
fi
cat <<EOF

## Broker over gRPC, loopback (\`rocklet broker\` process + \`rocklet bench --endpoint\`)

Client and broker share the 2 CPUs. Each client is one connection doing one request at a time.

| run | ops/s | p50 | p99 | p999 | max |
|---|---:|---:|---:|---:|---:|
| txn, flush=async, 16 clients | $(res grpc_async_txn per_s) | $(res grpc_async_txn p50_ms) ms | $(res grpc_async_txn p99_ms) ms | $(res grpc_async_txn p999_ms) ms | $(res grpc_async_txn max_ms) ms |
| send, flush=async, 16 clients | $(res grpc_async_send per_s) | $(res grpc_async_send p50_ms) ms | $(res grpc_async_send p99_ms) ms | $(res grpc_async_send p999_ms) ms | $(res grpc_async_send max_ms) ms |
| txn, flush=sync, 16 clients | $(res grpc_sync_txn per_s) | $(res grpc_sync_txn p50_ms) ms | $(res grpc_sync_txn p99_ms) ms | $(res grpc_sync_txn p999_ms) ms | $(res grpc_sync_txn max_ms) ms |
| txn, flush=sync, 64 clients | $(res grpc_sync_txn64 per_s) | $(res grpc_sync_txn64 p50_ms) ms | $(res grpc_sync_txn64 p99_ms) ms | $(res grpc_sync_txn64 p999_ms) ms | $(res grpc_sync_txn64 max_ms) ms |

- Start-up (exec to "serving" log line, 5 starts): ${startups[*]} ms; idle RSS $idle_mib MiB;
  RSS after the async runs $(awk -v k="${busy_rss:-0}" 'BEGIN { printf "%.1f", k / 1024 }') MiB.
- Broker CPU (the broker process's user + system time from \`/proc/<pid>/stat\`, over the
  measured part and its drain, per operation; \`rocklet bench ... --broker-pid PID\`): send
  (send + receive + ack) $(res grpc_async_send broker_cpu_us) µs per message, txn (prepare +
  commit + receive + ack) $(res grpc_async_txn broker_cpu_us) µs per transaction; the bench
  client spent $(res grpc_async_send bench_cpu_us) and $(res grpc_async_txn bench_cpu_us) µs.

## Against Apache RocketMQ 5.5.0 (gRPC, proxy in local mode, async flush)

$apache_status. The same \`rocklet bench send|txn --endpoint ... --clients 16 --consumers 8
--duration $GRPC_SECS\` against the Rocklet broker above and against Apache's name server and
proxy (local mode: proxy and broker in one JVM, \`-Xmx1g\`, 127.0.0.1, async flush) started
from the Maven jars by \`tests/bench/apache.sh\`, topics created with mqadmin (\`RockletBenchTxn\`
with \`+message.type=TRANSACTION\`) and the consumer group with \`updateSubGroup\`. CPU is each
broker process's own time per operation.

| run | Rocklet ops/s | Apache ops/s | Rocklet / Apache | Rocklet CPU µs/op | Apache CPU µs/op | Apache p99 |
|---|---:|---:|---:|---:|---:|---:|
| send | $(res grpc_async_send per_s) | $(res apache_send per_s) | $(ratio "$(res grpc_async_send per_s)" "$(res apache_send per_s)")× | $(res grpc_async_send broker_cpu_us) | $(res apache_send broker_cpu_us) | $(res apache_send p99_ms) ms |
| txn | $(res grpc_async_txn per_s) | $(res apache_txn per_s) | $(ratio "$(res grpc_async_txn per_s)" "$(res apache_txn per_s)")× | $(res grpc_async_txn broker_cpu_us) | $(res apache_txn broker_cpu_us) | $(res apache_txn p99_ms) ms |

Apache's RSS after its runs: $(awk -v k="${apache_rss:-0}" 'BEGIN { printf "%.0f", k / 1024 }') MiB.

## FIFO consumption (\`rocklet bench consume --fifo\`)

Sync-flush broker process; $CONSUME messages of 1 KiB loaded into the topic's 4 queues before
the clock starts, then received in batches of 32 and acked. FIFO: the group is declared FIFO
and the messages carry 32 message groups (each group's in one queue), so at most one batch
per queue is in flight and a consumer beyond the fourth waits for a queue to unlock; the
check also wants every message group consumed in order. One run each, back to back.

| consumers | normal msg/s | FIFO msg/s | FIFO / normal | normal p99 | FIFO p99 | out of order |
|---|---:|---:|---:|---:|---:|---:|
| 2 | $(res grpc_consume2 per_s) | $(res grpc_fifo2 per_s) | $(ratio "$(res grpc_fifo2 per_s)" "$(res grpc_consume2 per_s)")× | $(res grpc_consume2 p99_ms) ms | $(res grpc_fifo2 p99_ms) ms | $(res grpc_fifo2 out_of_order) |
| 16 | $(res grpc_consume16 per_s) | $(res grpc_fifo16 per_s) | $(ratio "$(res grpc_fifo16 per_s)" "$(res grpc_consume16 per_s)")× | $(res grpc_consume16 p99_ms) ms | $(res grpc_fifo16 p99_ms) ms | $(res grpc_fifo16 out_of_order) |

## The cost of authentication and TLS (gRPC loopback, flush=async, 16 clients)

The same runs back to back against a broker process with nothing on, a super user (every call
signed with MQv2-HMAC-SHA1 by the bench, as the official clients sign, and checked), TLS
enforcing (rustls, RSA 2048 certificate), and both. Each client keeps one connection, so the
TLS handshake is paid once per client; what remains is the per-call signature check and the
record encryption.

| run | none | auth | TLS | auth + TLS |
|---|---:|---:|---:|---:|
| send ops/s | $(res sec_none_send per_s) | $(res sec_auth_send per_s) | $(res sec_tls_send per_s) | $(res sec_both_send per_s) |
| send p50 / p99 | $(res sec_none_send p50_ms) / $(res sec_none_send p99_ms) ms | $(res sec_auth_send p50_ms) / $(res sec_auth_send p99_ms) ms | $(res sec_tls_send p50_ms) / $(res sec_tls_send p99_ms) ms | $(res sec_both_send p50_ms) / $(res sec_both_send p99_ms) ms |
| txn ops/s | $(res sec_none_txn per_s) | $(res sec_auth_txn per_s) | $(res sec_tls_txn per_s) | $(res sec_both_txn per_s) |
| txn p50 / p99 | $(res sec_none_txn p50_ms) / $(res sec_none_txn p99_ms) ms | $(res sec_auth_txn p50_ms) / $(res sec_auth_txn p99_ms) ms | $(res sec_tls_txn p50_ms) / $(res sec_tls_txn p99_ms) ms | $(res sec_both_txn p50_ms) / $(res sec_both_txn p99_ms) ms |
| auth + TLS vs none | send $(ratio "$(res sec_both_send per_s)" "$(res sec_none_send per_s)")×, txn $(ratio "$(res sec_both_txn per_s)" "$(res sec_none_txn per_s)")× | | | |

## Pending backlog

- Memory: $(line pending_mem 'heap beyond') (\`core/examples/pending_memory.rs\`, counting allocator; the log itself is on disk in the broker).
- END_TRANSACTION with 0 pending: $(line backlog0 'END_TRANSACTION')
- END_TRANSACTION with $BACKLOG pending (held by check immunity): $(line backlog1m 'END_TRANSACTION')
  (embedded, memory storage, one client, 128-byte bodies; ratio of means ${end_ratio}×)
- Check punctuality with $BACKLOG pending (held by check immunity) while 4 clients run transactions left unknown, each checked 1 s after its prepare: $(line punctual 'check punctuality')
- Check burst: $BACKLOG pending whose checks all come due within the seconds it took to prepare them (3 s timeout, each answered rollback, while 16 clients run transactions): $(line punctual_burst 'check punctuality'); $(line punctual_burst 'backlog:'). Lateness here is the queue of due checks: the core fires and the bench answers them one at a time, so it measures check throughput, not timer precision.

## Delayed delivery

- Embedded: $(line delay 'delay lateness') (levels 1 s and 5 s and arbitrary times up to 10 s).
- Over gRPC (async broker): $(line grpc_delay 'delay lateness')

Lateness is measured at the consumer: from the delivery time to the moment the message is
received, so it includes the consumer's polling (embedded: every loop round; gRPC: long poll).

## Recovery

- $(line recover 'recovery:')

The log is reopened right after being written (as after kill -9 with the page cache warm):
the figure is the core's scan speed, not the disk's read speed.

## Operator console: the first paint on a big broker

\`cargo test --release -p rocklet-broker --test console -- --ignored --nocapture first_paint\`:
an in-process broker (file storage, async flush) with the console on, 10,000 topics and
$BACKLOG pending transactions (prepared through the core thread, 64-byte bodies, each with a
key); every call the page makes, 21 times each over a fresh connection as the page opens
them, median and slowest. The overview's first paint is the page, its two assets and
\`/api/overview\`; each view's first call is a page of 50 from a cursor, so no call grows with
the topics or transactions held (the deep page starts from a cursor 90 % in). Times are from
the request to the response's last byte as the test's HTTP client sees them over loopback,
not the browser's rendering.

- $(line console 'built ')
- $(line console 'first paint, its')

$(sed -n '/^| call /,/^|.*api\/message/p' "$out/console.out" 2>/dev/null)

## Bindings

- Python: [bindings-python/BENCHMARKS.md](../bindings-python/BENCHMARKS.md) (txn and send,
  memory and durable, 1 and 8 threads, against a Python \`sqlite3\` outbox).
- Node: [bindings-node/BENCHMARKS.md](../bindings-node/BENCHMARKS.md) (send, batch,
  prepare + commit, memory and file).
EOF
# Cluster mode, when etcd is installed (tests/ci/cluster.sh installs it): its own section.
if command -v etcd >/dev/null; then
  echo; bash tests/bench/cluster.sh "$R" 2>"$out/cluster.err" || echo "(cluster benchmarks failed: see $out/cluster.err)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo; echo "## Failures"; echo
  for f in "${failed[@]}"; do echo "- \`$f\`: $(grep -m1 'correctness\|error' "$out/$f.out" "$out/$f.err" | head -1)"; done
fi
# Hand-written reading of the figures (what limits a missed target), kept next to this script.
[ -f tests/bench/analysis.md ] && { echo; cat tests/bench/analysis.md; }
} >"$doc"
echo "== wrote $doc"
[ ${#failed[@]} -eq 0 ]
