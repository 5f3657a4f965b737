#!/usr/bin/env bash
# Java: the official RocketMQ 5 Java client (Maven Central org.apache.rocketmq:
# rocketmq-client-java 5.2.0, unmodified) against the `rocklet` binary, FIFO consumer groups
# (broker/tests/java-fifo, a small Maven project; the scenarios are described in its
# FifoTest.java): two push consumers keep each message group's order and never consume two
# of a group at once; a failed message is retried in place and dead-lettered after the last
# attempt, the next one following; kill -9 of the broker during a FIFO run loses nothing and
# keeps the order. The program starts and kills the broker itself.
#
# Then the official clients across a retention boundary (issue 31,
# broker/tests/retention_clients.rs): the v4 Java client (rocketmq-client 5.5.0,
# broker/tests/v4-java/src/V4Retention.java; its jars are fetched into .tools/fidelity/jars as
# tests/ci/fidelity.sh fetches them, so that part reuses them) and the RocketMQ 5 Python
# client (rocketmq-python-client 5.1.2, broker/tests/v4-python/v5_client.py, in
# .tools/java/v5venv) read a one-queue topic whose first segments retention retired: groups
# below the new first offset start there, caught-up groups lose nothing and get nothing
# twice, every message id and queue offset is the one its send returned.
#
# Then SQL92 filters (issue 34) with the v4 Java client (broker/tests/v4-java/src/V4Sql.java
# sends five messages and reads them with one DefaultLitePullConsumer per expression,
# `MessageSelector.bySql`) and the v5 Python client (v5_client.py sqlreceive, a SimpleConsumer
# with `FilterExpression(…, SQL92)`); broker/tests/sql92.rs compares the deliveries with its
# table.
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
echo "== java + python: the official v4 Java and v5 Python clients across a retention boundary"
PY=${PYTHON:-python3}
V5=$TOOLS/v5venv
if ! [ -x "$V5/bin/python" ] || ! "$V5/bin/python" -c 'from rocketmq import SimpleConsumer' 2>/dev/null; then
  if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
  fi
  [ -x "$V5/bin/python" ] || "$PY" -m venv "$V5"
  "$V5/bin/python" -m pip install -q "rocketmq-python-client==5.1.2"
fi
command -v javac >/dev/null || { echo "javac is needed"; exit 1; }
JARS=$ROOT/.tools/fidelity/jars
POM=broker/tests/v4-java/pom.xml
# The jars are fetched again only when the pom changes (fidelity.sh's rule and folder).
if ! cmp -s "$POM" "$JARS/.pom" 2>/dev/null; then
  rm -rf "$JARS"
  (cd broker/tests/v4-java && nice -n 10 mvn -q -B -Dmaven.repo.local="$ROOT/.tools/fidelity/m2" \
    dependency:copy-dependencies -DoutputDirectory="$JARS" -DincludeScope=runtime)
  cp "$POM" "$JARS/.pom"
fi
CLASSES=$TOOLS/v4-retention-classes
rm -rf "$CLASSES"
javac -nowarn -d "$CLASSES" -cp "$JARS/*" broker/tests/v4-java/src/V4Retention.java \
  broker/tests/v4-java/src/V4Sql.java 2>&1 | { grep -v '^Note:' || true; }
ROCKLET_PYTHON=$V5/bin/python ROCKLET_V4_CLASSPATH="$JARS/*:$CLASSES" \
  nice -n 10 cargo test -p rocklet-broker --test retention_clients -- --include-ignored --nocapture 2>&1 |
  grep -vE "^\s+(at |[0-9]+: )"
echo "== java + python: SQL92 filters with the official v4 Java and v5 Python clients (issue 34)"
t1=$(date +%s)
ROCKLET_PYTHON=$V5/bin/python ROCKLET_V4_CLASSPATH="$JARS/*:$CLASSES" \
  nice -n 10 cargo test -p rocklet-broker --test sql92 -- --ignored the_official_ 2>&1 |
  grep -vE "^\s+(at |[0-9]+: )"
echo "java: SQL92 part in $(( $(date +%s) - t1 ))s"
echo "java: done in $(( $(date +%s) - t0 ))s"
