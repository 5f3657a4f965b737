#!/usr/bin/env bash
# Builds rocklet-wasm and its JS glue:
#   bindings-wasm/playground/pkg/  --target web    (the playground's; gitignored, built here)
#   target/wasm-pkg/node/          --target nodejs (for `node --test`)
# Needs (tests/ci/wasm.sh installs them): Debian rustc-web cargo-web rust-web-src
# rust-web-llvm lld-22, wasm-bindgen-cli of the exact crate version in .tools/bin, and
# npm binaryen (wasm-opt) in .tools/node_modules.
#   bash bindings-wasm/build.sh            # release build, wasm-opt -Oz
#   WASM_OPT=none bash bindings-wasm/build.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/.tools}
WASM_OPT=${WASM_OPT:-npm}
PLAY="$ROOT/bindings-wasm/playground"
NODE_OUT="$ROOT/target/wasm-pkg/node"
cd "$ROOT"

# Debian ships no prebuilt wasm32 std: build it (-Zbuild-std). RUSTC must be set, or rustup's
# rustc (first in PATH) would be used. The profile is tuned for size here, without touching the
# workspace's release profile: no debug info, fat LTO, one codegen unit, opt-level z, abort.
env RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
    CARGO_TARGET_DIR="$ROOT/target/wasm" \
    CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_LTO=true \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=z \
    CARGO_PROFILE_RELEASE_PANIC=abort \
    nice -n 10 /usr/bin/cargo build -p rocklet-wasm --release --target wasm32-unknown-unknown \
    -Zbuild-std=std,panic_abort
WASM="$ROOT/target/wasm/wasm32-unknown-unknown/release/rocklet_wasm.wasm"

rm -rf "$PLAY/pkg" "$NODE_OUT"
"$TOOLS/bin/wasm-bindgen" --target web --out-dir "$PLAY/pkg" "$WASM"
"$TOOLS/bin/wasm-bindgen" --target nodejs --out-dir "$NODE_OUT" "$WASM"
# Both targets get the same module; optimize it once (cached by the input's hash).
web="$PLAY/pkg/rocklet_wasm_bg.wasm"; node="$NODE_OUT/rocklet_wasm_bg.wasm"
cmp -s "$web" "$node" || { echo "web and nodejs glue expect different modules" >&2; exit 1; }
case "$WASM_OPT" in
  npm) cached="$ROOT/target/wasm/opt-$(sha256sum "$web" | cut -c1-16).wasm"
       if [ ! -f "$cached" ]; then
         rm -f "$ROOT"/target/wasm/opt-*.wasm
         "$TOOLS/node_modules/.bin/wasm-opt" -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
           --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
           "$web" -o "$cached"
       fi
       cp "$cached" "$web"; cp "$cached" "$node" ;;
  none) ;;
  *) echo "WASM_OPT must be npm or none" >&2; exit 2 ;;
esac

# The module must import nothing but wasm-bindgen's own glue: no `env` (libc, a host clock…).
node -e '
  const m = new WebAssembly.Module(require("fs").readFileSync(process.argv[1]));
  const mods = [...new Set(WebAssembly.Module.imports(m).map((i) => i.module))];
  const bad = mods.filter((x) => x !== "./rocklet_wasm_bg.js" && x !== "__wbindgen_placeholder__" && !x.startsWith("wbg"));
  console.log("wasm imports from:", mods.join(", "));
  if (bad.length) { console.error("unexpected wasm imports from:", bad.join(", ")); process.exit(1); }
' "$PLAY/pkg/rocklet_wasm_bg.wasm"
raw=$(stat -c %s "$WASM"); opt=$(stat -c %s "$PLAY/pkg/rocklet_wasm_bg.wasm")
gz=$(gzip -9c "$PLAY/pkg/rocklet_wasm_bg.wasm" | wc -c)
echo "rocklet_wasm.wasm: cargo ${raw} B, shipped ${opt} B (${gz} B gzipped)"
