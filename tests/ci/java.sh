#!/usr/bin/env bash
# Java: the official RocketMQ 5 Java client (Maven Central org.apache.rocketmq:
# rocketmq-client-java 5.2.0, unmodified) against the `rocklet` binary, FIFO consumer groups
# (broker/tests/java-fifo, a small Maven project; the scenarios are described in its
# FifoTest.java): two push consumers keep each message group's order and never consume two
# of a group at once; a failed message is retried in place and dead-lettered after the last
# attempt, the next one following; kill -9 of the broker during a FIFO run loses nothing and
# keeps the order. The program starts and kills the broker itself.
#
# Installs a JDK (17 or later) and Maven with apt when missing; Maven's repository is
# .tools/java/m2 (gitignored), so later runs download nothing. About 40 MB on the first run.
# Run from anywhere: bash tests/ci/java.sh   (ROCKLET_JAVA_SCENARIOS="order retry" for some)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TOOLS=$ROOT/.tools/java
M2=$TOOLS/m2
PROJECT=$ROOT/broker/tests/java-fifo
OUT=$ROOT/target/java-fifo
t0=$(date +%s)
cd "$ROOT"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
mkdir -p "$TOOLS"
command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup"; exit 1; }

echo "== java: JDK and Maven (idempotent)"
java_ok() {
  command -v java >/dev/null && command -v mvn >/dev/null &&
    java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ { exit !($2 >= 17) }'
}
if ! java_ok; then
  apt-get update -qq && apt-get install -y -qq default-jdk-headless maven >/dev/null
fi
java_ok || { echo "a JDK 17 or later and Maven are needed"; exit 1; }

echo "== rust: build the rocklet binary"
nice -n 10 cargo build -p rocklet-broker --bin rocklet
BIN=$ROOT/target/debug/rocklet

echo "== java: build broker/tests/java-fifo"
mkdir -p "$OUT"
nice -n 10 mvn -B -q -Dmaven.repo.local="$M2" -f "$PROJECT/pom.xml" \
  compile dependency:build-classpath -Dmdep.outputFile="$OUT/classpath.txt" >"$OUT/mvn.log" 2>&1 ||
  { cat "$OUT/mvn.log"; exit 1; }

echo "== java: official client against rocklet"
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
# shellcheck disable=SC2086
if ! java -Drocketmq.log.root="$RUN/client-logs" -cp "$OUT/classes:$(cat "$OUT/classpath.txt")" \
  rocklet.FifoTest "$BIN" "$RUN" ${ROCKLET_JAVA_SCENARIOS:-} 2>&1 | { grep -v ' INFO ' || true; }; then
  echo "---- client log errors ($RUN/client-logs)"
  grep -h ' ERROR ' "$RUN"/client-logs/*.log 2>/dev/null | tail -n 30 || true
  exit 1
fi
echo "java: done in $(( $(date +%s) - t0 ))s"
