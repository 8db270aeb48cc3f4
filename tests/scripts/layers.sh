#!/usr/bin/env bash
# The layering rule (scripts/check_layers) holds on src/, and the check
# itself fails on an include that points up (a copy of src/ with one added).
#
# usage: tests/scripts/layers.sh BUILD_DIR   (from the repo root; BUILD_DIR unused)
set -euo pipefail
scripts/check_layers src
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r src "$TMP/src"
echo '#include "server/http_server.h"' >>"$TMP/src/kv/block_pool.cc"
if out=$(scripts/check_layers "$TMP/src"); then
  echo "FAIL: an upward include (kv/ -> server/) passed the layering check"
  exit 1
fi
grep -q 'kv/block_pool.cc:[0-9]* includes server/ (above kv/)' <<<"$out" || { echo "FAIL: unexpected report: $out"; exit 1; }
echo "layers: an upward include is caught: $out"
