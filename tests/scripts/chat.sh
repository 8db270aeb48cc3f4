#!/usr/bin/env bash
# `tessera chat` in a pseudo-terminal on stories260K (tests/chat/drive_pty.py):
# three turns, Ctrl-C mid-reply, /regen, /save + /load, only the new turn
# prefilled, Ctrl-C twice to leave; then the same commands through a pipe,
# and --url against a running server.
#
# usage: tests/scripts/chat.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
timeout 300 python3 tests/chat/drive_pty.py "$TESSERA" "$MODEL" "$TMP"
# Piped (no terminal): the same session commands, read line by line.
out=$(printf 'Hello there.\n/stats\n/save %s/p.json\n/bogus\n' "$TMP" |
  timeout 60 "$TESSERA" chat -m "$MODEL" --temp 0 -n 16 -t 1 2>/dev/null)
grep -q "prompt .* tokens: 0 from the cache" <<<"$out" || { echo "FAIL: piped /stats"; echo "$out"; exit 1; }
grep -q "unknown command /bogus" <<<"$out" || { echo "FAIL: piped unknown command"; exit 1; }
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["messages"]; sys.exit(0 if len(m) == 2 else 1)' "$TMP/p.json" ||
  { echo "FAIL: piped /save"; exit 1; }

# With one-token KV blocks the prefix cache has no partial last block to
# recompute: turn 3 prefills exactly the tokens it added, and the last token
# of the reply before (sampled, never fed through the model: its K/V does
# not exist until now).
exact=$(printf 'Hello there.\nTell me more.\nAnd then?\n/stats\n' |
  timeout 60 "$TESSERA" chat -m "$MODEL" --temp 0 -n 24 -t 1 --block-size 1 2>/dev/null | grep '^prompt ')
python3 -c '
import re, sys
m = re.search(r"(\d+) prefilled \(this turn added (\d+)\)", sys.argv[1])
sys.exit(0 if m and int(m.group(1)) == int(m.group(2)) + 1 else 1)' "$exact" || { echo "FAIL: turn 3 prefilled more than its own tokens: $exact"; exit 1; }
echo "turn 3 with --block-size 1: $exact"

# --url: the same conversation through a running server; its first reply
# (the same rendered prompt, greedy) is the local one.
start_server S "$TMP/s.log" -m "$MODEL" -t 1 --chat-template chatml --api-key chat-key
trap 'kill -KILL "${S_PID:-}" 2>/dev/null || true; rm -rf "$TMP"' EXIT
local_reply=$(printf 'Hello there.\n/stats\n' | timeout 60 "$TESSERA" chat -m "$MODEL" --temp 0 -n 24 -t 1 2>/dev/null | sed '/^prompt /,$d')
remote=$(printf 'Hello there.\n/stats\nMore?\n/regen\n/save %s/r.json\n' "$TMP" |
  timeout 60 "$TESSERA" chat --url "$S_URL" --api-key chat-key --temp 0 -n 24 2>/dev/null)
remote_reply=$(sed '/^prompt /,$d' <<<"$remote")
[ -n "$local_reply" ] && [ "$local_reply" = "$remote_reply" ] ||
  { echo "FAIL: --url's first reply differs from the local one"; echo "$local_reply"; echo "---"; echo "$remote_reply"; exit 1; }
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["messages"]; sys.exit(0 if len(m) == 4 and m[3]["role"] == "assistant" else 1)' "$TMP/r.json" ||
  { echo "FAIL: --url /regen + /save"; exit 1; }
bad=$(printf 'Hi\n' | timeout 60 "$TESSERA" chat --url "$S_URL" --api-key wrong 2>&1 || true)
grep -q "incorrect API key" <<<"$bad" || { echo "FAIL: --url with a wrong key: $bad"; exit 1; }
stop_server S
echo "chat: all passed"
