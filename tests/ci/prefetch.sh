#!/usr/bin/env bash
# Long builds that later CI parts need, started by tests/ci/run at the beginning in the
# background at the lowest priority, so they use the CPU the parts leave idle (tests that wait
# on sockets, timers, restarts) instead of adding their whole build time:
#   v4-rust       the crates.io RocketMQ 4 Rust client test (broker/tests/v4-rust-client), for
#                 remoting.sh; ~360 crates
#   wasm-bindgen  wasm-bindgen-cli of the version in Cargo.lock, for wasm.sh
#   playground    the playground's wasm build (bindings-wasm/build.sh), for wasm.sh and dist
#   dist          every release artifact (DIST_CROSS=1 bash dist/build.sh in target/dist: x86_64
#                 glibc, aarch64, x86_64 musl), for dist.sh
#   arm64-root    the arm64 Debian root dist.sh runs the aarch64 artifacts in (debootstrap;
#                 mostly downloads, so it runs beside the chain above, not after it)
# Each writes $PREFETCH_DIR/<name>.log and, when done, $PREFETCH_DIR/<name>.rc; the part that
# needs it waits for the .rc file (tests/ci/prefetch.sh wait <name>) and otherwise does the
# same work itself when run alone. The chain runs in the order the parts need its results.
#
#   bash tests/ci/prefetch.sh install          what the prefetched builds need from apt and npm,
#                                              in the foreground: before the parts, which would
#                                              otherwise race them for apt's and npm's locks
#   bash tests/ci/prefetch.sh start            in the background, from tests/ci/run
#   bash tests/ci/prefetch.sh has <name>       whether this run's chain builds it
#   bash tests/ci/prefetch.sh wait <name>      exit status of the build, once done (2: not
#                                              started here, so the caller does the work)
#   bash tests/ci/prefetch.sh one <name>       one build, in the foreground
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

# The playground: its own target dir (target/wasm), so it never waits for another build's lock.
playground() {
  bash "$ROOT/bindings-wasm/build.sh"
}

# Every artifact, by the command tests/ci/dist.sh runs when nothing was prefetched; that part
# takes what this one built. target/dist, not target/: cargo locks a target dir for a whole
# build, and the parts' own release builds (cluster's simulator, fuzz) must not wait for it.
dist() {
  cd "$ROOT"
  CARGO_TARGET_DIR="$ROOT/target/dist" DIST_CROSS="${DIST_CROSS:-1}" bash dist/build.sh
}

# The arm64 Debian root (bookworm, minbase, python3 + venv, nodejs) from the Debian mirror apt
# uses here, made once (.ready marks a finished one); qemu-user runs its second stage.
arm64_root() {
  local root=$ROOT/.tools/arm64-root
  # qemu-user for aarch64 ELF files: binfmt_misc mounted, qemu-aarch64 registered (F: the
  # interpreter is opened now, so it works inside a chroot that lacks it).
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    # Imported when qemu-user-static was installed, but enabled only if binfmt_misc was mounted.
    update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
  fi
  grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
    || { echo "qemu-aarch64 is not registered with the F flag"; cat /proc/sys/fs/binfmt_misc/qemu-aarch64; exit 1; }
  [ -e "$root/.ready" ] && return 0
  local mirror
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(awk '$1=="deb" && $3=="bookworm" {print $2; exit}' /etc/apt/sources.list)
  [ -n "$mirror" ] || { echo "no Debian mirror found in apt's sources"; exit 1; }
  rm -rf "$root"
  debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,nodejs \
    bookworm "$root" "$mirror"
  touch "$root/.ready"
}

