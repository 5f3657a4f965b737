#!/usr/bin/env bash
# dist part of CI: build every artifact (bash dist/build.sh --install; release builds reused
# from target/), then install each in a clean place with no Rust toolchain on PATH and
# smoke-test it:
#   1. the wheel in a fresh venv (pip --no-index: nothing but the wheel): import rocklet, a
#      checked transaction, a rollback, a durable reopen (tests/ci/dist/wheel_smoke.py)
#   2. the npm tarballs in a fresh project (npm --offline): CommonJS and ESM, the addon from
#      the per-platform package (tests/ci/dist/npm_smoke.mjs)
#   3. the broker tarball unpacked: bin/rocklet broker with etc/rocklet.toml, the official
#      Python client (rocketmq-python-client) sending, committing, rolling back, receiving
#      (tests/ci/dist/broker_smoke.py); rocklet send / consume from the tarball
#   0. the glibc floor: the broker binary, the Node addon and the wheel's extension need no
#      glibc symbol newer than 2.17 (objdump -T), and auditwheel accepts the wheel's
#      manylinux_2_17_x86_64 tag
#   4. the playground: dist/playground served by a plain static server (python -m
#      http.server) and by the tarball's `rocklet playground`, each clicked in headless
#      Chromium (tests/ci/dist/playground.cjs)
# "No Rust toolchain": ~/.cargo/bin is off PATH, CARGO_HOME/RUSTUP_HOME point nowhere, and
# cargo/rustc/rustup first on PATH are stubs that record any call; the part fails if one was
# made. Needs root for apt-get (skipped when the packages are there). Run alone:
#   bash tests/ci/dist.sh           (NO_BUILD=1: test the artifacts already in dist/)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/tests/ci/dist
TOOLS=$ROOT/.tools
cd "$ROOT"
t0=$(date +%s)
step() { echo "== dist: $* ($(( $(date +%s) - t0 ))s)"; }
PY_CLIENT="rocketmq-python-client==5.1.2"

step "tools"
pkgs=(chromium python3-venv)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Both at once, as tests/ci/wasm.sh installs them: an `npm install --no-save` of one into
# .tools removes the other (the playground build below installs binaryen when it is missing).
[ -d "$TOOLS/node_modules/playwright-core" ] && [ -x "$TOOLS/node_modules/.bin/wasm-opt" ] \
  || npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$TOOLS" \
       playwright-core@1.65.1 binaryen@132.0.0
# The official Python client, in a venv of its own (from PyPI; the broker part uses the same).
CLIENT_VENV=$TOOLS/dist-client
[ -x "$CLIENT_VENV/bin/python" ] || python3 -m venv "$CLIENT_VENV"
"$CLIENT_VENV/bin/python" -c 'import rocketmq' 2>/dev/null \
  || "$CLIENT_VENV/bin/python" -m pip install -q "$PY_CLIENT"

if [ "${NO_BUILD:-0}" != 1 ]; then
  step "build (dist/build.sh)"
  bash dist/build.sh --install
fi
V=$(bash dist/version.sh)
bash dist/version.sh check
(cd dist && sha256sum -c --quiet SHA256SUMS)

