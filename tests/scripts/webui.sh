#!/usr/bin/env bash
# The chat page in Debian's headless Chromium (tests/webui/page.mjs): a
# server with --api-key and --conversations-db on stories260K, the page's
# assets, streaming, stop, regenerate, edit, reload from SQLite, phone size.
# Screenshots go to a temporary folder; WEBUI_SHOTS=docs/images keeps them.
#
# usage: tests/scripts/webui.sh BUILD_DIR   (from the repo root)
set -euo pipefail
source tests/server/lib.sh
suite_init "${1:-build}"
command -v chromium >/dev/null || { echo "FAIL: chromium is not installed (scripts/setup installs it)"; exit 1; }
TMP=$(mktemp -d)
cleanup() { [ -n "${W_PID:-}" ] && kill -KILL "$W_PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
dir=tests/webui
if [ "$(node -e "try{console.log(require('./$dir/node_modules/puppeteer-core/package.json').version)}catch{}" 2>/dev/null)" != \
     "$(node -e "console.log(require('./$dir/package.json').dependencies['puppeteer-core'])")" ]; then
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error)
fi
KEY=webui-key-$$
# A soft prompt to choose (4 rows of stories260K's 64-wide embeddings).
/usr/bin/python3 -c 'import numpy as np, sys; np.save(sys.argv[1], np.random.default_rng(1).normal(0, 0.02, (4, 64)).astype(np.float32))' "$TMP/story.npy"
start_server W "$TMP/w.log" -m "$MODEL" -t 1 --ctx 4096 --chat-template chatml --api-key "$KEY" --conversations-db "$TMP/conv.db" \
  --soft-prompt "story=$TMP/story.npy"
shots=${WEBUI_SHOTS:-$TMP}
mkdir -p "$shots"
timeout 300 node "$dir/page.mjs" "$W_URL" "$KEY" "$shots"
stop_server W
# The conversation outlived the server: a new one on the same file lists it.
start_server W "$TMP/w2.log" -m "$MODEL" -t 1 --api-key "$KEY" --conversations-db "$TMP/conv.db"
n=$(curl -s -H "Authorization: Bearer $KEY" "$W_URL/v1/conversations" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["data"]))')
[ "$n" = 2 ] || { echo "FAIL: $n conversations after a restart (2 made)"; exit 1; }
stop_server W
echo "webui: server restart kept the conversation"
