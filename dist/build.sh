#!/usr/bin/env bash
# One command builds every artifact a user installs, into dist/ (V: bash dist/version.sh):
#   rocklet-V-x86_64-linux.tar.gz        the broker: bin/rocklet (release, the playground built
#   rocklet-V-aarch64-linux.tar.gz       in), etc/rocklet.toml (default config),
#                                        systemd/rocklet.service (Restart=on-failure), README.md,
#                                        README-broker.md, CHANGELOG.md; glibc >= 2.17
#   rocklet-V-x86_64-linux-musl.tar.gz   the same with a fully static bin/rocklet (musl): any
#                                        x86_64 Linux, Alpine included
#   rocklet-V-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
#   rocklet-V-cp39-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl
#                                        `import rocklet` (maturin build --release --zig; abi3:
#                                        every CPython >= 3.9; glibc 2.17 and later)
#   rocklet-V.tar.gz                     the sdist: pip builds it where no wheel fits (needs
#                                        cargo; without it, a message naming what it needs)
#   npm/rocklet-V.tgz                    npm package `rocklet` (JS, types), and in napi's layout
#   npm/rocklet-linux-x64-gnu-V.tgz      its per-platform packages with the release .node
#   npm/rocklet-linux-arm64-gnu-V.tgz
#   npm/rocklet-linux-x64-musl-V.tgz
#   playground/, rocklet-playground-V.tar.gz   the playground as a static site
#   SHA256SUMS, sizes.txt
#
#   bash dist/build.sh             needs cargo (rustup), python3 (venv), node + npm, and the
#                                  playground's prerequisites (bindings-wasm/build.sh names what
#                                  is missing and the command that installs it)
#   bash dist/build.sh --install   installs the playground's prerequisites first (apt: root)
#   DIST_CROSS=0 bash dist/build.sh   the x86_64 glibc artifacts only (no aarch64, no musl)
#
# Release builds go to target/<triple>/release (x86_64 glibc), target/wheel (the x86_64
# wheel), target/cross (aarch64, musl), target/musl-dylib (the musl addon), all linked by zig
# (against glibc 2.17 for the glibc targets, so the binary, the addon and the wheel load on
# every glibc from 2.17 on; with zig's musl for the static binary), and target/wasm: what an
# earlier run or CI built is reused, not built again. Apart because every build also compiles
# build scripts and proc macros for this machine, with the linker that build sets for it
# (zigbuild's wrapper, maturin's, or none): cargo names their files without the linker but
# checks it, so two such builds in one target dir rebuild each other's every crate each time.
#
# x86_64 glibc uses rustup's toolchain. aarch64 and musl do not: rustup here has only the
# x86_64-unknown-linux-gnu std, and `rustup target add` downloads one (not reachable here).
# They use Debian's rustc-web 1.96 (already a prerequisite: the playground's compiler), which
# builds std for the target from Debian's rust-web-src (-Zbuild-std, so RUSTC_BOOTSTRAP=1), as
# the playground's wasm build does; zig links.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=$ROOT/dist
TOOLS=$ROOT/.tools
STAGE=$ROOT/target/dist-stage
T=${CARGO_TARGET_DIR:-$ROOT/target}
t0=$(date +%s)
step() { echo "== dist: $* ($(( $(date +%s) - t0 ))s)"; }

# Prerequisites. maturin must find cargo itself: never let a build step fetch a toolchain.
if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
  echo "dist/build.sh: cargo and rustc are not on PATH. Install Rust with rustup" >&2
  echo "  (curl --proto '=https' -sSf https://sh.rustup.rs | sh; then . ~/.cargo/env) and run it again;" >&2
  echo "  nothing here downloads a toolchain for you." >&2
  exit 1
fi
for t in python3 node npm tar sha256sum file strip; do
  command -v "$t" >/dev/null || { echo "dist/build.sh: $t is not on PATH" >&2; exit 1; }
