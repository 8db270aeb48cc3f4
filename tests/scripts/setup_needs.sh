#!/usr/bin/env bash
# scripts/setup decides what to install by what the machine provides (issue
# 13): a node + npm from a non-Debian build (NodeSource's nodejs bundles npm
# and conflicts with Debian's npm package) must not make it ask apt for
# Debian's npm; without node and npm it asks for both; node without npm is a
# clear error. Run with TESSERA_SETUP_DRY_RUN=1, which prints the package
# list and stops before apt-get and the build.
#
# usage: tests/scripts/setup_needs.sh [BUILD_DIR]   (from the repo root)
set -euo pipefail
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

# A PATH with everything this one has except node and npm.
mkdir -p "$TMP/bin" "$TMP/bin-node"
IFS=: read -ra dirs <<<"$PATH"
# One ln per folder, not per file (a few thousand forks were most of this
# suite's time); ln keeps the first folder's name where two have it, as PATH
# lookup does.
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  find "$d" -mindepth 1 -maxdepth 1 -executable ! -name node ! -name npm -print0 |
    xargs -0 -r ln -s -t "$TMP/bin" 2>/dev/null || true
done

have_node=$(command -v node || true)
have_npm=$(command -v npm || true)
if [ -n "$have_node" ] && [ -n "$have_npm" ]; then
  out=$(TESSERA_SETUP_DRY_RUN=1 scripts/setup)
  case " $out " in
    *" npm "*|*" nodejs "*) echo "FAIL: node and npm are on PATH but setup asks for Debian's: $out"; fail=1;;
    *) echo "ok: node + npm on PATH ($(node --version), npm $(npm --version)): setup leaves them alone";;
  esac
fi

out=$(PATH="$TMP/bin" TESSERA_SETUP_DRY_RUN=1 scripts/setup)
case "$out" in
  "setup: would install: nodejs npm") echo "ok: without node and npm, setup installs Debian's nodejs npm and nothing else";;
  *) echo "FAIL: without node and npm setup said: $out"; fail=1;;
esac

if [ -n "$have_node" ]; then
  ln -s "$have_node" "$TMP/bin-node/node"
  if out=$(PATH="$TMP/bin:$TMP/bin-node" TESSERA_SETUP_DRY_RUN=1 scripts/setup 2>&1); then
    echo "FAIL: node without npm was accepted: $out"; fail=1
  else
    case "$out" in
      *"npm is not"*) echo "ok: node without npm is refused with a clear line";;
      *) echo "FAIL: node without npm: $out"; fail=1;;
    esac
  fi
fi
exit $fail
