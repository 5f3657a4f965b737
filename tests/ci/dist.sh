#!/usr/bin/env bash
# dist part of CI: build every artifact (in a CI run, tests/ci/prefetch.sh builds them in the
# background from the start, `dist/build.sh` in target/dist, and this part takes them; run
# alone, it runs `dist/build.sh --install` here), then install each in a clean place with no
# Rust toolchain on PATH and smoke-test it:
#   0. the glibc floor: the broker binaries, the Node addons and the wheels' extensions (x86_64
#      and aarch64) need no glibc symbol version newer than 2.17 (readelf -V), and auditwheel
#      accepts each wheel's manylinux_2_17 tag; the musl broker is statically linked (file)
#   1. the wheel in a fresh venv (pip --no-index: nothing but the wheel): import rocklet, a
#      checked transaction, a rollback, a durable reopen (tests/ci/dist/wheel_smoke.py)
#   2. the npm tarballs in a fresh project (npm --offline): CommonJS and ESM, the addon from
#      the per-platform package (tests/ci/dist/npm_smoke.mjs)
#   3. the broker tarball unpacked: bin/rocklet broker with etc/rocklet.toml, the official
#      Python client (rocketmq-python-client) sending, committing, rolling back, receiving
#      (tests/ci/dist/broker_smoke.py); rocklet send / consume from the tarball. The same for
#      the static musl broker, on this host
#   4. aarch64, under qemu-user (Debian qemu-user-static, binfmt_misc) in an arm64 Debian root
#      made by debootstrap (kept in .tools/arm64-root: python3, nodejs, no Rust): 1 with the
#      aarch64 wheel and arm64 CPython, 2 with rocklet-linux-arm64-gnu and arm64 Node, 3 with
#      the aarch64 broker serving the official Python client (which runs on the host)
#   5. the sdist: pip without cargo on PATH stops with the message naming what it needs; with
#      cargo it builds, installs, and the wheel smoke test passes
#   6. the playground: dist/playground served by a plain static server (python -m
#      http.server) and by the tarball's `rocklet playground`, each clicked in headless
#      Chromium (tests/ci/dist/playground.cjs)
# Not run: the linux-x64-musl addon (no musl Node here: it is checked to be an x86_64 shared
# object needing musl's libc and nothing else).
# "No Rust toolchain": ~/.cargo/bin is off PATH, CARGO_HOME/RUSTUP_HOME point nowhere, and
# cargo/rustc/rustup first on PATH are stubs that record any call; the part fails if one was
# made (the arm64 root has no Rust at all). Needs root for apt-get (skipped when the packages
# are there), binfmt_misc and chroot. Run alone:
#   bash tests/ci/dist.sh                every artifact (NO_BUILD=1: test those already in
#                                        dist/); cold, about an hour on two cores
#   DIST_CROSS=0 bash tests/ci/dist.sh   the short form: the x86_64 glibc artifacts and the
#                                        sdist only (no aarch64, no musl: steps 0 and 3 for
#                                        them, and 4, left out)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/ci/dist
TOOLS=$ROOT/.tools
cd "$ROOT"
t0=$(date +%s)
step() { echo "== dist: $* ($(( $(date +%s) - t0 ))s)"; }
# The aarch64 and musl artifacts are built and tested too (DIST_CROSS=0: the x86_64 glibc ones
# and the sdist only). In a CI run tests/ci/run builds them all early in the background
# (tests/ci/prefetch.sh: dist, arm64-root), at the lowest priority, so they take the CPU the
# parts before this one leave idle; this part waits for them and then only packs and tests.
CROSS=${DIST_CROSS:-1}
# The artifacts' own target dir (the prefetched build's: cargo locks a target dir per build).
export CARGO_TARGET_DIR=$ROOT/target/dist
PY_CLIENT="rocketmq-python-client==5.1.2"

