#!/usr/bin/env bash
# `tessera chat` in a pseudo-terminal on stories260K (tests/chat/drive_pty.py):
# three turns, Ctrl-C mid-reply, /regen, /save + /load, only the new turn
# prefilled, Ctrl-C twice to leave; then the same commands through a pipe.
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
echo "chat: all passed"
