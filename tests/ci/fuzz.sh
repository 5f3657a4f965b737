#!/usr/bin/env bash
# Fuzz smoke run: every target of tests/fuzz for a short time (FUZZ_SECONDS, default 20),
# first replaying its regression inputs (tests/vectors/regressions/<target>/). Fails on any
# crash, leak or timeout. Installs what it needs, idempotently: the nightly toolchain
# (rustup) and cargo-fuzz (into .tools).
#
# Longer run of one target:  FUZZ_SECONDS=300 tests/ci/fuzz.sh state_machine
# Reproduce a crash:         cd tests/fuzz && cargo +nightly fuzz run <target> <file>
# A minimized crash becomes a regression: copy it to tests/vectors/regressions/<target>/.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
seconds="${FUZZ_SECONDS:-20}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(record_decode props_decode batch_decode log_recovery state_machine)
fi

rustup toolchain list | grep -q '^nightly' \
  || rustup toolchain install nightly --profile minimal
export PATH="$root/.tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo +nightly install --locked --root "$root/.tools" cargo-fuzz
fi

cd tests/fuzz
# One build for every target (release, debug assertions and overflow checks on).
cargo +nightly fuzz build -O --debug-assertions
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  regressions="$root/tests/vectors/regressions/$t"
  mkdir -p "$work/$t"
  dirs=("$work/$t")
  [ -d "$regressions" ] && dirs+=("$regressions")
  echo "== fuzz $t for ${seconds}s"
  # New corpus entries go to the first (scratch) directory; the regressions are only read.
  if ! cargo +nightly fuzz run -O --debug-assertions "$t" "${dirs[@]}" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$work/$t.log" 2>&1; then
    tail -n 80 "$work/$t.log" >&2
    echo "fuzz target $t failed; the input is in tests/fuzz/artifacts/$t/" >&2
    exit 1
  fi
  grep -E '^(INFO: seed corpus|stat::number_of_executed_units|stat::peak_rss_mb|Done )' "$work/$t.log" || true
done
echo "fuzz smoke: all targets clean"
