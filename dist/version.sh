#!/usr/bin/env bash
# The release version lives in one place: `version` of [workspace.package] in Cargo.toml.
# Every crate takes it (version.workspace = true), the wheel too (pyproject.toml: dynamic,
# from Cargo via maturin); npm needs it written in its package.json files, so they are
# checked (and rewritten by `set`) against it, and CHANGELOG.md must have its section.
#   bash dist/version.sh          print it
#   bash dist/version.sh check    exit 1 naming each place that disagrees
#   bash dist/version.sh set X    write X everywhere (Cargo.toml, package.json files)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PKGS=(bindings-node/package.json bindings-node/npm/*/package.json)

current() {
  awk '/^\[workspace.package\]/{p=1; next} /^\[/{p=0} p && $1=="version" {gsub(/"/,"",$3); print $3; exit}' Cargo.toml
}

v=$(current)
[ -n "$v" ] || { echo "no version in [workspace.package] of Cargo.toml" >&2; exit 1; }
case "${1:-}" in
  "") echo "$v" ;;
  check)
    bad=0
    for p in "${PKGS[@]}"; do
      pv=$(node -p "require('./$p').version")
      [ "$pv" = "$v" ] || { echo "$p: version $pv, Cargo.toml has $v (bash dist/version.sh set $v)" >&2; bad=1; }
    done
    for p in bindings-node/package.json; do
      for dep in $(node -p "Object.keys(require('./$p').optionalDependencies || {}).join(' ')"); do
        dv=$(node -p "require('./$p').optionalDependencies['$dep']")
        [ "$dv" = "$v" ] || { echo "$p: optional dependency $dep@$dv, expected $v" >&2; bad=1; }
      done
    done
    grep -q "dynamic = \[\"version\"\]" bindings-python/pyproject.toml \
      || { echo "bindings-python/pyproject.toml: the version must be dynamic (from Cargo.toml)" >&2; bad=1; }
    grep -qE "^## \[?$v\]?( |$)" CHANGELOG.md \
      || { echo "CHANGELOG.md: no section \"## $v\"" >&2; bad=1; }
    [ "$bad" = 0 ] && echo "version $v everywhere"
    exit "$bad" ;;
  set)
    n=${2:?usage: version.sh set X.Y.Z}
    [[ $n =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || { echo "$n is not a semantic version" >&2; exit 2; }
    awk -v n="$n" '/^\[workspace.package\]/{p=1} /^\[/ && !/^\[workspace.package\]/{p=0}
      p && $1=="version" {print "version = \"" n "\""; next} {print}' Cargo.toml > Cargo.toml.new
    mv Cargo.toml.new Cargo.toml
    for p in "${PKGS[@]}"; do
      node -e '
        const fs = require("fs"); const [p, n] = process.argv.slice(1);
        const j = JSON.parse(fs.readFileSync(p, "utf8")); j.version = n;
        for (const d of Object.keys(j.optionalDependencies || {})) j.optionalDependencies[d] = n;
        fs.writeFileSync(p, JSON.stringify(j, null, 2) + "\n");' "$p" "$n"
    done
    echo "version $n written; add its section to CHANGELOG.md" ;;
  *) echo "usage: version.sh [check | set X.Y.Z]" >&2; exit 2 ;;
esac