done
python3 -c 'import venv, ensurepip' 2>/dev/null || {
  echo "dist/build.sh: python3 has no venv/ensurepip: apt-get install -y python3-venv" >&2; exit 1; }
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "dist/build.sh: builds for Linux x86_64 only (this is $(uname -s) $(uname -m)); add its npm/<triple> package" >&2; exit 1 ;;
esac
echo "cargo: $(command -v cargo) ($(cargo --version)); rustc $(rustc --version | awk '{print $2}')"
V=$(bash dist/version.sh)
bash dist/version.sh check

# dist/ holds this script too: remove only what an earlier run built (dist/playground is
# updated in place, below).
rm -rf "$STAGE" "$OUT/npm" "$OUT"/*.whl "$OUT"/*.tar.gz "$OUT/SHA256SUMS" "$OUT/sizes.txt"
mkdir -p "$OUT/npm" "$STAGE"

step "playground (bindings-wasm/build.sh)"
bash bindings-wasm/build.sh ${1:+"$1"}
# The site's files are built into rocklet from dist/playground: a file is copied there only
# when its bytes changed, so an unchanged playground does not rebuild the broker (cargo reruns
# the build script, and recompiles the crate, when a file is newer).
SITE=$OUT/playground
FILES=(index.html app.js names.js style.css pkg/rocklet_wasm.js pkg/rocklet_wasm_bg.wasm)
mkdir -p "$SITE/pkg"
for f in "${FILES[@]}"; do
  cmp -s "bindings-wasm/playground/$f" "$SITE/$f" || cp "bindings-wasm/playground/$f" "$SITE/$f"
done
(cd "$SITE" && find . -type f -printf '%P\n') | while read -r f; do
  [[ " ${FILES[*]} " == *" $f "* ]] || rm -f "$SITE/$f"
done
tar -C "$OUT" -czf "$OUT/rocklet-playground-$V.tar.gz" --transform "s,^playground,rocklet-playground-$V," playground

# Build tools in a venv of their own: maturin, and zig (PyPI's ziglang) as the linker through
# cargo-zigbuild, so every native artifact is linked against glibc 2.17 (manylinux2014: Debian
# 9+, Ubuntu 18.04+, RHEL/CentOS 7+, Amazon Linux 2) instead of this machine's glibc. The
# rustup toolchain's own x86_64-unknown-linux-gnu std is used: no target is added.
VENV=$TOOLS/dist-venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import maturin, ziglang' 2>/dev/null && [ -x "$VENV/bin/cargo-zigbuild" ] \
  || "$VENV/bin/python" -m pip install -q "maturin==1.16.*" "ziglang==0.17.1" "cargo-zigbuild==0.24.1"
# zigbuild finds zig through `python3 -m ziglang`: the venv's python first on PATH; cargo and
# rustc stay the ones checked above (the venv has none).
ZIG_PATH=$VENV/bin:$PATH
GLIBC_FLOOR=2.17
ZT=x86_64-unknown-linux-gnu
R=$T/$ZT/release

step "release build against glibc $GLIBC_FLOOR: rocklet (the playground built in) and the node addon"
PATH=$ZIG_PATH ROCKLET_PLAYGROUND_DIR=$SITE nice -n 10 \
  cargo zigbuild --release --locked --target "$ZT.$GLIBC_FLOOR" -p rocklet-broker -p rocklet-node
"$R/rocklet" --version

# Debug line tables stay in target/; a shipped binary or addon carries symbols only. binutils'
# strip reads x86_64 files only: others go through LLVM's objcopy (Debian rust-web-llvm, a
# prerequisite of the playground).
strip_debug() {
  if file -b "$1" | grep -q x86-64; then
    strip --strip-debug "$1"
  else
    /usr/lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-objcopy --strip-debug "$1"
  fi
}

# The broker tarball of one target: bin/rocklet, config, unit, alerts, manuals.
#   tarball NAME BINARY "PLATFORM TEXT"
tarball() {
  local name=$1 bin=$2 desc=$3
  local B=$STAGE/rocklet-$V-$name
  mkdir -p "$B/bin" "$B/etc" "$B/systemd" "$B/alerts"
  cp "$bin" "$B/bin/rocklet"
  strip_debug "$B/bin/rocklet"
  cp broker/packaging/rocklet.toml "$B/etc/rocklet.toml"
  cp broker/packaging/rocklet.service "$B/systemd/rocklet.service"
  grep -qx 'Restart=on-failure' "$B/systemd/rocklet.service" || { echo "the unit must restart on failure" >&2; exit 1; }
  cp broker/packaging/alerts/rocklet-alerts.yml "$B/alerts/rocklet-alerts.yml"
  cp docs/runbooks.md "$B/README-runbooks.md"
  cp broker/README.md "$B/README-broker.md"
  cp CHANGELOG.md "$B/CHANGELOG.md"
  cat > "$B/README.md" <<EOF
# Rocklet $V broker for $desc

A RocketMQ-compatible transactional message broker: the official RocketMQ 5 clients (gRPC)
and RocketMQ 4 clients (remoting) work with it unchanged. README-broker.md is the manual.

    bin/rocklet broker --config etc/rocklet.toml --data-dir ./rocklet-data
    bin/rocklet send -t Demo hello          # against it (ROCKLET_ADDR, default 127.0.0.1:8081)
    bin/rocklet consume -t Demo
    bin/rocklet playground                  # the browser playground on http://127.0.0.1:8080/

etc/rocklet.toml serves gRPC on 127.0.0.1:8081, remoting on 127.0.0.1:10911, the name
server on 127.0.0.1:9876 and metrics on 127.0.0.1:9100/metrics, with sync flush.

As a service (systemd):

    install -m 755 bin/rocklet /usr/local/bin/rocklet
    install -D -m 644 etc/rocklet.toml /etc/rocklet/rocklet.toml
    install -m 644 systemd/rocklet.service /etc/systemd/system/rocklet.service
    useradd --system --home /var/lib/rocklet --shell /usr/sbin/nologin rocklet
    systemctl daemon-reload && systemctl enable --now rocklet

Alerts: alerts/rocklet-alerts.yml holds Prometheus rules (\`rule_files\` in prometheus.yml);
README-runbooks.md says what each alert means and what to do.

The unit restarts the broker when it fails (Restart=on-failure: a failed fsync or a
refused write makes it exit 1; recovery on restart keeps what is really on disk).
EOF
  tar -C "$STAGE" -czf "$OUT/rocklet-$V-$name.tar.gz" "rocklet-$V-$name"
  echo "rocklet-binary-$name $(stat -c %s "$B/bin/rocklet")" >> "$STAGE/sizes"
}

# The per-platform npm package of one triple (napi's layout), its package.json from the
# linux-x64-gnu one with the name, file, cpu and libc of the triple.
#   addon TRIPLE SO CPU LIBC
TRIPLES=()
addon() {
  local triple=$1 so=$2 cpu=$3 libc=$4
  local P=$STAGE/npm/$triple
  mkdir -p "$P"
  cp "$so" "$P/rocklet.$triple.node"
  strip_debug "$P/rocklet.$triple.node"
  node -e '
    const fs = require("fs"); const [src, dst, triple, cpu, libc] = process.argv.slice(1);
    const j = JSON.parse(fs.readFileSync(src, "utf8"));
    j.name = `rocklet-${triple}`;
    j.description = j.description.replace(/for .*/, `for ${triple}`);
    j.main = `rocklet.${triple}.node`;
    j.files = [j.main, "README.md"];
    j.cpu = [cpu]; j.libc = [libc];
    fs.writeFileSync(dst, JSON.stringify(j, null, 2) + "\n");' \
    bindings-node/npm/linux-x64-gnu/package.json "$P/package.json" "$triple" "$cpu" "$libc"
  sed "s/linux-x64-gnu/$triple/g" bindings-node/npm/linux-x64-gnu/README.md > "$P/README.md"
  (cd "$P" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)
  echo "node-addon-$triple $(stat -c %s "$P/rocklet.$triple.node")" >> "$STAGE/sizes"
  TRIPLES+=("$triple")
}

