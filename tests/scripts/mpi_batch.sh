#!/usr/bin/env bash
# `mpirun -np 2 tessera batch` (issue 39, batch jobs across ranks), with the
# Open MPI that scripts/setup installs:
#  - the sharded output equals one process's, line for line apart from the
#    per-request timings (greedy and seeded-sampling requests, one bad line);
#  - a job killed with -9 mid-run resumes with 2 ranks, and again with none:
#    complete shards are not run again, the output is the same;
#  - shards planned for another input are refused, on every rank, with a
#    one-line error.
#
# usage: tests/scripts/mpi_batch.sh BUILD_DIR   (from the repo root)
set -euo pipefail
TESSERA="${1:-build}/tessera"
SHARED=${TESSERA_SHARED:-../shared}
MODEL="$SHARED/models/stories1M/stories1M.gguf"
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
[ -f "$MODEL" ] || { echo "FAIL: missing shared test data $MODEL"; exit 1; }
command -v mpirun >/dev/null || { echo "FAIL: no mpirun (scripts/setup installs openmpi-bin)"; exit 1; }
# Open MPI refuses root unless told twice; 2 ranks on 2 cores may need
# --oversubscribe where it counts fewer slots.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np 2)

TMP=$(mktemp -d)
JOB_PID=""
cleanup() {
  [ -n "$JOB_PID" ] && kill -KILL -- "-$JOB_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# 64 requests: greedy and seeded sampling, lengths that vary within a shard
# (so a kill finds shards half done), line 14 not JSON.
/usr/bin/python3 - "$TMP/in.jsonl" <<'PY'
import json, sys
starts = ["Once upon a time", "Tom had a big dog", "The sun was hot", "Lily wanted to", "One day, a bird"]
with open(sys.argv[1], "w") as f:
    for i in range(64):
        if i == 13:
            f.write("{not json\n")
            continue
        r = {"id": f"r{i}", "prompt": starts[i % 5], "max_tokens": 40 + 20 * (i % 9)}
        r.update({"temperature": 0.8, "seed": 1000 + i} if i % 2 else {"temperature": 0})
        f.write(json.dumps(r) + "\n")
PY

# The results without the two timing fields, one JSON object per line.
untimed() {
  /usr/bin/python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r.pop("time_to_first_token_s", None); r.pop("latency_s", None)
    print(json.dumps(r, sort_keys=True))' "$1" 2>/dev/null || echo "unreadable $1"
}
# A run: its exit status (2 when it rejected the bad line, 0 when a resumed
# run found that line's shard done), nothing left over, one process's output.
expect_done() {  # NAME RC OUTPUT LOG [WANTED_RCS]
  [[ " ${5:-2} " == *" $2 "* ]] || { fail "$1: exit $2, wanted ${5:-2}"; tail -5 "$4"; }
  [ ! -e "$3.parts" ] || fail "$1: $3.parts left behind"
  [ "$(untimed "$3")" = "$(untimed "$TMP/one.jsonl")" ] || fail "$1: output differs from one process's"
}
run() {  # LOG ARGS...: rc of tessera batch (or of mpirun), stderr to LOG
  local log=$1 rc=0
  shift
  "$@" 2>"$log" >/dev/null || rc=$?
  echo "$rc"
}
BATCH=("$TESSERA" batch -m "$MODEL" -i "$TMP/in.jsonl" --max-num-seqs 4)

rc=$(run "$TMP/one.log" "${BATCH[@]}" -t 2 -o "$TMP/one.jsonl")
[ "$rc" = 2 ] || { fail "one process: exit $rc"; cat "$TMP/one.log"; }
[ "$(wc -l <"$TMP/one.jsonl")" = 64 ] || fail "one process wrote $(wc -l <"$TMP/one.jsonl") lines, wanted 64"
sed -n 14p "$TMP/one.jsonl" | grep -q '"error":"line 14: invalid JSON.*"index":13' || fail "line 14's error is not in the output"

rc=$(run "$TMP/two.log" "${MPIRUN[@]}" "${BATCH[@]}" -o "$TMP/two.jsonl")
expect_done "2 ranks" "$rc" "$TMP/two.jsonl" "$TMP/two.log"
grep -q "batch: 64 requests, 2 ranks, 8 shards (0 complete before this run)" "$TMP/two.log" ||
  { fail "2 ranks: no summary line"; cat "$TMP/two.log"; }

# kill_mid_run OUTPUT: starts 2 ranks and kills them all (-9) once some
# shard is complete and others are not; tries again (up to 5 times) when the
# job ended before the poll saw such a moment.
kill_mid_run() {
  local out=$1 try
  for try in 1 2 3 4 5; do
    rm -rf "$out" "$out.parts"
    try_kill_mid_run "$out" && return 0
  done
  fail "the job ended before it could be killed mid-run, 5 times"
  return 1
}
try_kill_mid_run() {
  local out=$1
  setsid "${MPIRUN[@]}" "${BATCH[@]}" -o "$out" >/dev/null 2>&1 &
  JOB_PID=$!
  disown  # killed below: no job-control notice
  local caught=""
  for _ in $(seq 1 3000); do
    if [ -d "$out.parts" ]; then
      local full
      full=$(/usr/bin/python3 - "$out.parts" <<'PY'
import json, os, sys
d = sys.argv[1]
try:
    plan = json.load(open(os.path.join(d, "plan.json")))
except Exception:
    print(0); sys.exit()
n, k = plan["total"] - plan["start"], plan["shards"]
full = 0
for s in range(k):
    want = (s + 1) * n // k - s * n // k
    try:
        got = sum(1 for line in open(os.path.join(d, f"shard-{s:05d}.jsonl")) if line.endswith("\n"))
    except FileNotFoundError:
        got = 0
    full += got == want
print(full if 0 < full < k else 0)
PY
)
      if [ "$full" -gt 0 ]; then caught=$full; break; fi
    fi
    kill -0 "$JOB_PID" 2>/dev/null || break
    sleep 0.01
  done
  # mpirun and its ranks (which are not in its process group).
  kill -KILL -- "-$JOB_PID" 2>/dev/null || true
  pkill -KILL -f -- "-o $out\$" 2>/dev/null || true
  while pgrep -f -- "-o $out\$" >/dev/null; do sleep 0.01; done
  JOB_PID=""
  [ -n "$caught" ] || return 1
  echo "killed with $caught of 8 shards complete"
}

# Killed, then resumed by 2 ranks: the complete shards are skipped.
if kill_mid_run "$TMP/k.jsonl"; then
  rc=$(run "$TMP/k.log" "${MPIRUN[@]}" "${BATCH[@]}" -o "$TMP/k.jsonl")
  expect_done "resumed by 2 ranks" "$rc" "$TMP/k.jsonl" "$TMP/k.log" "0 2"
  grep -Eq "2 ranks, 8 shards \(([1-7]) complete before this run\); ([1-9][0-9]*) skipped" "$TMP/k.log" ||
    { fail "resumed by 2 ranks: no complete shards skipped"; cat "$TMP/k.log"; }
  # Every request once: skipped (done before) + computed + rejected = 64.
  sum=$(sed -nE 's/.*; ([0-9]+) skipped \(already done\), ([0-9]+) computed, ([0-9]+) rejected.*/\1+\2+\3/p' "$TMP/k.log")
  [ -n "$sum" ] && [ $((sum)) = 64 ] || fail "resumed by 2 ranks: skipped + computed + rejected = ${sum:-?}, wanted 64"
fi
# Killed, then resumed by one process (no mpirun): the same plan, the same output.
if kill_mid_run "$TMP/s.jsonl"; then
  rc=$(run "$TMP/s.log" "${BATCH[@]}" -t 2 -o "$TMP/s.jsonl")
  expect_done "resumed by one process" "$rc" "$TMP/s.jsonl" "$TMP/s.log" "0 2"
  grep -Eq "1 ranks, 8 shards \([1-7] complete before this run\)" "$TMP/s.log" ||
    { fail "resumed by one process: no complete shards skipped"; cat "$TMP/s.log"; }
fi

# Shards of another input: refused by rank 0, and the other rank ends too.
if kill_mid_run "$TMP/x.jsonl"; then
  sed -i 's/Once upon a time/Once upon a day/' "$TMP/in.jsonl"
  rc=$(run "$TMP/x.log" timeout 60 "${MPIRUN[@]}" "${BATCH[@]}" -o "$TMP/x.jsonl")
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "shards of another input: exit $rc (124: a rank hung)"
  grep -q "error: '$TMP/x.jsonl.parts' holds shards of another input" "$TMP/x.log" ||
    { fail "shards of another input: no error naming them"; cat "$TMP/x.log"; }
fi

[ "$failures" = 0 ] && echo "mpi_batch: all checks passed"
exit $((failures > 0))
