#!/usr/bin/env bash
# The README's first run: `tessera generate` on stories260K, greedy, writes
# only the continuation to stdout and it continues as llama.cpp does
# (", there was a little girl named Lily"); the same for every ISA and
# thread count, and with every speculative method; and the batch mode
# resumes after an interruption.
#
# usage: tests/scripts/cli_generate.sh BUILD_DIR   (from the repo root)
set -euo pipefail
BUILD=${1:-build}
TESSERA="$BUILD/tessera"
MODEL=${TESSERA_SHARED:-../shared}/models/stories260K/stories260K.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

expected=", there was a little girl named Lily"
out=$("$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 2>"$TMP/log")
case "$out" in
  "$expected"*) echo "ok: generate continues with '$expected'";;
  *) echo "FAIL: generate printed: $out"; fail=1;;
esac
grep -q "generated 64 tokens" "$TMP/log" || { echo "FAIL: timing line missing on stderr"; cat "$TMP/log"; fail=1; }

# The same continuation through a quantized KV cache (q8_0; q4_0 rotated)
# and with the layers in W8A8 (--w8a8); a bad cache type names the choices.
for opts in "--kv-type q8_0" "--kv-type q4_0 --kv-hadamard" "--w8a8"; do
  same=$("$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 16 --temp 0 $opts 2>/dev/null)
  case "$same" in
    "$expected"*) echo "ok: $opts continues with '$expected'";;
    *) echo "FAIL: generate $opts printed: $same"; fail=1;;
  esac
done
# A LoRA adapter kept in F16 or Q8_0 (--lora-type) still applies: the text
# is not the base model's (tests/lora_test.cc checks the logits).
ADAPTER=${TESSERA_SHARED:-../shared}/models/stories260K/lora-shakespeare.gguf
base=$("$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 2>/dev/null)
for t in f32 f16 q8_0; do
  if ! with=$("$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 --lora "$ADAPTER" --lora-type $t 2>"$TMP/err"); then
    echo "FAIL: --lora-type $t: $(cat "$TMP/err")"; fail=1
  elif [ -z "$with" ] || [ "$with" = "$base" ]; then
    echo "FAIL: --lora-type $t printed the base model's text: $with"; fail=1
  else
    echo "ok: --lora-type $t applies the adapter: ${with:0:40}"
  fi
done
if "$TESSERA" generate -m "$MODEL" -p "x" -n 1 --lora "$ADAPTER" --lora-type q4_0 >"$TMP/out" 2>"$TMP/err"; then
  echo "FAIL: --lora-type q4_0 accepted"; fail=1
elif grep -q "not in {f32,f16,q8_0}" "$TMP/err"; then
  echo "ok: --lora-type q4_0 refused"
else
  echo "FAIL: --lora-type q4_0 error: $(cat "$TMP/err")"; fail=1
fi
if "$TESSERA" generate -m "$MODEL" -p "x" -n 1 --kv-type q5_1 >"$TMP/out" 2>"$TMP/err"; then
  echo "FAIL: --kv-type q5_1 accepted"; fail=1
elif grep -q "q8_0 or q4_0" "$TMP/err"; then
  echo "ok: --kv-type q5_1 refused: $(head -c 120 "$TMP/err")"
else
  echo "FAIL: --kv-type q5_1 error: $(cat "$TMP/err")"; fail=1
fi
if "$TESSERA" generate -m "$MODEL" -p "x" -n 1 --kv-type f16 --kv-hadamard >"$TMP/out" 2>"$TMP/err"; then
  echo "FAIL: --kv-hadamard on an f16 cache accepted"; fail=1
else
  echo "ok: --kv-hadamard on f16 refused: $(head -c 120 "$TMP/err")"
fi

# The completion continues the prompt's text: the model's first token is
# "▁was", so prompt + completion reads "The little dog was a little girl"
# (issue 13). stdout is the completion, then one newline.
dog=$("$TESSERA" generate -m "$MODEL" -p "The little dog" -n 8 --temp 0 2>/dev/null)
case "The little dog$dog" in
  "The little dog was a little girl"*) echo "ok: completion keeps its leading space: '$dog'";;
  *) echo "FAIL: prompt + completion reads: The little dog$dog"; fail=1;;
esac

# A soft prompt (.npy rows prepended to the input embeddings) steers the
# continuation; it is counted in the prompt's tokens; a serve-only
# NAME=FILE and a file of another width are refused with a reason.
python3 - "$TMP/sp.npy" "$TMP/narrow.npy" <<'PY'
import random, struct, sys
def save(path, rows, cols):
    random.seed(rows * cols)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % (rows * cols), *[random.gauss(0, 1) for _ in range(rows * cols)]))
