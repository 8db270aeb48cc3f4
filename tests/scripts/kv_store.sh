#!/usr/bin/env bash
# The global prompt cache (--kv-store) across processes, on stories260K:
#  - restart: a server stopped and started again on the same directory
#    serves its prompts from disk, outputs (text and logprobs) identical to
#    a server without a store (write-through, and write-back at shutdown);
#  - another model (stories1M: the same tokenizer) or a Q8_0 copy of
#    stories260K never matches its blocks; a corrupt block is named by
#    `tessera kv-store verify`, recomputed by the server, and dropped;
#  - kill -9 while writing: no record visible half-written
#    (`tessera kv-store verify` passes), the next server's outputs identical;
#  - two replicas on one Redis (started here): the second serves the first
#    one's prefixes from Redis; Redis stopped mid-run: requests go on;
#  - a full disk (a 256 KiB tmpfs, when this user may mount one): writes
#    fail, requests do not.
#
# usage: tests/scripts/kv_store.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"

TMP=$(mktemp -d)
REDIS_PID=""
cleanup() {
  for p in ${COLD_PID:-} ${A_PID:-} ${B_PID:-} ${O_PID:-} ${K_PID:-} ${R1_PID:-} ${R2_PID:-} ${F_PID:-} $REDIS_PID; do
    kill -KILL "$p" 2>/dev/null || true
  done
  mountpoint -q "$TMP/full" 2>/dev/null && umount "$TMP/full"
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Prompts in two families sharing long prefixes.
A="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
B="Tom and his dog Max went to the river. The water was cold and clear. Tom wanted to catch a fish. "
PROMPTS=()
for tail in "She ran to get it." "It was very shiny." "Her mom said no." "They played all day."; do
  PROMPTS+=("$A$A$A$tail" "$B$B$B$tail")
done

# ask URL PROMPT: one line, the greedy completion's text and token logprobs.
ask() {
  local body
  body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 24, "temperature": 0, "logprobs": 1}))' "$2")
  curl -s --max-time 60 "$1/v1/completions" -H 'Content-Type: application/json' -d "$body" |
    python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]; print(json.dumps([c["text"], c["logprobs"]["token_logprobs"]]))'
}
ask_all() {  # URL OUTFILE
  : >"$2"
  for p in "${PROMPTS[@]}"; do ask "$1" "$p" >>"$2" || echo "request failed" >>"$2"; done
}
metric() {  # URL NAME{labels}: its value, 0 when absent
  curl -s "$1/metrics" | awk -v n="$2" '$1 == n { print $2; found = 1 } END { if (!found) print 0 }'
}
positive() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "$1"; }

echo "-- cold reference (no store)"
start_server COLD "$TMP/cold.log" -m "$MODEL" -t 1 --kv-type f32
ask_all "$COLD_URL" "$TMP/cold.txt"
stop_server COLD || fail "cold server shutdown"

echo "-- restart on the same directory"
start_server A "$TMP/a.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/store"
ask_all "$A_URL" "$TMP/a.txt"
cmp -s "$TMP/cold.txt" "$TMP/a.txt" || fail "outputs with a fresh store differ from cold"
stop_server A || fail "server A shutdown"
records=$("$TESSERA" kv-store stats "$TMP/store" | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])')
[ "$records" -gt 10 ] || fail "only $records records stored"
start_server B "$TMP/b.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/store"
ask_all "$B_URL" "$TMP/b.txt"
cmp -s "$TMP/cold.txt" "$TMP/b.txt" || { fail "outputs after a restart differ from cold"; diff "$TMP/cold.txt" "$TMP/b.txt" | head; }
hits=$(metric "$B_URL" 'tessera_kv_store_hits_total{tier="disk"}')
positive "$hits" || fail "the restarted server loaded no block from disk"
echo "   $records records; $hits blocks loaded from disk after the restart"
stop_server B || fail "server B shutdown"
"$TESSERA" kv-store verify "$TMP/store" >/dev/null || fail "verify after clean runs"

echo "-- another model or quantization never matches"
SHARED_DIR=${TESSERA_SHARED:-../shared}
"$TESSERA" quantize -m "$MODEL" -o "$TMP/q8.gguf" --type q8_0 --method rtn >/dev/null 2>&1 || fail "quantize"
for other in "$TMP/q8.gguf" "$SHARED_DIR/models/stories1M/stories1M.gguf"; do
  start_server O "$TMP/o.log" -m "$other" -t 1 --kv-type f32 --kv-store "$TMP/store"
  ask_all "$O_URL" "$TMP/o.txt"
  ohits=$(metric "$O_URL" 'tessera_kv_store_hits_total{tier="disk"}')
  [ "$ohits" = 0 ] || fail "$(basename "$other") loaded $ohits blocks of stories260K's"
  positive "$(metric "$O_URL" 'tessera_kv_store_misses_total{tier="disk"}')" || fail "$(basename "$other") looked nothing up"
  grep -q "request failed" "$TMP/o.txt" && fail "$(basename "$other"): a request failed"
  stop_server O || fail "server O shutdown"
done

