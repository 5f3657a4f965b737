#!/usr/bin/env bash
# Long builds that later CI parts need, started by tests/ci/run at the beginning in the
# background at the lowest priority, so they use the CPU the parts leave idle (tests that wait
# on sockets, timers, restarts) instead of adding their whole build time:
#   v4-rust   the crates.io RocketMQ 4 Rust client test (broker/tests/v4-rust-client), for
#             remoting.sh; ~360 crates
#   wasm-bindgen-cli of the version in Cargo.lock, for wasm.sh
# Each writes $PREFETCH_DIR/<name>.log and, when done, $PREFETCH_DIR/<name>.rc; the part that
# needs it waits for the .rc file (tests/ci/prefetch.sh wait <name>) and otherwise does the
# same work itself when run alone.
#
#   bash tests/ci/prefetch.sh start            in the background, from tests/ci/run
#   bash tests/ci/prefetch.sh wait <name>      exit status of the build, once done
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFETCH_DIR=${PREFETCH_DIR:-$ROOT/.tools/prefetch}

v4_rust() {
  cd "$ROOT/broker/tests/v4-rust-client"
  CARGO_TARGET_DIR=$ROOT/target/v4-rust-client CARGO_PROFILE_DEV_DEBUG=0 cargo build --locked
}

wasm_bindgen() {
  cd "$ROOT"
  local v
  v=$(cargo pkgid wasm-bindgen | sed 's/.*[@#]//')
  if [ "$("$ROOT/.tools/bin/wasm-bindgen" --version 2>/dev/null | awk '{print $2}')" != "$v" ]; then
    # --debug: it runs once per build on one module; an optimized build of it costs minutes.
    cargo install --quiet --debug --root "$ROOT/.tools" wasm-bindgen-cli --version "$v"
  fi
}

run() {
  local name=$1; shift
  rm -f "$PREFETCH_DIR/$name.rc"
  local rc=0
  ( "$@" ) > "$PREFETCH_DIR/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$PREFETCH_DIR/$name.rc"
}

case "${1:-}" in
  start)
    # PARTS (from tests/ci/run): only what the parts of this run need, in their order.
    parts=" ${PARTS:-remoting wasm} "
    mkdir -p "$PREFETCH_DIR"
    rm -f "$PREFETCH_DIR"/*.rc
    echo $$ > "$PREFETCH_DIR/started"
    if [ "${ROCKLET_V4_RUST:-1}" = 1 ] && [[ $parts == *" remoting "* ]]; then
      nice -n 19 bash "$0" one v4-rust
    fi
    if [[ $parts == *" wasm "* ]]; then
      nice -n 19 bash "$0" one wasm-bindgen
    fi
    ;;
  one)
    case "$2" in
      v4-rust) run v4-rust v4_rust ;;
      wasm-bindgen) run wasm-bindgen wasm_bindgen ;;
    esac
    ;;
  wait)
    # Not started (or no longer running, with no result): the caller does the work itself.
    [ -f "$PREFETCH_DIR/started" ] || exit 2
    pid=$(cat "$PREFETCH_DIR/started")
    t0=$(date +%s)
    until [ -f "$PREFETCH_DIR/$2.rc" ]; do
      if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        [ -f "$PREFETCH_DIR/$2.rc" ] || exit 2
      fi
      sleep 2
      if [ $(( $(date +%s) - t0 )) -gt 3600 ]; then echo "prefetch $2: no result after 1 h"; exit 1; fi
    done
    rc=$(cat "$PREFETCH_DIR/$2.rc")
    if [ "$rc" != 0 ]; then tail -40 "$PREFETCH_DIR/$2.log"; fi
    exit "$rc"
    ;;
  *)
    echo "usage: prefetch.sh start | wait <v4-rust|wasm-bindgen>" >&2; exit 2 ;;
esac