save(sys.argv[1], 4, 64)
save(sys.argv[2], 4, 63)
PY
sp_plain=$("$TESSERA" generate -m "$MODEL" -p "The" -n 24 --temp 0 2>/dev/null)
sp_out=$("$TESSERA" generate -m "$MODEL" -p "The" -n 24 --temp 0 --soft-prompt "$TMP/sp.npy" 2>"$TMP/sp.log")
[ -n "$sp_out" ] && [ "$sp_out" != "$sp_plain" ] && echo "ok: --soft-prompt changes the continuation" ||
  { echo "FAIL: --soft-prompt: '$sp_out' vs '$sp_plain'"; fail=1; }
grep -q "prompt 6 tokens" "$TMP/sp.log" || { echo "FAIL: BOS + 'The' + 4 virtual tokens not counted"; cat "$TMP/sp.log"; fail=1; }
for bad in "x=$TMP/sp.npy:serves a soft prompt by name" "$TMP/narrow.npy:embeddings have 64"; do
  if "$TESSERA" generate -m "$MODEL" -p "The" -n 2 --soft-prompt "${bad%%:*}" >/dev/null 2>"$TMP/bad.log" ||
     ! grep -q "${bad#*:}" "$TMP/bad.log"; then
    echo "FAIL: --soft-prompt ${bad%%:*}: $(cat "$TMP/bad.log")"; fail=1
  fi
done

# A bounded KV cache (docs/KV_POLICIES.md): each policy with --kv-budget 64
# generates 900 tokens; a budget of at least the length is the dense output;
# bad policies are refused with a reason.
for policy in sink h2o spatten recompute; do
  "$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 900 --temp 0 --ignore-eos --kv-policy $policy --kv-budget 64 \
    >/dev/null 2>"$TMP/kv.log" && grep -q "generated 900 tokens" "$TMP/kv.log" &&
    echo "ok: --kv-policy $policy --kv-budget 64 generates past the context" ||
    { echo "FAIL: --kv-policy $policy: $(cat "$TMP/kv.log")"; fail=1; }
done
for policy in window h2o spatten recompute; do
  kv_same=$("$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 --kv-policy $policy --kv-budget 128 2>/dev/null)
  [ "$kv_same" = "$out" ] && echo "ok: --kv-policy $policy with a budget above the length is dense" ||
    { echo "FAIL: $policy 128 differs: $kv_same"; fail=1; }
done
for bad in "--kv-policy h3o --kv-budget 64:is not one of" \
           "--kv-policy sink --kv-budget 4:sink tokens" "--kv-policy h2o --kv-budget 64 --kv-recent 64:recent tokens"; do
  # shellcheck disable=SC2086
  if "$TESSERA" generate -m "$MODEL" -p "The" -n 2 ${bad%%:*} >/dev/null 2>"$TMP/bad.log" ||
     ! grep -q "${bad#*:}" "$TMP/bad.log"; then
    echo "FAIL: ${bad%%:*}: $(cat "$TMP/bad.log")"; fail=1
  fi
done

# Identical whatever the ISA and thread count.
for isa in scalar avx2 avx512; do
  for t in 1 2; do
    if ! o=$(TESSERA_ISA=$isa "$TESSERA" generate -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 -t $t 2>"$TMP/isa.log"); then
      # Only acceptable failure: the CPU lacks the ISA, said in one line.
      grep -q "does not support it" "$TMP/isa.log" || { echo "FAIL: isa $isa: $(cat "$TMP/isa.log")"; fail=1; }
      echo "skip: this CPU lacks $isa"
      break
    fi
    if [ "$o" != "$out" ]; then echo "FAIL: isa $isa threads $t differs: $o"; fail=1; fi
  done
done
echo "ok: same output for every supported ISA and thread count"

# Speculative decoding keeps greedy output: every method on stories1M, the
# draft method with stories260K as the draft model; acceptance and tokens
# per target step are reported on stderr.
M1=${TESSERA_SHARED:-../shared}/models/stories1M/stories1M.gguf
plain=$("$TESSERA" generate -m "$M1" -p "Once upon a time" -n 80 --temp 0 2>/dev/null)
for spec in "ngram" "suffix" "draft --draft-model $MODEL" "layers --draft-layers 2" "layers"; do
  # shellcheck disable=SC2086
  if ! o=$("$TESSERA" generate -m "$M1" -p "Once upon a time" -n 80 --temp 0 --spec $spec 2>"$TMP/spec.log"); then
    echo "FAIL: --spec $spec: $(cat "$TMP/spec.log")"; fail=1; continue
  fi
  [ "$o" = "$plain" ] || { echo "FAIL: --spec $spec changed the greedy output: $o"; fail=1; }
  case "$spec" in
    layers) ;;  # may turn itself off (said on stderr) when no layer set pays
    *) grep -q "tokens per target step" "$TMP/spec.log" || { echo "FAIL: --spec $spec: no acceptance line"; fail=1; };;
  esac