echo "-- a corrupt block: verify names it, the server recomputes it"
victim=$(find "$TMP/store/blocks" -name '*.kvb' | sort | sed -n 1p)  # sed reads it all: no SIGPIPE under pipefail
printf '\x55' | dd of="$victim" bs=1 seek=2000 conv=notrunc 2>/dev/null
if "$TESSERA" kv-store verify "$TMP/store" >"$TMP/verify.json"; then fail "verify missed a corrupt block"; fi
grep -q "$(basename "$victim")" "$TMP/verify.json" || fail "verify did not name the corrupt block"
start_server B "$TMP/b2.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/store"
ask_all "$B_URL" "$TMP/b2.txt"
cmp -s "$TMP/cold.txt" "$TMP/b2.txt" || fail "outputs with a corrupt block differ from cold"
stop_server B || fail "server B shutdown"
# (The server dropped it if a prompt needed it; a block holding generated
# tokens is never looked up.) verify --delete removes what is left.
"$TESSERA" kv-store verify "$TMP/store" --delete >/dev/null || true
"$TESSERA" kv-store verify "$TMP/store" >/dev/null || fail "verify --delete left a corrupt block"

echo "-- write-back: blocks written at shutdown"
start_server A "$TMP/wa.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/wb" --kv-store-write back
ask_all "$A_URL" "$TMP/wa.txt"
stop_server A || fail "write-back server shutdown"
start_server B "$TMP/wb.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/wb"
ask_all "$B_URL" "$TMP/wb.txt"
cmp -s "$TMP/cold.txt" "$TMP/wb.txt" || fail "outputs after a write-back restart differ from cold"
positive "$(metric "$B_URL" 'tessera_kv_store_hits_total{tier="disk"}')" || fail "nothing written back at shutdown"
stop_server B || fail "server B shutdown"

echo "-- kill -9 while writing"
# Three kills at different moments of the serving (tests/kv_store_test.cc
# kills a writer mid-record; this checks the server's side).
left=0
for delay in 0.05 0.15 0.3; do
  start_server K "$TMP/k.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/killed"
  for p in "${PROMPTS[@]}"; do ask "$K_URL" "$delay $p" >/dev/null 2>&1 & done
  sleep "$delay"
  kill -KILL "$K_PID"; wait "$K_PID" 2>/dev/null || true; K_PID=""
  wait || true
  left=$(( left + $("$TESSERA" kv-store stats "$TMP/killed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["temp_files"])') ))
  "$TESSERA" kv-store verify "$TMP/killed" >"$TMP/verify.json" || { fail "a record is broken after kill -9"; cat "$TMP/verify.json"; }
done
echo "   $left unfinished writes left behind by the kills (invisible to readers)"
start_server K "$TMP/k2.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/killed"
ask_all "$K_URL" "$TMP/k.txt"
cmp -s "$TMP/cold.txt" "$TMP/k.txt" || fail "outputs after kill -9 differ from cold"
stop_server K || fail "server K shutdown"
"$TESSERA" kv-store gc "$TMP/killed" --max-bytes 100M --temp-age 0 >/dev/null || fail "gc"
temps=$("$TESSERA" kv-store stats "$TMP/killed" | python3 -c 'import json,sys; print(json.load(sys.stdin)["temp_files"])')
[ "$temps" = 0 ] || fail "gc left $temps unfinished writes"

echo "-- two replicas on one Redis"
RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$TMP" >"$TMP/redis.log" 2>&1 &
REDIS_PID=$!
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
start_server R1 "$TMP/r1.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "redis://127.0.0.1:$RPORT"
start_server R2 "$TMP/r2.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "redis://127.0.0.1:$RPORT"
ask_all "$R1_URL" "$TMP/r1.txt"
cmp -s "$TMP/cold.txt" "$TMP/r1.txt" || fail "replica 1 outputs differ from cold"
sleep 0.5  # replica 1's writes are asynchronous
ask_all "$R2_URL" "$TMP/r2.txt"
cmp -s "$TMP/cold.txt" "$TMP/r2.txt" || fail "replica 2 outputs differ from cold"
rhits=$(metric "$R2_URL" 'tessera_kv_store_hits_total{tier="redis"}')
positive "$rhits" || fail "replica 2 loaded nothing from Redis"
echo "   replica 2 loaded $rhits blocks from replica 1's Redis"
kill -TERM "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null || true; REDIS_PID=""
PROMPTS+=("$A$B a new tail for a stopped Redis.")
ask_all "$R2_URL" "$TMP/r2_down.txt"
grep -q "request failed" "$TMP/r2_down.txt" && fail "a request failed with Redis stopped"
head -n 8 "$TMP/r2_down.txt" | cmp -s - "$TMP/cold.txt" || fail "outputs with Redis stopped differ from cold"
errs=$(metric "$R2_URL" 'tessera_kv_store_read_errors_total{tier="redis"}')
positive "$errs" || fail "no Redis read error counted with Redis stopped"
stop_server R1 || fail "replica 1 shutdown"
stop_server R2 || fail "replica 2 shutdown"

echo "-- a full disk"
mkdir -p "$TMP/full"
if mount -t tmpfs -o size=256k tmpfs "$TMP/full" 2>/dev/null; then
  start_server F "$TMP/f.log" -m "$MODEL" -t 1 --kv-type f32 --kv-store "$TMP/full"
  ask_all "$F_URL" "$TMP/f.txt"
  head -n 8 "$TMP/f.txt" | cmp -s - "$TMP/cold.txt" || fail "outputs on a full disk differ from cold"
  werr=$(metric "$F_URL" 'tessera_kv_store_write_errors_total{tier="disk"}')
  positive "$werr" || fail "no write error counted on a full disk"
  stop_server F || fail "server F shutdown"
  "$TESSERA" kv-store verify "$TMP/full" >/dev/null || fail "a record is broken on the full disk"
  umount "$TMP/full"
else
  echo "   (skipped: this user cannot mount a tmpfs)"
fi

[ "$failures" -eq 0 ] && echo "kv_store: all passed" || { echo "kv_store: $failures failure(s)"; exit 1; }
