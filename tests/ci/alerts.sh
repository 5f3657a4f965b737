#!/usr/bin/env bash
# Alert rules (issue 33): the shipped Prometheus rules (broker/packaging/alerts/) are valid
# (`promtool check rules`), each alert fires on series shaped as the broker exports them and
# stays quiet under its threshold (`promtool test rules`), and every metric a rule names is
# one a running broker exports (broker/tests/alert_rules.rs). promtool comes from Debian's
# `prometheus` package, installed here if missing (needs root). Run alone:
# bash tests/ci/alerts.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TERM_COLOR=never
if ! command -v promtool >/dev/null; then
  echo "installing Debian's prometheus (for promtool)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
promtool --version | head -1
promtool check rules broker/packaging/alerts/rocklet-alerts.yml
(cd broker/packaging/alerts && promtool test rules rocklet-alerts.test.yml)
cargo test -p rocklet-broker --locked --test alert_rules
