#!/usr/bin/env bash
# Builds rocklet-wasm and its JS glue:
#   bindings-wasm/playground/pkg/  --target web    (the playground's; gitignored, built here)
#   target/wasm-pkg/node/          --target nodejs (for `node --test`)
# Needs (tests/ci/wasm.sh installs them): Debian rustc-web cargo-web rust-web-src
# rust-web-llvm lld-22, wasm-bindgen-cli of the exact crate version in .tools/bin, and
# npm binaryen (wasm-opt) in .tools/node_modules.
#   bash bindings-wasm/build.sh            # release build, wasm-opt -Oz
#   WASM_OPT=none bash bindings-wasm/build.sh
#   bash bindings-wasm/build.sh --install  # install what is missing first (apt as root)
# It checks them first and, when one is missing, names it and prints the command that
# installs it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOLS=${TOOLS:-$ROOT/.tools}
WASM_OPT=${WASM_OPT:-npm}
PLAY="$ROOT/bindings-wasm/playground"
NODE_OUT="$ROOT/target/wasm-pkg/node"
cd "$ROOT"

# Prerequisites: Debian's wasm toolchain, wasm-bindgen-cli of the crate's exact version,
# wasm-opt (npm binaryen) unless WASM_OPT=none, node.
DEB=(rustc-web cargo-web rust-web-src rust-web-llvm lld-22)
BINARYEN=binaryen@132.0.0
for t in node cargo; do
  command -v "$t" >/dev/null || {
    echo "bindings-wasm/build.sh: \`$t\` is not on PATH (cargo: rustup's, for the lockfile; node: Node 20 from Debian or nodejs.org)" >&2
    exit 1
  }
done
WBV=$(cargo pkgid wasm-bindgen | sed 's/.*[@#]//')
missing_deb=()
for p in "${DEB[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing_deb+=("$p"); done
need_wb=0
[ "$("$TOOLS/bin/wasm-bindgen" --version 2>/dev/null | awk '{print $2}')" = "$WBV" ] || need_wb=1
need_opt=0
[ "$WASM_OPT" != npm ] || [ -x "$TOOLS/node_modules/.bin/wasm-opt" ] || need_opt=1
install_cmds=()
[ ${#missing_deb[@]} -eq 0 ] || install_cmds+=("apt-get install -y ${missing_deb[*]}")
[ "$need_wb" = 0 ] || install_cmds+=("cargo install --debug --root $TOOLS wasm-bindgen-cli --version $WBV")
[ "$need_opt" = 0 ] || install_cmds+=("npm install --no-save --no-audit --no-fund --prefix $TOOLS $BINARYEN")
if [ ${#install_cmds[@]} -gt 0 ]; then
  if [ "${1:-}" = --install ]; then
    if [ ${#missing_deb[@]} -gt 0 ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing_deb[@]}" >/dev/null
    fi
    [ "$need_wb" = 0 ] || nice -n 10 cargo install --quiet --debug --root "$TOOLS" wasm-bindgen-cli --version "$WBV"
    [ "$need_opt" = 0 ] || npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$TOOLS" "$BINARYEN"
  else
    {
      echo "bindings-wasm/build.sh: missing prerequisites:"
      [ ${#missing_deb[@]} -eq 0 ] || echo "  Debian packages ${missing_deb[*]} (the wasm32 Rust toolchain: /usr/bin/cargo, /usr/bin/rustc, the std source, rust-lld)"
      [ "$need_wb" = 0 ] || echo "  wasm-bindgen-cli $WBV in $TOOLS/bin (must equal the wasm-bindgen crate in Cargo.lock)"
      [ "$need_opt" = 0 ] || echo "  wasm-opt ($BINARYEN) in $TOOLS/node_modules (or build with WASM_OPT=none)"
      echo "install them with:"
      echo "  bash bindings-wasm/build.sh --install"
      echo "or by hand (apt-get as root):"
      for c in "${install_cmds[@]}"; do echo "  $c"; done
    } >&2
    exit 1
  fi
fi

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