step "tools"
DIST_CROSS=$CROSS PARTS=dist bash tests/ci/prefetch.sh install
# The official Python client, in a venv of its own (from PyPI; the broker part uses the same).
CLIENT_VENV=$TOOLS/dist-client
[ -x "$CLIENT_VENV/bin/python" ] || python3 -m venv "$CLIENT_VENV"
"$CLIENT_VENV/bin/python" -c 'import rocketmq' 2>/dev/null \
  || "$CLIENT_VENV/bin/python" -m pip install -q "$PY_CLIENT"

# The arm64 Debian root (tests/ci/prefetch.sh arm64-root), made beside the build: prefetched
# in a CI run; run alone, started here in the background (its downloads overlap the build).
ARM_ROOT=$TOOLS/arm64-root
OWN_PREFETCH=
if [ "$CROSS" != 0 ]; then
  if [ -z "${PREFETCH_DIR:-}" ] || ! bash tests/ci/prefetch.sh has arm64-root; then
    OWN_PREFETCH=$TOOLS/prefetch-dist
    mkdir -p "$OWN_PREFETCH"
    rm -f "$OWN_PREFETCH"/*.rc
    echo $$ > "$OWN_PREFETCH/started"
    echo arm64-root > "$OWN_PREFETCH/jobs"
    step "arm64 Debian root (debootstrap --arch=arm64, second stage under qemu), in the background"
    PREFETCH_DIR=$OWN_PREFETCH bash tests/ci/prefetch.sh one arm64-root &
    ROOT_PID=$!
    trap 'kill "$ROOT_PID" 2>/dev/null || true' EXIT
  fi
fi
# maturin for pip's isolated build of the sdist (--no-index: from here only).
WHEELHOUSE=$TOOLS/wheelhouse
ls "$WHEELHOUSE"/maturin-1.16.*.whl >/dev/null 2>&1 \
  || python3 -m pip download -q --only-binary=:all: -d "$WHEELHOUSE" "maturin==1.16.*"

if [ "${NO_BUILD:-0}" != 1 ]; then
  # Prefetched (a CI run): that build is this part's build, of this tree, by the same command;
  # its artifacts are in dist/. Otherwise (run alone, or the prefetched build failed) build here.
  # Only a prefetch this run started (tests/ci/run exports PREFETCH_DIR): an older run's
  # artifacts are not this tree's. rc 2: none started.
  rc=2
  if [ -n "${PREFETCH_DIR:-}" ] && bash tests/ci/prefetch.sh has dist; then
    step "waiting for the prefetched build of the artifacts (tests/ci/prefetch.sh dist)"
    rc=0
    bash tests/ci/prefetch.sh wait dist || rc=$?
  fi
  if [ "$rc" = 0 ]; then
    step "built by the prefetched build ($PREFETCH_DIR/dist.log)"
  else
    [ "$rc" = 2 ] || echo "the prefetched build failed (the end of its log above); building here"
    step "build (dist/build.sh)"
    DIST_CROSS=$CROSS bash dist/build.sh --install
  fi
fi
V=$(bash dist/version.sh)
bash dist/version.sh check
(cd dist && sha256sum -c --quiet SHA256SUMS)

step "glibc floor: binaries, addons and wheels (x86_64, aarch64) need nothing newer than glibc 2.17"
FLOOR=2.17
FLOOR_DIR=$(mktemp -d /tmp/rocklet-floor-XXXXXX)
# The newest GLIBC_x.y version FILE needs (readelf -V: the version needs the loader checks;
# readelf reads an ELF file of any architecture), which must not pass $FLOOR.
floor() {
  local newest
  newest=$(readelf -V -W "$1" | grep -o 'Name: GLIBC_[0-9][0-9.]*' | sed 's/^Name: GLIBC_//' \
    | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -1)
  echo "$(basename "$(dirname "$1")")/$(basename "$1") ($(file -b "$1" | cut -d, -f2 | sed 's/^ //')): newest glibc version GLIBC_$newest"
  [ -n "$newest" ] || { echo "$1: no glibc versions found (not a dynamic glibc ELF file?)"; exit 1; }
  [ "$(printf '%s\n%s\n' "$newest" "$FLOOR" | sort -t. -k1,1n -k2,2n -k3,3n | tail -1)" = "$FLOOR" ] \
    || { echo "$1 needs glibc $newest: above the $FLOOR floor"; exit 1; }
}
AW=$TOOLS/auditwheel
[ -x "$AW/bin/auditwheel" ] || { python3 -m venv "$AW" && "$AW/bin/python" -m pip install -q "auditwheel==6.8.2"; }
ARCHES=(x86_64)
[ "$CROSS" = 0 ] || ARCHES+=(aarch64)
for arch in "${ARCHES[@]}"; do
  tar -xzf "dist/rocklet-$V-$arch-linux.tar.gz" -C "$FLOOR_DIR"
  file "$FLOOR_DIR/rocklet-$V-$arch-linux/bin/rocklet" | grep -q "$( [ $arch = x86_64 ] && echo x86-64 || echo aarch64)" \
    || { echo "the $arch tarball's binary is not for $arch"; exit 1; }
  floor "$FLOOR_DIR/rocklet-$V-$arch-linux/bin/rocklet"
  triple=linux-$( [ $arch = x86_64 ] && echo x64 || echo arm64)-gnu
  mkdir -p "$FLOOR_DIR/$triple"
  tar -xzf "dist/npm/rocklet-$triple-$V.tgz" -C "$FLOOR_DIR/$triple"
  floor "$FLOOR_DIR/$triple/package/rocklet.$triple.node"
  whl=$(ls dist/rocklet-"$V"-cp39-abi3-*_"$arch".whl)
  python3 -m zipfile -e "$whl" "$FLOOR_DIR/wheel-$arch"
  floor "$(find "$FLOOR_DIR/wheel-$arch" -name '*.so' | head -1)"
  # auditwheel, PyPA's own check, must find the wheel consistent with its manylinux_2_17 tag.
  "$AW/bin/auditwheel" show "$whl" | tee "$FLOOR_DIR/auditwheel.txt"
  grep -q "\"manylinux_2_17_$arch\"" "$FLOOR_DIR/auditwheel.txt" \
    || { echo "auditwheel does not accept $whl as manylinux_2_17_$arch"; exit 1; }
done
if [ "$CROSS" != 0 ]; then
# musl: the broker is one static file; the addon an x86_64 shared object needing musl's libc only.
tar -xzf "dist/rocklet-$V-x86_64-linux-musl.tar.gz" -C "$FLOOR_DIR"
file "$FLOOR_DIR/rocklet-$V-x86_64-linux-musl/bin/rocklet" | tee "$FLOOR_DIR/file.txt"
grep -q 'x86-64.*statically linked' "$FLOOR_DIR/file.txt" || { echo "the musl broker is not a static x86_64 binary"; exit 1; }
mkdir -p "$FLOOR_DIR/musl"
tar -xzf "dist/npm/rocklet-linux-x64-musl-$V.tgz" -C "$FLOOR_DIR/musl"
needed=$(readelf -d "$FLOOR_DIR/musl/package/rocklet.linux-x64-musl.node" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')
echo "rocklet.linux-x64-musl.node needs: $needed"
[ "$needed" = "libc.musl-x86_64.so.1" ] || [ "$needed" = "libc.so" ] \
  || { echo "the musl addon needs more than musl's libc: $needed"; exit 1; }
fi
rm -rf "$FLOOR_DIR"

WORK=$(mktemp -d /tmp/rocklet-dist-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}" ${ROOT_PID:+"$ROOT_PID"}; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# A PATH with no Rust toolchain: without ~/.cargo/bin, and stubs first that record a call.
STUBS=$WORK/stubs
mkdir -p "$STUBS"
# pip runs `rustc --version` for its User-Agent string: such a probe is logged apart and
# answered "not found"; any other call fails the part.
for t in cargo rustc rustup; do
  cat > "$STUBS/$t" <<STUB
#!/bin/sh
if [ "\$*" = --version ]; then echo "$t --version" >> "$WORK/toolchain-probes"; exit 127; fi
echo "$t \$*" >> "$WORK/toolchain-calls"
echo "$t: no Rust toolchain here (dist smoke test)" >&2
exit 127
STUB
  chmod +x "$STUBS/$t"
done
CLEAN_PATH=$STUBS:$(echo "$PATH" | tr ':' '\n' | grep -v -e '\.cargo/bin' -e '\.rustup' | paste -sd:)
# `env` execs the command: started with `&`, $! is the command's own pid (cleanup kills it).
CLEAN=(env -u CARGO_TARGET_DIR -u RUSTC -u RUSTUP_TOOLCHAIN PATH="$CLEAN_PATH"
  CARGO_HOME="$WORK/no-cargo" RUSTUP_HOME="$WORK/no-rustup")
clean() { "${CLEAN[@]}" "$@"; }
[ "$(clean sh -c 'command -v cargo')" = "$STUBS/cargo" ] || { echo "cargo still reachable"; exit 1; }

step "wheel: a fresh venv, nothing but the wheel"
WHEEL=$(ls dist/rocklet-"$V"-cp39-abi3-*_x86_64.whl)
tw=$(date +%s%N)
clean python3 -m venv "$WORK/venv"
clean "$WORK/venv/bin/python" -m pip install -q --no-index "$WHEEL"
(cd "$WORK" && clean "$WORK/venv/bin/python" "$HERE/wheel_smoke.py")
echo "wheel: venv + install + smoke in $(( ($(date +%s%N) - tw) / 1000000 )) ms"

step "npm: the tarballs in a fresh project"
APP=$WORK/app
mkdir -p "$APP"
echo '{"name":"dist-smoke","version":"1.0.0","private":true,"type":"module"}' > "$APP/package.json"
(cd "$APP" && clean npm install --no-audit --no-fund --offline --loglevel=error \
  "$ROOT/dist/npm/rocklet-linux-x64-gnu-$V.tgz" "$ROOT/dist/npm/rocklet-$V.tgz")
cp "$HERE/npm_smoke.mjs" "$APP/"
(cd "$APP" && clean node npm_smoke.mjs linux-x64-gnu)

# One broker tarball: unpacked under DIR (seen by the broker as AT: the same path, or inside
# the arm64 root), its binary run by RUN... (nothing, or chroot into the root), serving the
# official Python client (on this host), then rocklet send / consume with the tarball's binary.
#   broker_tarball NAME DIR AT RUN...
broker_tarball() {
  local name=$1 dir=$2 at=$3; shift 3
  local tb addr= log=$dir/broker.log
  tb=$(date +%s%N)
  tar -C "$dir" -xzf "dist/rocklet-$V-$name.tar.gz"
  local B=$dir/rocklet-$V-$name BA=$at/rocklet-$V-$name
  for f in bin/rocklet etc/rocklet.toml systemd/rocklet.service alerts/rocklet-alerts.yml README.md README-broker.md README-runbooks.md CHANGELOG.md; do
    [ -e "$B/$f" ] || { echo "tarball $name lacks $f"; exit 1; }
  done
  grep -qx 'Restart=on-failure' "$B/systemd/rocklet.service"
  clean "$@" "$BA/bin/rocklet" --version
  # The default config, with every listener moved to a free port (CI may run other brokers).
  "${CLEAN[@]}" "$@" "$BA/bin/rocklet" broker --config "$BA/etc/rocklet.toml" --data-dir "$at/data-$name" \
    --listen 127.0.0.1:0 --remoting-listen 127.0.0.1:0 --namesrv-listen 127.0.0.1:0 \
    --metrics-listen 127.0.0.1:0 2> "$log" &
  pids+=($!)
  for _ in $(seq 600); do
    addr=$(grep -o ' addr=[^ ]*' "$log" | head -1 | cut -d= -f2 || true)
    [ -n "$addr" ] && break
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  [ -n "$addr" ] || { echo "the $name broker did not start"; cat "$log"; exit 1; }
  echo "broker $name: unpacked and serving on $addr in $(( ($(date +%s%N) - tb) / 1000000 )) ms"
  grep -q 'flush=Sync' "$log" || { echo "the default config's sync flush is not in effect"; cat "$log"; exit 1; }
  clean "$CLIENT_VENV/bin/python" "$HERE/broker_smoke.py" "$addr"
  clean env ROCKLET_ADDR="$addr" "$@" "$BA/bin/rocklet" send -t "DistCli-$name" one two
  local got
  got=$(clean env ROCKLET_ADDR="$addr" "$@" "$BA/bin/rocklet" consume -t "DistCli-$name" -g DistCliG --wait 2 | sort | paste -sd,)
  [ "$got" = "one,two" ] || { echo "rocklet consume ($name) got: $got"; exit 1; }
  echo "rocklet send / consume from the $name tarball: OK"
  kill "${pids[-1]}"
}

step "broker: from the tarball, the official Python client"
broker_tarball x86_64-linux "$WORK" "$WORK"
B=$WORK/rocklet-$V-x86_64-linux

if [ "$CROSS" != 0 ]; then
step "waiting for the arm64 Debian root"
PREFETCH_DIR=${OWN_PREFETCH:-${PREFETCH_DIR:-$TOOLS/prefetch}} bash tests/ci/prefetch.sh wait arm64-root \
  || { echo "making the arm64 root failed"; exit 1; }
ROOT_PID=
[ -e "$ARM_ROOT/.ready" ] || { echo "the arm64 root is not ready"; exit 1; }
[ "$(chroot "$ARM_ROOT" uname -m)" = aarch64 ] || { echo "the arm64 root does not run as aarch64"; exit 1; }
[ -z "$(chroot "$ARM_ROOT" sh -c 'command -v cargo rustc rustup' || true)" ] || { echo "the arm64 root has Rust"; exit 1; }

step "static musl broker: from its tarball, on this host"
broker_tarball x86_64-linux-musl "$WORK" "$WORK"

# aarch64: everything under qemu-user in the arm64 root, in a scratch folder inside it
# (removed on exit). chroot resets nothing else: CLEAN's PATH still comes first, and the
# root's /usr/bin has no cargo.
AW_DIR=$(mktemp -d "$ARM_ROOT/tmp/rocklet-dist-XXXXXX")
AT=/tmp/$(basename "$AW_DIR")
ARM=(chroot "$ARM_ROOT")
cleanup_arm() { cleanup; rm -rf "$AW_DIR"; }
trap cleanup_arm EXIT

step "aarch64 wheel: arm64 CPython $("${ARM[@]}" python3 -c 'import platform; print(platform.python_version())') under qemu, a fresh venv"
ta=$(date +%s%N)
cp dist/rocklet-"$V"-cp39-abi3-*_aarch64.whl "$HERE/wheel_smoke.py" "$AW_DIR/"
clean "${ARM[@]}" /usr/bin/python3 -m venv "$AT/venv"
clean "${ARM[@]}" "$AT/venv/bin/python" -m pip install -q --no-index "$AT/$(basename dist/rocklet-"$V"-cp39-abi3-*_aarch64.whl)"
clean "${ARM[@]}" /bin/sh -c "cd $AT && exec $AT/venv/bin/python -c 'import platform; assert platform.machine() == \"aarch64\", platform.machine()' && exec $AT/venv/bin/python wheel_smoke.py"
echo "aarch64 wheel: venv + install + smoke under qemu in $(( ($(date +%s%N) - ta) / 1000000 )) ms"

step "aarch64 npm: the tarballs installed for arm64, run by arm64 Node $("${ARM[@]}" node --version) under qemu"
mkdir -p "$AW_DIR/app"
echo '{"name":"dist-smoke","version":"1.0.0","private":true,"type":"module"}' > "$AW_DIR/app/package.json"
# npm runs on this host: --cpu=arm64 installs as for arm64, and --force lets it take a named
# tarball whose cpu is not this host's (EBADPLATFORM otherwise).
(cd "$AW_DIR/app" && clean npm install --no-audit --no-fund --offline --loglevel=error --force --os=linux --cpu=arm64 --libc=glibc \
  "$ROOT/dist/npm/rocklet-linux-arm64-gnu-$V.tgz" "$ROOT/dist/npm/rocklet-$V.tgz")
cp "$HERE/npm_smoke.mjs" "$AW_DIR/app/"
clean "${ARM[@]}" /bin/sh -c "cd $AT/app && exec node npm_smoke.mjs linux-arm64-gnu"

step "aarch64 broker: from its tarball under qemu, the official Python client"
broker_tarball aarch64-linux "$AW_DIR" "$AT" "${ARM[@]}"
fi

step "sdist: pip without cargo stops with what it needs; with cargo it builds and imports"
SDIST=dist/rocklet-$V.tar.gz
NOCARGO=$WORK/no-cargo-bin
mkdir -p "$NOCARGO"
python3 -m venv "$WORK/sdist-venv"
# No cargo at all on PATH (the stubs above would be found): pip runs the backend with its own
# python; PATH has nothing else.
if env PATH="$NOCARGO" "$WORK/sdist-venv/bin/python" -m pip install --no-cache-dir --no-index \
     --find-links "$WHEELHOUSE" "$SDIST" > "$WORK/sdist-nocargo.log" 2>&1; then
  echo "the sdist installed with no cargo on PATH"; cat "$WORK/sdist-nocargo.log"; exit 1
fi
grep -q 'rocklet: building from source needs Rust, and `cargo` is not on PATH' "$WORK/sdist-nocargo.log" \
  && grep -q 'cargo and rustc 1.89 or later' "$WORK/sdist-nocargo.log" \
  || { echo "no clear message without cargo:"; cat "$WORK/sdist-nocargo.log"; exit 1; }
sed -n '/building from source needs Rust/,/Prebuilt wheels/p' "$WORK/sdist-nocargo.log"
# With cargo (this machine's rustup toolchain): cargo's build directory is kept in target/ so
# a later run rebuilds only the crates of the unpacked sdist.
tsd=$(date +%s)
env CARGO_TARGET_DIR="$ROOT/target/sdist-build" nice -n 10 "$WORK/sdist-venv/bin/python" -m pip install -q \
  --no-cache-dir --no-index --find-links "$WHEELHOUSE" "$SDIST"
(cd "$WORK" && "$WORK/sdist-venv/bin/python" "$HERE/wheel_smoke.py")
echo "sdist: built from source, installed and smoke-tested in $(( $(date +%s) - tsd )) s"

step "playground: static site, and rocklet playground, in headless chromium"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
P1=$(free_port)
(cd dist/playground && exec python3 -m http.server --bind 127.0.0.1 "$P1" >/dev/null 2>&1) &
pids+=($!)
P2=$(free_port)
"${CLEAN[@]}" "$B/bin/rocklet" playground --listen "127.0.0.1:$P2" > "$WORK/playground.log" 2>&1 &
pids+=($!)
for port in "$P1" "$P2"; do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
done
mkdir -p target/dist-artifacts
NODE_PATH=$TOOLS/node_modules clean node "$HERE/playground.cjs" "http://127.0.0.1:$P1/" target/dist-artifacts/playground-static.png
NODE_PATH=$TOOLS/node_modules clean node "$HERE/playground.cjs" "http://127.0.0.1:$P2/" target/dist-artifacts/playground-rocklet.png

step "no Rust toolchain was called"
[ ! -s "$WORK/toolchain-probes" ] || echo "version probes (pip's User-Agent), answered 'not found': $(sort "$WORK/toolchain-probes" | uniq -c | paste -sd' ')"
if [ -s "$WORK/toolchain-calls" ]; then
  echo "installing or running the artifacts called a Rust toolchain:"; cat "$WORK/toolchain-calls"; exit 1
fi
column -t dist/sizes.txt
step "done"