# apt and npm installs for the builds above and the parts that share their tools (as root;
# skipped when present). Debian's wasm toolchain (rustc-web...) builds the playground and the
# aarch64 / musl artifacts; the arm64 std must be the very version of rustc-web (Multi-Arch:
# same), so it is installed after it.
install() {
  local cross=${DIST_CROSS:-1}
  local pkgs=(rustc-web cargo-web rust-web-src rust-web-llvm lld-22 chromium python3-venv file binutils)
  [ "$cross" = 0 ] || pkgs+=(qemu-user-static binfmt-support debootstrap)
  local missing=() p
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  local updated=0
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq; updated=1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if [ "$cross" != 0 ]; then
    local v
    v=$(dpkg-query -W -f '${Version}' rustc-web)
    if [ "$(dpkg-query -W -f '${Version}' libstd-rust-web-dev:arm64 2>/dev/null || true)" != "$v" ]; then
      dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; updated=0; }
      [ "$updated" = 1 ] || apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "libstd-rust-web-dev:arm64=$v" >/dev/null
    fi
  fi
  # Both at once: an `npm install --no-save` of one into .tools removes the other.
  [ -d "$ROOT/.tools/node_modules/playwright-core" ] && [ -x "$ROOT/.tools/node_modules/.bin/wasm-opt" ] \
    || npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$ROOT/.tools" \
         playwright-core@1.65.1 binaryen@132.0.0
}

run() {
  local name=$1; shift
  rm -f "$PREFETCH_DIR/$name.rc"
  local rc=0
  ( "$@" ) > "$PREFETCH_DIR/$name.log" 2>&1 || rc=$?
  echo "$rc" > "$PREFETCH_DIR/$name.rc"
}

case "${1:-}" in
  install)
    parts=" ${PARTS:-wasm dist} "
    [[ $parts != *" wasm "* && $parts != *" dist "* ]] || install
    ;;
  start)
    # PARTS (from tests/ci/run): only what the parts of this run need, in their order.
    parts=" ${PARTS:-remoting wasm} "
    mkdir -p "$PREFETCH_DIR"
    rm -f "$PREFETCH_DIR"/*.rc
    echo $$ > "$PREFETCH_DIR/started"
    jobs=()
    [ "${ROCKLET_V4_RUST:-1}" != 1 ] || [[ $parts != *" remoting "* ]] || jobs+=(v4-rust)
    [[ $parts != *" wasm "* && $parts != *" dist "* ]] || jobs+=(wasm-bindgen playground)
    if [[ $parts == *" dist "* ]]; then
      jobs+=(dist)
      [ "${DIST_CROSS:-1}" = 0 ] || jobs+=(arm64-root)
    fi
    printf '%s\n' "${jobs[@]}" > "$PREFETCH_DIR/jobs"
    has() { grep -qx "$1" "$PREFETCH_DIR/jobs"; }
    ! has arm64-root || nice -n 19 bash "$0" one arm64-root &
    for j in v4-rust wasm-bindgen playground dist; do
      ! has "$j" || nice -n 19 bash "$0" one "$j"
    done
    wait
    ;;
  one)
    case "$2" in
      v4-rust) run v4-rust v4_rust ;;
      wasm-bindgen) run wasm-bindgen wasm_bindgen ;;
      playground) run playground playground ;;
      dist) run dist dist ;;
      arm64-root) run arm64-root arm64_root ;;
      *) echo "prefetch.sh: no build named $2" >&2; exit 2 ;;
    esac
    ;;
  has)
    # Whether this run's chain builds <name> (running or done).
    [ -f "$PREFETCH_DIR/started" ] && grep -qx "$2" "$PREFETCH_DIR/jobs" 2>/dev/null
    ;;
  wait)
    # Not started (or no longer running, with no result): the caller does the work itself.
    [ -f "$PREFETCH_DIR/started" ] || exit 2
    grep -qx "$2" "$PREFETCH_DIR/jobs" 2>/dev/null || exit 2
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
    echo "usage: prefetch.sh install | start | has <name> | wait <name> | one <name> (names: v4-rust wasm-bindgen playground dist arm64-root)" >&2; exit 2 ;;
esac