done
echo "ok: --spec ngram, suffix, draft and layers keep the greedy output"
for bad in "--spec draft" "--spec layers --draft-layers 0-4" "--spec ngram --draft-model $MODEL" "--spec medusa"; do
  # shellcheck disable=SC2086
  if "$TESSERA" generate -m "$M1" -p "Hi" -n 4 $bad >/dev/null 2>"$TMP/bad.log"; then
    echo "FAIL: '$bad' was accepted"; fail=1
  elif ! grep -qiE "draft|speculative method|layer" "$TMP/bad.log"; then
    echo "FAIL: '$bad' error does not say why: $(cat "$TMP/bad.log")"; fail=1
  fi
done
echo "ok: bad speculative options are refused with a reason"

# Batch mode: results in input order, and a re-run after an interruption
# (simulated by cutting the output mid-line) only computes what is missing.
for i in 0 1 2 3 4 5; do
  echo "{\"prompt\": \"Once upon a time\", \"max_tokens\": $((4 + i)), \"temperature\": 0, \"id\": \"r$i\"}"
done >"$TMP/in.jsonl"
echo '{"prompt": "The little dog", "max_tokens": 8, "temperature": 0, "id": "dog"}' >"$TMP/dog.jsonl"
"$TESSERA" batch -m "$MODEL" -i "$TMP/dog.jsonl" -o "$TMP/dog.out.jsonl" 2>/dev/null
python3 - "$TMP/dog.out.jsonl" "$dog" <<'PY' || fail=1
import json, sys
row = json.loads(open(sys.argv[1]).readline())
assert row["text"] == sys.argv[2], f"batch text {row['text']!r} differs from generate's {sys.argv[2]!r}"
assert row["text"].startswith(" was"), row["text"]
print("ok: batch gives the same completion text as generate")
PY
"$TESSERA" batch -m "$MODEL" -i "$TMP/in.jsonl" -o "$TMP/out.jsonl" 2>/dev/null
[ "$(wc -l <"$TMP/out.jsonl")" -eq 6 ] || { echo "FAIL: batch wrote $(wc -l <"$TMP/out.jsonl") lines"; fail=1; }
head -c "$(( $(head -n 3 "$TMP/out.jsonl" | wc -c) + 20 ))" "$TMP/out.jsonl" >"$TMP/cut.jsonl"
"$TESSERA" batch -m "$MODEL" -i "$TMP/in.jsonl" -o "$TMP/cut.jsonl" 2>"$TMP/resume.log"
grep -q "3 skipped" "$TMP/resume.log" || { echo "FAIL: resume did not skip 3 done requests"; cat "$TMP/resume.log"; fail=1; }
python3 - "$TMP/cut.jsonl" "$TMP/out.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ref = [json.loads(l) for l in open(sys.argv[2])]
timing = ("latency_s", "time_to_first_token_s")
strip = lambda r: {k: v for k, v in r.items() if k not in timing}
assert [strip(r) for r in rows] == [strip(r) for r in ref], "resumed output differs from an uninterrupted run"
assert [r["index"] for r in rows] == list(range(6)), rows
assert [r["id"] for r in rows] == [f"r{i}" for i in range(6)]
assert all(r["completion_tokens"] == 4 + i for i, r in enumerate(rows)), rows
assert all(r["text"].startswith(", there") for r in rows)
print("ok: batch output in input order, resumed after interruption")
PY

# tessera info: the type mix, and a mixture's share of active parameters
# (64-wide layers of 8 experts of 128, 2 per token: counted from the shapes).
"$TESSERA" make-model --arch mixtral --experts 8 --experts-used 2 --type q8_0 --n-vocab 64 -o "$TMP/moe.gguf" \
  >/dev/null 2>&1
"$TESSERA" info -m "$TMP/moe.gguf" >"$TMP/info.txt"
python3 - "$TMP/info.txt" <<'PY' || fail=1
import re, sys
text = open(sys.argv[1]).read()
layers, embd, ff, experts = 2, 64, 128, 8
expert_params = layers * experts * 3 * embd * ff
q8 = re.search(r"Q8_0 +(\d+) tensors +(\d+) parameters .* 8\.50 bits per weight", text)
assert q8, text
m = re.search(r"experts: ([\d.]+)% of the parameters .* a token uses 2 of 8 per layer: ([\d.e+]+) active", text)
assert m, text
total = float(re.search(r"weights: ([\d.e+]+) parameters", text).group(1))
active = float(m.group(2))
assert abs(active - (total - expert_params + expert_params * 2 / 8)) <= 1e-3 * total, (active, total)
print("ok: info prints the type mix and a mixture's active parameters")
PY
exit $fail
