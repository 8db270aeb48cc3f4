# Sourced by tests/scripts/server*.sh: start `tessera serve` on an ephemeral
# loopback port and stop it again.
#
#   suite_init BUILD_DIR               sets TESSERA and MODEL, checks the prerequisites
#   start_server VAR LOGFILE ARGS...   sets VAR_URL and VAR_PID
#   stop_server VAR                    SIGTERM, waits, fails unless exit 0

start_server() {
  local var=$1 log=$2
  shift 2
  "$TESSERA" serve --port 0 "$@" 2>"$log" &
  local pid=$!
  local url=""
  for _ in $(seq 1 600); do
    url=$(grep -o -m1 'listening on http://[0-9.]*:[0-9]*' "$log" 2>/dev/null | sed 's/listening on //') || true
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "server exited early:"; cat "$log"; return 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { echo "server did not print its port"; cat "$log"; return 1; }
  # Bound before loading: wait for /health to say ready.
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && break
    sleep 0.1
  done
  printf -v "${var}_URL" '%s' "$url"
  printf -v "${var}_PID" '%s' "$pid"
}

stop_server() {
  local var=$1
  local pid_var="${var}_PID"
  local pid=${!pid_var}
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" || rc=$?
  printf -v "${var}_PID" '%s' ""
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: server $var exited with $rc after SIGTERM"
    return 1
  fi
}

# npm install of the pinned client into tests/server/node_modules (git-ignored),
# once; later runs need no network.
ensure_node_modules() {
  local dir=tests/server want
  want=$(node -e "console.log(require('./$dir/package.json').dependencies.openai)")
  if [ "$(node -e "try{console.log(require('./$dir/node_modules/openai/package.json').version)}catch{}" 2>/dev/null)" != "$want" ]; then
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error) || return 1
  fi
}

suite_init() {
  TESSERA="$1/tessera"
  local shared=${TESSERA_SHARED:-../shared}
  MODEL="$shared/models/stories260K/stories260K.gguf"
  [ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
  [ -f "$MODEL" ] || { echo "FAIL: missing shared test data $MODEL"; exit 1; }
  command -v node >/dev/null || { echo "FAIL: node is not installed (scripts/setup installs nodejs npm)"; exit 1; }
}