step "broker tarball and npm addon: x86_64 glibc"
tarball x86_64-linux "$R/rocklet" "Linux x86_64 (glibc 2.17 or later)"
addon linux-x64-gnu "$R/librocklet_node.so" x64 glibc

if [ "${DIST_CROSS:-1}" != 0 ]; then
  # Debian's cargo and rustc first on PATH (cargo-zigbuild and maturin run `cargo`); zig as
  # before. aarch64: Debian's prebuilt std for arm64 (libstd-rust-web-dev:arm64, multiarch),
  # of exactly the version of /usr/bin/rustc. musl: Debian ships no musl std, so std is built
  # for it from /usr/lib/rustlib/src (rust-web-src, -Zbuild-std).
  A=aarch64-unknown-linux-gnu
  M=x86_64-unknown-linux-musl
  DEB_V=$(dpkg-query -W -f '${Version}' rustc-web 2>/dev/null || true)
  STD_V=$(dpkg-query -W -f '${Version}' libstd-rust-web-dev:arm64 2>/dev/null || true)
  if [ -z "$DEB_V" ] || [ "$STD_V" != "$DEB_V" ]; then
    if [ "${1:-}" = --install ] && [ -n "$DEB_V" ]; then
      # Multi-Arch: same, so it must be the very version of the amd64 one (apt refuses others).
      dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "libstd-rust-web-dev:arm64=$DEB_V" >/dev/null
    else
      echo "dist/build.sh: the aarch64 std (libstd-rust-web-dev:arm64) must be the version of rustc-web" >&2
      echo "  (rustc-web ${DEB_V:-not installed}, libstd-rust-web-dev:arm64 ${STD_V:-not installed}):" >&2
      echo "  dpkg --add-architecture arm64 && apt-get update && apt-get install libstd-rust-web-dev:arm64=$DEB_V" >&2
      echo "  (or bash dist/build.sh --install)" >&2
      exit 1
    fi
  fi
  for t in /usr/bin/cargo /usr/bin/rustc /usr/lib/rustlib/src/rust/library/std /usr/lib/rustlib/$A/lib; do
    [ -e "$t" ] || { echo "dist/build.sh: $t missing (Debian rustc-web cargo-web rust-web-src libstd-rust-web-dev:arm64: bash dist/build.sh --install)" >&2; exit 1; }
  done
  DEB_RUST=$TOOLS/debian-rust
  mkdir -p "$DEB_RUST"
  ln -sf /usr/bin/cargo "$DEB_RUST/cargo"
  ln -sf /usr/bin/rustc "$DEB_RUST/rustc"
  X=$T/cross
  XENV=(env PATH="$DEB_RUST:$ZIG_PATH" RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
    ROCKLET_PLAYGROUND_DIR="$SITE" CARGO_TARGET_DIR="$X")

  # One build for aarch64 (same profile, flags and target dir): the broker and the addon, then
  # maturin's wheel, which reuses what it shares with them (33 units compile again: pyo3, and
  # rocklet-core with the few crates whose features cargo unifies per build).
  step "release build for aarch64 against glibc $GLIBC_FLOOR (Debian rustc $(/usr/bin/rustc --version | awk '{print $2}'), Debian's arm64 std)"
  "${XENV[@]}" nice -n 10 cargo zigbuild --release --locked --target "$A.$GLIBC_FLOOR" \
    -p rocklet-broker -p rocklet-node
  tarball aarch64-linux "$X/$A/release/rocklet" "Linux aarch64 (arm64; glibc 2.17 or later)"
  addon linux-arm64-gnu "$X/$A/release/librocklet_node.so" arm64 glibc

  step "wheel for aarch64 (maturin --zig --target $A, manylinux_2_17)"
  "${XENV[@]}" nice -n 10 "$VENV/bin/maturin" build --release --locked --strip --zig \
    --target "$A" --compatibility manylinux2014 -m bindings-python/Cargo.toml -o "$OUT"
  ls "$OUT"/rocklet-"$V"-cp39-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl >/dev/null

  # musl: the broker linked fully static (musl's default, crt-static); the addon is a shared
  # object Node loads, so it links musl's libc dynamically (-crt-static, in a target dir of
  # its own: other RUSTFLAGS rebuild every crate). -Clink-self-contained=no: rustc would pass
  # its own musl start files (rcrt1.o, crti.o...), which a std built here does not have ("failed
  # to open object rcrt1.o"); zig adds musl's.
  MENV=("${XENV[@]}" RUSTC_BOOTSTRAP=1)
  BUILD_STD=(-Zbuild-std=std,panic_unwind)
  step "release build for x86_64 musl, static (Debian rustc, -Zbuild-std)"
  "${MENV[@]}" RUSTFLAGS="-Clink-self-contained=no" \
    nice -n 10 cargo zigbuild --release --locked --target "$M" "${BUILD_STD[@]}" -p rocklet-broker
  file "$X/$M/release/rocklet" | grep 'statically linked' >/dev/null \
    || { file "$X/$M/release/rocklet"; echo "the musl broker is not statically linked" >&2; exit 1; }
  tarball x86_64-linux-musl "$X/$M/release/rocklet" "Linux x86_64, any libc (a static binary: Alpine too)"

  step "node addon for x86_64 musl (-crt-static)"
  "${MENV[@]}" CARGO_TARGET_DIR="$T/musl-dylib" RUSTFLAGS="-Ctarget-feature=-crt-static -Clink-self-contained=no" \
    nice -n 10 cargo zigbuild --release --locked --target "$M" "${BUILD_STD[@]}" -p rocklet-node
  addon linux-x64-musl "$T/musl-dylib/$M/release/librocklet_node.so" x64 musl
