#!/bin/sh
# Decode speed against competing busy processes (issue 13.5): for each round,
# each busy level and each thread setting, in alternation, one
#   tessera generate -m MODEL -p "Once upon a time" -n 256 --temp 0 --ignore-eos [-t N]
# beside BUSY shell loops (each bounded by `timeout`, killed after the run).
# Prints one TSV line per run: model, busy, threads, round, generated t/s.
#
#   bench/thread_contention.sh BINARY MODEL [ROUNDS] [BUSY_LEVELS] [SETTINGS]
#   e.g. bench/thread_contention.sh build/tessera /tmp/110m-q8.gguf 5 "0 1 2" "1 2 default"
set -eu
bin=$1
model=$2
rounds=${3:-3}
levels=${4:-"0 1 2"}
settings=${5:-"1 2 default"}
name=$(basename "$model" .gguf)
for round in $(seq "$rounds"); do
  for busy in $levels; do
    for t in $settings; do
      pids=""
      for _ in $(seq "$busy"); do
        timeout 120 sh -c 'while :; do :; done' &
        pids="$pids $!"
      done
      [ "$busy" -gt 0 ] && sleep 0.5
      if [ "$t" = default ]; then targ=""; else targ="-t $t"; fi
      # shellcheck disable=SC2086
      rate=$("$bin" generate -m "$model" -p "Once upon a time" -n 256 --temp 0 --ignore-eos $targ 2>&1 >/dev/null |
             sed -n 's/.*generated [0-9]* tokens in [0-9.]* s (\([0-9.]*\) t\/s).*/\1/p')
      for p in $pids; do kill "$p" 2>/dev/null || true; done
      wait 2>/dev/null || true
      printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$busy" "$t" "$round" "$rate"
    done
  done
done
