#!/usr/bin/env bash
# A mixture of experts bigger than the memory it may use still runs: its
# experts are used in place from the mapped file, and the page cache holds
# what fits (model/decoder.cc, decide_expert_layout). The test makes a
# ~640 MB random Qwen3-MoE file, drops it from the page cache, and runs
# `tessera generate` inside a memory control group limited to 256 MiB (cgroup
# v1 or v2, created here and removed after): the greedy tokens must be those
# of a run without the limit, the group's peak usage must have reached the
# limit (the page cache was squeezed), and the same run with the experts
# forced into memory (TESSERA_EXPERTS_IN_PLACE=0) must be killed by the
# limit, which shows that the limit binds.
#
# usage: tests/scripts/moe_memory.sh BUILD_DIR   (from the repo root)
set -euo pipefail
BUILD=${1:-build}
TESSERA="$BUILD/tessera"
PY=/usr/bin/python3
LIMIT=$((256 << 20))
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }

TMP=$(mktemp -d)
GROUP=""
cleanup() {
  if [ -n "$GROUP" ] && [ -d "$GROUP" ]; then
    # Move anything left back to the parent, then remove the group.
    while read -r pid; do echo "$pid" >"$PARENT_PROCS" 2>/dev/null || true; done <"$GROUP/cgroup.procs" || true
    rmdir "$GROUP" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# A memory cgroup of our own: v2 (unified) or v1 (memory controller). A
# machine where this process may not create one (no controller, read-only
# /sys/fs/cgroup, not root) cannot run this test: it says so and why.
name="tessera-moe-memory-$$"
skip() { echo "SKIP moe_memory: $1 (a memory limit for one process needs a cgroup of its own)"; exit 0; }
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  mkdir "/sys/fs/cgroup/$name" 2>/dev/null || skip "cannot create /sys/fs/cgroup/$name"
  GROUP="/sys/fs/cgroup/$name"
  PARENT_PROCS=/sys/fs/cgroup/cgroup.procs
  echo "$LIMIT" >"$GROUP/memory.max" 2>/dev/null || skip "cannot set $GROUP/memory.max"
  echo 0 >"$GROUP/memory.swap.max" 2>/dev/null || true
  PEAK_FILE="$GROUP/memory.peak"
elif [ -d /sys/fs/cgroup/memory ]; then
  mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null || skip "cannot create /sys/fs/cgroup/memory/$name"
  GROUP="/sys/fs/cgroup/memory/$name"
  PARENT_PROCS=/sys/fs/cgroup/memory/cgroup.procs
  echo "$LIMIT" >"$GROUP/memory.limit_in_bytes" 2>/dev/null || skip "cannot set $GROUP/memory.limit_in_bytes"
  echo "$LIMIT" >"$GROUP/memory.memsw.limit_in_bytes" 2>/dev/null || true  # no swapping out of the limit
  PEAK_FILE="$GROUP/memory.max_usage_in_bytes"
else
  skip "no memory cgroup controller at /sys/fs/cgroup"
fi

model="$TMP/moe.gguf"
"$TESSERA" make-model --arch qwen3moe --dim 1024 --layers 8 --heads 8 --kv-heads 2 --ff 1024 --ff-exp 512 \
  --experts 48 --experts-used 2 --type q8_0 --n-vocab 1000 --seed 3 -t 2 -o "$model" >/dev/null 2>&1
bytes=$(stat -c %s "$model")
[ "$bytes" -gt $((2 * LIMIT)) ] || { echo "FAIL: the model ($bytes bytes) is not bigger than twice the limit"; exit 1; }

# The file out of the page cache, so the group pays for the pages it reads.
evict() { sync; "$PY" -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$model"; }

run() {  # run LOG ENV...: greedy tokens of the model, in the group when LOG ends in -limited
  local log=$1
  shift
  if [[ "$log" == *-limited ]]; then
    (echo $BASHPID >"$GROUP/cgroup.procs" && exec env "$@" "$TESSERA" generate -m "$model" -p "tok5 tok77 tok300" \
      -n 12 --temp 0 -t 2) >"$TMP/$log.out" 2>"$TMP/$log.err"
  else
    env "$@" "$TESSERA" generate -m "$model" -p "tok5 tok77 tok300" -n 12 --temp 0 -t 2 >"$TMP/$log.out" 2>"$TMP/$log.err"
  fi
}

run free TESSERA_EXPERTS_IN_PLACE=
evict
if ! run in-place-limited TESSERA_EXPERTS_IN_PLACE=; then
  echo "FAIL: generate in a ${LIMIT}-byte group failed:"; cat "$TMP/in-place-limited.err"; exit 1
fi
grep -q "used in place from the mapped file" "$TMP/in-place-limited.err" ||
  { echo "FAIL: the experts were not used in place under the limit:"; cat "$TMP/in-place-limited.err"; exit 1; }
cmp -s "$TMP/free.out" "$TMP/in-place-limited.out" ||
  { echo "FAIL: tokens under the limit differ: $(cat "$TMP/in-place-limited.out") vs $(cat "$TMP/free.out")"; exit 1; }
peak=$LIMIT
if [ -r "$PEAK_FILE" ]; then  # cgroup v2's memory.peak needs Linux 5.19
  peak=$(cat "$PEAK_FILE")
  [ "$peak" -ge $((LIMIT * 9 / 10)) ] ||
    { echo "FAIL: the group's peak usage $peak never came near the limit $LIMIT: the test did not squeeze the page cache"; exit 1; }
else
  echo "moe_memory: no $PEAK_FILE (kernel without it): the peak is not checked"
fi

evict
if run repacked-limited TESSERA_EXPERTS_IN_PLACE=0; then
  echo "FAIL: with its experts forced into memory ($bytes bytes of file) the model still ran in $LIMIT bytes: the limit does not bind"
  exit 1
fi
echo "moe_memory: a ${bytes}-byte mixture ran in a $((LIMIT >> 20)) MiB group (peak $((peak >> 20)) MiB) with the tokens of an unlimited run; repacked experts did not fit"