fi

step "npm main package (optional dependencies: ${TRIPLES[*]})"
MP=$STAGE/npm/rocklet
mkdir -p "$MP"
cp bindings-node/{index.js,index.mjs,index.d.ts,README.md,package.json} "$MP/"
# The published main package: no addon of its own (index.js loads rocklet-<triple>, an
# optional dependency npm installs on the platform it is for); bindings-node/package.json
# stays private, for the folder's own debug addon and tests.
node -e '
  const fs = require("fs"); const [p, v, triples] = process.argv.slice(1);
  const j = JSON.parse(fs.readFileSync(p, "utf8"));
  delete j.private; delete j.scripts;
  j.files = j.files.filter((f) => !f.endsWith(".node"));
  j.optionalDependencies = Object.fromEntries(triples.split(",").map((t) => [`rocklet-${t}`, v]));
  fs.writeFileSync(p, JSON.stringify(j, null, 2) + "\n");' "$MP/package.json" "$V" "$(IFS=,; echo "${TRIPLES[*]}")"
(cd "$MP" && npm pack --silent --pack-destination "$OUT/npm" >/dev/null)

step "wheel (maturin build --release --zig, abi3, manylinux2014 = manylinux_2_17)"
# maturin builds with the cargo checked above and downloads nothing; zig links.
PATH=$ZIG_PATH CARGO_TARGET_DIR="$T/wheel" nice -n 10 "$VENV/bin/maturin" build --release --locked --strip --zig \
  --compatibility manylinux2014 -m bindings-python/Cargo.toml -o "$OUT"
