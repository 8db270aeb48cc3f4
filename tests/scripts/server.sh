#!/usr/bin/env bash
# `tessera serve` end to end on stories260K: the OpenAI client suite
# (tests/server/api.test.mjs), greedy equality with `tessera generate`, a
# load smoke run with 10% of clients disconnecting (bench/server_load.mjs),
# the per-request log lines, and a clean shutdown on SIGTERM with a stream
# in flight.
#
# usage: tests/scripts/server.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"
ensure_node_modules

TMP=$(mktemp -d)
cleanup() {
  for p in ${MAIN_PID:-} ${BARE_PID:-} ${SHUT_PID:-} ${TOOLS_PID:-}; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Independent references: the CLI's greedy continuation and token counts.
"$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 >"$TMP/golden.txt" 2>/dev/null
"$TESSERA" generate -m "$MODEL" --prompt-schema bench/data/prompt_schema.json --modules lily,moral -p " One day" -n 32 \
  --temp 0 >"$TMP/pc_golden.txt" 2>/dev/null
PROMPT_IDS=$("$TESSERA" tokenize -m "$MODEL" -p "Once upon a time" --bos --special)
printf '<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nTell me about a cat.<|im_end|>\n<|im_start|>assistant\n' >"$TMP/chat.txt"
CHAT_PROMPT_IDS=$("$TESSERA" tokenize -m "$MODEL" -f "$TMP/chat.txt" --bos --special)

KEY=test-key-$$
start_server MAIN "$TMP/main.log" -m "$MODEL" --chat-template chatml --api-key "$KEY" --max-body-bytes 1M -t 1 \
  --prompt-schema bench/data/prompt_schema.json
start_server BARE "$TMP/bare.log" -m "$MODEL" --max-num-seqs 1 --max-queue 0 -t 1

echo "-- OpenAI client suite"
TESSERA_URL=$MAIN_URL TESSERA_API_KEY=$KEY TESSERA_URL_BARE=$BARE_URL GOLDEN_TEXT_FILE="$TMP/golden.txt" PC_GOLDEN_TEXT_FILE="$TMP/pc_golden.txt" \
  PROMPT_IDS=$PROMPT_IDS CHAT_PROMPT_IDS=$CHAT_PROMPT_IDS \
  timeout 300 node --test --test-reporter=spec tests/server/api.test.mjs || fail "OpenAI client suite"

echo "-- tools: a random model with Qwen 3's tokenizer and chat template"
"$TESSERA" make-model --format hf --tokenizer-from "${TESSERA_SHARED:-../shared}/models/tokenizers/qwen3" --preset tiny \
  --arch qwen3 --type bf16 -o "$TMP/qwen3" >/dev/null 2>&1 || fail "make-model (qwen3)"
start_server TOOLS "$TMP/tools.log" -m "$TMP/qwen3" -t 1
TESSERA_URL=$TOOLS_URL timeout 300 node --test --test-reporter=spec tests/server/tools.test.mjs || fail "tools suite"
stop_server TOOLS || fail "tools server shutdown"

echo "-- load smoke: 64 clients, 256 requests, 10% disconnecting"
timeout 300 node bench/server_load.mjs --url "$MAIN_URL" --api-key "$KEY" --pid "$MAIN_PID" --clients 64 --requests 256 \
  --prompt 16:64 --max-tokens 16:48 --vocab 512 --disconnect 0.1 --max-rss-mb 1024 --check >"$TMP/load.json" ||
  fail "load smoke: $(cat "$TMP/load.json")"
cat "$TMP/load.json"

# One log line per request: method, path, status, id, token counts, latency.
grep -qE 'POST /v1/completions 200 cmpl-[0-9a-f]+ prompt=[0-9]+ output=[0-9]+ latency=[0-9.]+s' "$TMP/main.log" ||
  fail "no per-request log line in the server log"
grep -qE 'POST /v1/chat/completions 400 .* latency=' "$TMP/main.log" || fail "4xx requests are not logged"

stop_server MAIN || fail "main server shutdown"
stop_server BARE || fail "bare server shutdown"
if grep -q '^\[error\]' "$TMP/main.log" "$TMP/bare.log"; then
  fail "errors in the server logs: $(grep -h '^\[error\]' "$TMP/main.log" "$TMP/bare.log" | head -5)"
fi

echo "-- SIGTERM with a stream in flight"
start_server SHUT "$TMP/shut.log" -m "$MODEL" -t 1
curl -sN "$SHUT_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 1900, "ignore_eos": true, "stream": true}' >"$TMP/stream.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do grep -q '^data: {' "$TMP/stream.txt" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s%N)
stop_server SHUT || fail "shutdown with a stream in flight"
t1=$(date +%s%N)
wait "$CURL_PID" || fail "curl did not get a complete stream"
tail -c 300 "$TMP/stream.txt" | grep -q '"code":"shutting_down"' || fail "the stream got no final error event"
[ "$(tail -n 2 "$TMP/stream.txt" | head -n 1)" = "data: [DONE]" ] || fail "the stream does not end with [DONE]"
echo "shutdown took $(( (t1 - t0) / 1000000 )) ms"
[ $(( (t1 - t0) / 1000000 )) -lt 10000 ] || fail "shutdown took over 10 s"

if [ "$failures" -ne 0 ]; then
  echo "server: $failures failure(s)"
  exit 1
fi
echo "server: all checks passed"