step "glibc floor: the binary, the addon and the wheel need nothing newer than glibc 2.17"
FLOOR=2.17
FLOOR_DIR=$(mktemp -d /tmp/rocklet-floor-XXXXXX)
# The newest GLIBC_x.y symbol version FILE needs (objdump -T), which must not pass $FLOOR.
floor() {
  local newest
  newest=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' \
    | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -1)
  echo "$(basename "$1"): newest glibc symbol GLIBC_$newest"
  [ -n "$newest" ] || { echo "$1: no glibc symbols found (not a dynamic ELF file?)"; exit 1; }
  [ "$(printf '%s\n%s\n' "$newest" "$FLOOR" | sort -t. -k1,1n -k2,2n -k3,3n | tail -1)" = "$FLOOR" ] \
    || { echo "$1 needs glibc $newest: above the $FLOOR floor"; exit 1; }
}
tar -xzf "dist/rocklet-$V-x86_64-linux.tar.gz" -C "$FLOOR_DIR"
floor "$FLOOR_DIR/rocklet-$V-x86_64-linux/bin/rocklet"
tar -xzf "dist/npm/rocklet-linux-x64-gnu-$V.tgz" -C "$FLOOR_DIR"
floor "$FLOOR_DIR/package/rocklet.linux-x64-gnu.node"
WHEEL_FILE=$(ls dist/rocklet-"$V"-cp39-abi3-*.whl)
python3 -m zipfile -e "$WHEEL_FILE" "$FLOOR_DIR/wheel"
floor "$(find "$FLOOR_DIR/wheel" -name '*.so' | head -1)"
# auditwheel, PyPA's own check, must find the wheel consistent with its manylinux_2_17 tag.
AW=$TOOLS/auditwheel
[ -x "$AW/bin/auditwheel" ] || { python3 -m venv "$AW" && "$AW/bin/python" -m pip install -q "auditwheel==6.8.2"; }
"$AW/bin/auditwheel" show "$WHEEL_FILE" | tee "$FLOOR_DIR/auditwheel.txt"
grep -q '"manylinux_2_17_x86_64"' "$FLOOR_DIR/auditwheel.txt" \
  || { echo "auditwheel does not accept the wheel as manylinux_2_17_x86_64"; exit 1; }
rm -rf "$FLOOR_DIR"

WORK=$(mktemp -d /tmp/rocklet-dist-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
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
WHEEL=$(ls dist/rocklet-"$V"-cp39-abi3-*.whl)
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
(cd "$APP" && clean node npm_smoke.mjs)

step "broker: from the tarball, the official Python client"
tb=$(date +%s%N)
tar -C "$WORK" -xzf "dist/rocklet-$V-x86_64-linux.tar.gz"
B=$WORK/rocklet-$V-x86_64-linux
for f in bin/rocklet etc/rocklet.toml systemd/rocklet.service alerts/rocklet-alerts.yml README.md README-broker.md README-runbooks.md CHANGELOG.md; do
  [ -e "$B/$f" ] || { echo "tarball lacks $f"; exit 1; }
done
grep -qx 'Restart=on-failure' "$B/systemd/rocklet.service"
clean "$B/bin/rocklet" --version
# The default config, with every listener moved to a free port (CI may run other brokers).
"${CLEAN[@]}" "$B/bin/rocklet" broker --config "$B/etc/rocklet.toml" --data-dir "$WORK/data" \
  --listen 127.0.0.1:0 --remoting-listen 127.0.0.1:0 --namesrv-listen 127.0.0.1:0 \
  --metrics-listen 127.0.0.1:0 2> "$WORK/broker.log" &
pids+=($!)
addr=
for _ in $(seq 300); do
  addr=$(grep -o ' addr=[^ ]*' "$WORK/broker.log" | head -1 | cut -d= -f2 || true)
  [ -n "$addr" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || { cat "$WORK/broker.log"; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "the broker did not start"; cat "$WORK/broker.log"; exit 1; }
echo "broker: unpacked and serving on $addr in $(( ($(date +%s%N) - tb) / 1000000 )) ms"
grep -q 'flush=Sync' "$WORK/broker.log" || { echo "the default config's sync flush is not in effect"; cat "$WORK/broker.log"; exit 1; }
clean "$CLIENT_VENV/bin/python" "$HERE/broker_smoke.py" "$addr"
clean env ROCKLET_ADDR="$addr" "$B/bin/rocklet" send -t DistCli one two
got=$(clean env ROCKLET_ADDR="$addr" "$B/bin/rocklet" consume -t DistCli -g DistCliG --wait 2 | sort | paste -sd,)
[ "$got" = "one,two" ] || { echo "rocklet consume got: $got"; exit 1; }
echo "rocklet send / consume from the tarball: OK"

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
