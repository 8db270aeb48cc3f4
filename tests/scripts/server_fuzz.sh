#!/usr/bin/env bash
# Hostile HTTP traffic against `tessera serve` (tests/server/fuzz.mjs): only
# 4xx (or 2xx where the input is valid), no crash, nothing left in the
# engine. Meant for a sanitizer build too (.ci/run runs it on build-asan):
# ASan/UBSan reports make the server exit non-zero, which fails the run.
#
# usage: tests/scripts/server_fuzz.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"

TMP=$(mktemp -d)
trap 'kill -KILL ${FUZZ_PID:-} 2>/dev/null || true; rm -rf "$TMP"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failures=0
for key in "" fuzz-key; do
  args=(-m "$MODEL" --chat-template chatml --max-body-bytes 1M -t 1 --max-num-seqs 16)
  mode=""
  if [ -n "$key" ]; then
    args+=(--api-key "$key")
    mode=--quick  # the field x value matrix does not depend on the key
  fi
  start_server FUZZ "$TMP/fuzz.log" "${args[@]}"
  echo "-- fuzz $([ -n "$key" ] && echo "with an API key" || echo "without an API key")"
  node tests/server/fuzz.mjs "$FUZZ_URL" "$key" $mode || { echo "FAIL: fuzz run"; failures=$((failures + 1)); }
  kill -0 "$FUZZ_PID" 2>/dev/null || { echo "FAIL: the server died"; failures=$((failures + 1)); }
  stop_server FUZZ || failures=$((failures + 1))
  if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$TMP/fuzz.log"; then
    echo "FAIL: sanitizer report:"
    grep -A20 -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$TMP/fuzz.log" | head -40
    failures=$((failures + 1))
  fi
done
if [ "$failures" -ne 0 ]; then
  echo "server_fuzz: $failures failure(s)"
  exit 1
fi
echo "server_fuzz: only 4xx, no crash"
