#!/usr/bin/env bash
# wasm part of CI: the no-std proof, the wasm binding and its playground.
#   1. tools (idempotent): Debian rustc-web & co. + chromium, wasm-bindgen-cli of the exact
#      crate version (cargo install into .tools), npm playwright-core + binaryen into .tools
#   2. no-std proof: rocklet-core alone for wasm32-unknown-unknown with only core + alloc
#   3. bindings-wasm/build.sh: release .wasm, JS glue (web -> playground/pkg, nodejs), wasm-opt,
#      no `env` imports, size report
#   4. node --test: the binding's tests, every scenario vector (tests/vectors/scenarios) and the
#      playground's op-tag names (RocketMQ's or Rocklet's own)
#   5. headless Chromium: the playground's "crash, then check commits" by clicking its controls;
#      screenshot -> target/wasm-artifacts/playground.png
# Run from anywhere; needs root for apt-get (skipped when the packages are there).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TOOLS="$ROOT/.tools"
ART="$ROOT/target/wasm-artifacts"
cd "$ROOT"
t0=$(date +%s)
step() { echo "== wasm: $* ($(( $(date +%s) - t0 ))s)"; }

step "tools"
pkgs=(rustc-web cargo-web rust-web-src rust-web-llvm lld-22 chromium)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# wasm-bindgen-cli must equal the wasm-bindgen crate in Cargo.lock. Not --locked: the CLI's own
# lockfile pins a yanked crate.
# tests/ci/run starts this install early in the background (tests/ci/prefetch.sh): wait for
# it; run alone, install here.
WBV=$(cargo pkgid wasm-bindgen | sed 's/.*[@#]//')
bash "$ROOT/tests/ci/prefetch.sh" wait wasm-bindgen || [ $? = 2 ] || echo "prefetched install failed; installing here"
if [ "$("$TOOLS/bin/wasm-bindgen" --version 2>/dev/null | awk '{print $2}')" != "$WBV" ]; then
  # --debug: it runs once per build on one module; an optimized build of it costs minutes.
  nice -n 10 cargo install --quiet --debug --root "$TOOLS" wasm-bindgen-cli --version "$WBV"
fi
if [ ! -d "$TOOLS/node_modules/playwright-core" ] || [ ! -x "$TOOLS/node_modules/.bin/wasm-opt" ]; then
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$TOOLS" playwright-core@1.65.1 binaryen@132.0.0
fi

step "fmt"
cargo fmt -p rocklet-wasm --check

step "no-std proof: rocklet-core and rocklet-embed for wasm32-unknown-unknown with only core + alloc"
env RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$ROOT/target/wasm-nostd" \
  nice -n 10 /usr/bin/cargo build --quiet -p rocklet-core -p rocklet-embed --target wasm32-unknown-unknown \
  -Zbuild-std=core,alloc

step "build rocklet-wasm"
# The prefetch chain builds it early (for the dist artifacts too): wait for that build, so
# two never write playground/pkg at once; this one then finds it built.
bash "$ROOT/tests/ci/prefetch.sh" wait playground || [ $? = 2 ] || echo "prefetched playground build failed; building here"
bash "$ROOT/bindings-wasm/build.sh"

step "node --test (binding + scenario vectors + the playground's names)"
PKG_NODE="$ROOT/target/wasm-pkg/node" node --test --test-reporter=dot \
  "$ROOT/bindings-wasm/tests/binding.test.mjs" "$ROOT/bindings-wasm/tests/vectors.test.mjs" \
  "$ROOT/bindings-wasm/tests/names.test.mjs" "$ROOT/bindings-wasm/tests/error-codes.test.mjs"

step "headless chromium"
mkdir -p "$ART"
NODE_PATH="$TOOLS/node_modules" node "$ROOT/bindings-wasm/tests/browser.test.cjs" \
  "$ROOT/bindings-wasm/playground" "$ART/playground.png"
cp "$ROOT/bindings-wasm/playground/pkg/rocklet_wasm_bg.wasm" "$ART/"

step "done"