ls "$OUT"/rocklet-"$V"-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl >/dev/null

step "sdist (maturin sdist): pip builds it from source where no wheel fits"
"$VENV/bin/maturin" sdist -m bindings-python/Cargo.toml -o "$OUT"
# (grep without -q: it reads to the end, so tar never dies of SIGPIPE under pipefail)
tar -tzf "$OUT/rocklet-$V.tar.gz" | grep -x "rocklet-$V/build_backend/rocklet_build.py" >/dev/null \
  || { echo "the sdist lacks the build backend its pyproject.toml names" >&2; exit 1; }

step "checksums and sizes"
(cd "$OUT" && find . -maxdepth 2 -type f \( -name '*.whl' -o -name '*.tgz' -o -name '*.tar.gz' \) -printf '%P\n' | sort | xargs sha256sum > SHA256SUMS)
{
  echo "artifact bytes"
  (cd "$OUT" && find . -maxdepth 2 -type f \( -name '*.whl' -o -name '*.tgz' -o -name '*.tar.gz' \) -printf '%P %s\n' | sort)
  cat "$STAGE/sizes"
  echo "playground-wasm $(stat -c %s "$SITE/pkg/rocklet_wasm_bg.wasm")"
} > "$OUT/sizes.txt"
column -t "$OUT/sizes.txt"
step "done: $OUT"
