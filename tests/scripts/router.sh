#!/usr/bin/env bash
# `tessera route` over two real `tessera serve` replicas (issue 39):
#  1. prefix-aware routing against round-robin on 8 tenants x ~1 000-token
#     system prompts (bench/router_bench): the replicas' own prefix-cache
#     hit rate at least 1.5x round-robin's;
#  2. a replica killed (SIGKILL) mid-run: no request that had not started
#     streaming is lost (the router retries it on the other), the router
#     takes the dead one out, and later requests all succeed;
#  3. the router's answers equal a replica's (greedy), its errors are
#     OpenAI-shaped, and it stops cleanly on SIGTERM.
#
# usage: tests/scripts/router.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"
SHARED=${TESSERA_SHARED:-../shared}

TMP=$(mktemp -d)
cleanup() {
  for p in ${A_PID:-} ${B_PID:-} ${R_PID:-}; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

echo "-- prefix-aware vs round-robin (bench/router_bench)"
bench/router_bench --build "$(dirname "$TESSERA")" --rounds 1 --requests 192 >"$TMP/bench.json" ||
  fail "router_bench did not run"
/usr/bin/python3 - "$TMP/bench.json" <<'EOF' || fail "hit rate"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d['runs']:
    x = r['result']
    print(f"{r['policy']:12s} ok {x['ok']}/{x['requests']} hit rate {x['prefix_hit_rate']:.3f} "
          f"ttft mean {x['ttft_ms']['mean']:.1f} ms  prompt tokens/request {x['query_tokens'] / x['requests']:.0f}")
    assert x['ok'] == x['requests'], x['errors']
    assert x['query_tokens'] / x['requests'] > 1000, 'system prompts shorter than 1 000 tokens'
ratio = d['hit_rate_ratio']['min']
print(f"hit rate ratio {ratio:.2f} (want >= 1.5), TTFT speed-up {d['ttft_speedup']['min']:.2f}")
assert ratio >= 1.5
EOF

start_router() {  # start_router LOG ARGS... -> R_URL, R_PID
  local log=$1
  shift
  "$TESSERA" route --port 0 "$@" 2>"$log" &
  R_PID=$!
  R_URL=""
  for _ in $(seq 1 100); do
    R_URL=$(grep -o -m1 'listening on http://[0-9.]*:[0-9]*' "$log" 2>/dev/null | sed 's/listening on //') || true
    [ -n "$R_URL" ] && break
    sleep 0.1
  done
  [ -n "$R_URL" ] || { echo "router did not start"; cat "$log"; return 1; }
}
metric() { curl -s "$R_URL/metrics" | grep -E "^$1 " | awk '{print $2}'; }

echo "-- a replica killed mid-run"
REPLICA=(-m "$MODEL" -c 2048 -t 1 --kv-blocks 400 --chat-template chatml)
start_server A "$TMP/a.log" "${REPLICA[@]}"
start_server B "$TMP/b.log" "${REPLICA[@]}"
# Health checks far apart: the dead replica must be noticed by the requests
# themselves (refused connections), and retried.
start_router "$TMP/r.log" --replica "$A_URL" --replica "$B_URL" --health-interval 60
node bench/router_load.mjs --url "$R_URL" --replicas "$A_URL,$B_URL" --text "$SHARED/data/tinystories_val_prefix.txt" \
  --requests 96 --clients 4 --max-tokens 24 --seed 11 --kill-pid "$A_PID" --kill-after 30 >"$TMP/kill.json" ||
  fail "load client"
/usr/bin/python3 - "$TMP/kill.json" <<'EOF' || fail "requests lost to the killed replica"
import json, sys
x = json.load(open(sys.argv[1]))
print(f"killed pid {x['killed_pid']}: ok {x['ok']}/{x['requests']}, failed before streaming "
      f"{x['failed_before_streaming']}, broken mid-stream {x['failed_mid_stream']}; {x['errors']}")
assert x['killed_pid'], 'the replica was not killed'
assert x['failed_before_streaming'] == 0
assert x['ok'] + x['failed_mid_stream'] == x['requests']
assert x['failed_mid_stream'] <= 4, 'more streams broken than were in flight'
EOF
A_PID=""
retries=$(metric tessera_router_retries_total)
up=$(curl -s "$R_URL/metrics" | grep -F "tessera_router_replica_up{replica=\"$A_URL\"}" | awk '{print $2}')
echo "router: retries $retries, killed replica up=$up"
[ "${retries:-0}" -ge 1 ] || fail "no request was retried after the kill"
[ "$up" = 0 ] || fail "the killed replica is still routed to"
code=$(curl -s -o "$TMP/after.json" -w '%{http_code}' "$R_URL/v1/completions" \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}')
[ "$code" = 200 ] || fail "request after the kill: HTTP $code $(cat "$TMP/after.json")"

echo "-- answers, errors, shutdown"
direct=$(curl -s "$B_URL/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
routed=$(curl -s "$R_URL/v1/completions" -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}' |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])')
[ -n "$direct" ] && [ "$direct" = "$routed" ] || fail "routed answer '$routed' differs from the replica's '$direct'"
code=$(curl -s -o "$TMP/bad.json" -w '%{http_code}' "$R_URL/v1/completions" -d '{"prompt": ')
[ "$code" = 400 ] && grep -q '"error"' "$TMP/bad.json" || fail "malformed JSON: HTTP $code $(cat "$TMP/bad.json")"
code=$(curl -s -o "$TMP/nf.json" -w '%{http_code}' "$R_URL/v1/nothing")
[ "$code" = 404 ] && grep -q '"error"' "$TMP/nf.json" || fail "unknown path: HTTP $code $(cat "$TMP/nf.json")"
stop_server B || fail "replica shutdown"
# No replica left: 503 with an error body, and /health says so.
code=$(curl -s -o "$TMP/none.json" -w '%{http_code}' "$R_URL/v1/completions" -d '{"prompt": "x", "max_tokens": 2}')
[ "$code" = 503 ] && grep -q '"error"' "$TMP/none.json" || fail "no replica: HTTP $code $(cat "$TMP/none.json")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$R_URL/health")" = 503 ] || fail "/health with no replica is not 503"
kill -TERM "$R_PID"
rc=0
wait "$R_PID" || rc=$?
R_PID=""
[ "$rc" = 0 ] || fail "router exited with $rc after SIGTERM"

[ "$failures" = 0 ] && echo "router: all checks passed"
exit "$failures"
