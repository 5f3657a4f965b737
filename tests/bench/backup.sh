#!/usr/bin/env bash
# Backup time and size (issue 31, item 4; docs/benchmarks.md "Backup and restore").
#
#   tests/bench/backup.sh ROCKLET WORK COUNT SIZE MORE [SEGMENT_SIZE]
#
# Starts `ROCKLET broker` (flush async) on WORK/data, writes COUNT messages of SIZE bytes with
# `rocklet bench send` over gRPC, takes `rocklet admin backup --to WORK/backup` (full), writes
# MORE messages, backs up into the same directory again (incremental), restores it into
# WORK/restored and starts a broker there. Prints each command's own line, the log's size and
# what the backup directory costs on disk (du), and fails unless the second backup copied
# less than the first and the backup costs no more than the log's data plus a block per file.
set -euo pipefail
B=$1 work=$2 count=$3 size=$4 more=$5 segment=${6:-1073741824}
mkdir -p "$work"
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; true; }
trap cleanup EXIT
cat > "$work/backup-broker.toml" <<TOML
[core]
flush = "async"
segment_size = $segment
TOML
start() { # $1 data dir; sets pid and addr
  "$B" broker --data-dir "$1" --listen 127.0.0.1:0 --config "$work/backup-broker.toml" \
    >"$work/backup-broker.log" 2>&1 &
  pid=$!
  addr=
  for _ in $(seq 1 600); do
    addr=$(grep -o 'addr=127\.0\.0\.1:[0-9]*' "$work/backup-broker.log" | head -1 | cut -d= -f2 || true)
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ -n "$addr" ] || { echo "broker did not start:"; cat "$work/backup-broker.log"; exit 1; }
}
send() { "$B" bench send --endpoint "$addr" --count "$1" --size "$size" --clients 8 --quiet; }
copied() { sed -n 's/.*copied [0-9]* files, \([0-9]*\) bytes.*/\1/p' <<<"$1"; }

start "$work/data"
send "$count" >/dev/null
echo "log: $(du -sb --apparent-size "$work/data" | cut -f1) bytes apparent, $(du -s --block-size=1 "$work/data" | cut -f1) on disk, in $(ls "$work/data" | grep -c '^[0-9]\{20\}$') segments"
echo "+ rocklet admin backup --to $work/backup   (full)"
full=$("$B" admin --broker "$addr" backup --to "$work/backup")
echo "$full"
send "$more" >/dev/null
echo "+ rocklet admin backup --to $work/backup   (incremental, after $more more messages)"
incr=$("$B" admin --broker "$addr" backup --to "$work/backup")
echo "$incr"
kill "$pid"; wait "$pid" || true; pid=
apparent=$(du -sb --apparent-size "$work/backup" | cut -f1)
disk=$(du -s --block-size=1 "$work/backup" | cut -f1)
echo "backup directory: $apparent bytes apparent, $disk on disk"
f=$(copied "$full") i=$(copied "$incr")
[ -n "$f" ] && [ -n "$i" ] || { echo "no copied byte count in the backup's output"; exit 1; }
[ "$i" -lt "$f" ] || { echo "the incremental backup copied $i bytes, the full one $f"; exit 1; }
files=$(find "$work/backup" -type f | wc -l)
[ "$disk" -le $(( f + i + (files + 2) * 1048576 )) ] \
  || { echo "the backup costs $disk bytes on disk for $((f + i)) bytes copied"; exit 1; }
echo "+ rocklet admin restore --from $work/backup --to $work/restored"
"$B" admin restore --from "$work/backup" --to "$work/restored"
start "$work/restored"
grep -o 'log recovered.*' "$work/backup-broker.log" | head -1
kill "$pid"; wait "$pid" || true; pid=
echo "backup bench: OK"
