#!/usr/bin/env bash
# Fuzz smoke run: every target of tests/fuzz for a short time (FUZZ_SECONDS, default 10),
# starting from its committed seeds (tests/fuzz/seeds/<target>/) and regression inputs
# (tests/vectors/regressions/<target>/, each replayed first). Fails on any crash, timeout
# or out-of-memory. Needs nothing beyond the stable toolchain the rest of CI uses.
#
# It builds the targets with cargo fuzz's sanitizer-coverage flags (`-s none`; libfuzzer-sys
# links libFuzzer; FUZZ_PROFILE=release builds as `cargo fuzz build -O --debug-assertions`),
# without installing
# cargo-fuzz, which costs minutes on a fresh machine. Without a sanitizer none of these flags
# needs nightly, so the smoke run uses the pinned stable compiler: a fresh machine's
# "latest nightly" changes under CI from day to day, and with it the instrumentation and the
# inputs a fixed seed explores. No ASan: the core has no unsafe code (workspace lint
# `unsafe_code = "deny"`), and it halves the executions per second.
#
#   FUZZ_PROFILE=release FUZZ_SECONDS=3600 FUZZ_RUNS=10000000 tests/ci/fuzz.sh state_machine
#                                                        a long run of one target
#   cargo install --root .tools cargo-fuzz; cd tests/fuzz; cargo +nightly fuzz run <target>
#                                                        the usual cargo-fuzz workflow
# A crash's input is left in tests/fuzz/artifacts/<target>/; once minimized
# (`<binary> -minimize_crash=1 -runs=10000 <input>`) it becomes a regression:
# tests/vectors/regressions/<target>/<name> (decoder/recovery ones are also replayed by
# `cargo test -p rocklet-conformance --test regressions`).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
seconds="${FUZZ_SECONDS:-10}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(record_decode props_decode batch_decode log_recovery state_machine remoting_frames
    remoting_commands grpc_requests)
fi

cd "$root/tests/fuzz"
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 --cfg fuzzing"
# Not --locked: tests/fuzz/Cargo.lock must not go stale each time the core gains a dependency.
export CARGO_TARGET_DIR="$root/tests/fuzz/target/stable"
if [ "${FUZZ_PROFILE:-smoke}" = release ]; then
  # Long runs: optimized (cargo fuzz's -O), with debug assertions.
  RUSTFLAGS="$RUSTFLAGS -Cdebug-assertions -Ccodegen-units=1" cargo build --release --target "$triple" --bins
  bin="$CARGO_TARGET_DIR/$triple/release"
else
  # The smoke run: the dev profile (debug assertions and overflow checks on) at opt-level 1
  # and without debug info. Instrumenting tonic, hyper and tokio for the protocol targets
  # takes ~2.5x less time to build than the release profile (a cold build of all targets:
  # ~210 s against ~600 s on 2 busy cores), and runs within 2x of its speed.
  CARGO_PROFILE_DEV_OPT_LEVEL=1 CARGO_PROFILE_DEV_DEBUG=0 cargo build --target "$triple" --bins
  bin="$CARGO_TARGET_DIR/$triple/debug"
fi

seed=${FUZZ_SEED:-1}
runs=${FUZZ_RUNS:-60000}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" "artifacts/$t"
  dirs=("$work/$t")  # new corpus entries go to this scratch directory only
  for d in "$root/tests/fuzz/seeds/$t" "$root/tests/vectors/regressions/$t"; do
    [ -d "$d" ] && dirs+=("$d")
  done
  echo "== fuzz $t: ${runs} runs from seed ${seed} (at most ${seconds}s)"
  # A fixed seed and run count make the smoke run repeatable for a given commit, so CI does
  # not turn red at random; longer, unseeded runs are for finding bugs (see tests/fuzz/README).
  if ! "$bin/$t" -seed="$seed" -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$t-" "${dirs[@]}" >"$work/$t.log" 2>&1; then
    # stdout, not stderr: CI records keep the tail of stdout, and this is what must be seen.
    for a in "$work/$t"-*; do
      [ -f "$a" ] || continue
      cp "$a" "artifacts/$t/"
      echo "-- input artifacts/$t/${a##*/$t-} (base64, first 1000 chars)"
      base64 -w 0 "$a" | head -c 1000; echo
    done
    grep -v '^#\|^INFO\|^WARNING\|^ \+[a-z]' "$work/$t.log" | tail -n 25
    echo "fuzz target $t failed; the input is in tests/fuzz/artifacts/$t/"
    failed+=("$t")
    continue
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$work/$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz smoke: FAILED: ${failed[*]}"
  exit 1
fi
echo "fuzz smoke: all targets clean"
