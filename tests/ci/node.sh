#!/usr/bin/env bash
# Node binding (npm package `rocklet`): build the addon (debug profile) with plain cargo,
# copy it to bindings-node/rocklet.node, run `node --test` (scenario vectors, sample,
# durable, checkers, consumers, bad input, index.d.ts drift, npm pack smoke in CJS + ESM),
# then `tsc --noEmit` over index.d.ts + test/types.ts. Idempotent; run from anywhere:
#   bash tests/ci/node.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODEDIR=$ROOT/bindings-node
TOOLS=$ROOT/.tools/node-rocklet      # typescript + @types/node, kept between runs
t0=$(date +%s)
cd "$ROOT"

command -v node >/dev/null || { echo "node is required (Node 20)"; exit 1; }
command -v cargo >/dev/null || { echo "cargo is required"; exit 1; }

echo "== tools"
if [ ! -x "$TOOLS/node_modules/.bin/tsc" ] || [ ! -d "$TOOLS/node_modules/@types/node" ]; then
  npm install --no-save --no-audit --no-fund --prefix "$TOOLS" typescript@5 @types/node@20 >/dev/null
fi

echo "== build addon"
nice -n 10 cargo build -p rocklet-node
case "$(uname -s)" in
  Darwin) LIB=librocklet_node.dylib ;;
  *) LIB=librocklet_node.so ;;
esac
cp "${CARGO_TARGET_DIR:-$ROOT/target}/debug/$LIB" "$NODEDIR/rocklet.node"

echo "== node --test"
(cd "$NODEDIR" && node --test test/)

echo "== index.d.ts (tsc --noEmit)"
(cd "$NODEDIR" && "$TOOLS/node_modules/.bin/tsc" -p tsconfig.json --typeRoots "$TOOLS/node_modules/@types")

echo "node done in $(( $(date +%s) - t0 ))s"
