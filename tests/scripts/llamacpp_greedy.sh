#!/usr/bin/env bash
# Greedy tokens of random-weight models of each architecture (make-model's
# llama.cpp layouts: llama3's rope_freqs.weight, qwen3's q/k norms, YaRN,
# mistral's sliding_window key, gemma2 / gemma3 / phi3, the mixtral / qwen2moe
# / qwen3moe / gpt-oss mixtures) against llama.cpp's, recorded with the peer
# (node-llama-cpp, bench/setup_peer; version in the data file) in
# tests/reference/llamacpp_greedy.json. make-model is deterministic, so the
# recorded tokens stay valid; the engine is teacher-forced on prompt + the
# peer's tokens and its argmax must reproduce each of the peer's tokens.
# On the F32 models, the peer's 8 most likely tokens at each step must also
# have the engine's logit differences to the top token within 1e-3. That
# bound is measured, not derived: the peer differs from the engine (and from
# the float64 numpy reference, which the engine matches to ~1e-7 here) by up
# to 1.2e-4 on the llama, qwen2 and mistral models and 2.9e-4 on qwen3 (its
# own f32 arithmetic; logit std ~0.16), while leaving out llama3's
# rope_freqs or YaRN moves these differences by 3e-3 and 4e-3 (greedy tokens
# alone barely notice them). F16 and BF16 models get the token check only
# (ggml rounds activations to the weight type). Quantized models (Q8_0,
# Q4_0 and issue 35's types) differ from the peer by up to 2.6e-2 in these
# logit differences (measured: Q8_0 1.3e-2, whose weights are nearly exact,
# so this is the two engines' int8 activations rounding differently, larger
# for the types with 256-value activation blocks): they are checked within
# 3e-2, and a greedy token may differ only where the peer's own gap to the
# engine's token is within that bound (a near tie, counted and printed).
# mistral-f32 keeps the default window of 4096, longer than the sequence:
# llama.cpp reads no window for llama files (docs/ARCHITECTURE.md, Models). The gemma2 / gemma3 / phi3
# F32 models are within 3.7e-4 (llama.cpp's GELU is an f16 table lookup).
#
# usage: tests/scripts/llamacpp_greedy.sh BUILD_DIR            (check)
#        tests/scripts/llamacpp_greedy.sh BUILD_DIR --record   (needs the peer)
set -euo pipefail
BUILD=${1:-build}
MODE=${2:-check}
TESSERA="$BUILD/tessera"
PY=/usr/bin/python3
DATA=tests/reference/llamacpp_greedy.json
VOCAB=${TESSERA_SHARED:-../shared}/models/vocab/ggml-vocab-llama-spm.gguf
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
[ -f "$VOCAB" ] || { echo "FAIL: missing shared test data $VOCAB"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PROMPT=1,17,200,33,5,99,150,7,300,42
N=24
failures=0
records=()

# Which logit bound a model's weight type gets: f32 (1e-3, above), none
# (f16, bf16: tokens only), quantized (3e-2, with near ties allowed: below).
kind_of() {
  case "$1" in
    *" --type f32 "*) echo f32 ;;
    *" --type f16 "* | *" --type bf16 "*) echo float16 ;;
    *) echo quantized ;;
  esac
}

# model LABEL MAKE-MODEL-ARGS...   (QUANTIZE=TYPE: then tessera quantize to TYPE)
QUANTIZE=""
model() {
  local label=$1
  shift
  "$TESSERA" make-model -o "$TMP/$label.gguf" --vocab-from "$VOCAB" -t 2 "$@" >/dev/null 2>&1 ||
    { echo "FAIL $label: make-model $*"; failures=$((failures + 1)); return; }
  if [ -n "$QUANTIZE" ]; then  # the F32 file rewritten by tessera quantize (round to nearest)
    mv "$TMP/$label.gguf" "$TMP/$label-f32.gguf"
    "$TESSERA" quantize -m "$TMP/$label-f32.gguf" -o "$TMP/$label.gguf" --type "$QUANTIZE" --method rtn -t 2 >/dev/null 2>&1 ||
      { echo "FAIL $label: quantize --type $QUANTIZE"; failures=$((failures + 1)); return; }
    set -- "$@" "(then quantize --type $QUANTIZE --method rtn)"
  fi
  if [ "$MODE" = --record ]; then
    local out
    out=$(node bench/peer_greedy.mjs --model "$TMP/$label.gguf" --tokens "$PROMPT" --n "$N")
    records+=("$("$PY" -c 'import json,sys; d=json.loads(sys.argv[3]); d["label"]=sys.argv[1]; d["make_model"]=sys.argv[2]; print(json.dumps(d))' "$label" "$*" "$out")")
    echo "recorded $label"
    return
  fi
  local want
  want=$("$PY" -c 'import json,sys; m=[r for r in json.load(open(sys.argv[1]))["models"] if r["label"]==sys.argv[2]]; print(",".join(map(str, m[0]["tokens"])) if m else "")' "$DATA" "$label")
  [ -n "$want" ] || { echo "FAIL $label: no recorded tokens in $DATA"; failures=$((failures + 1)); return; }
  "$TESSERA" logits -m "$TMP/$label.gguf" --tokens "$PROMPT,$want" -t 2 -o "$TMP/$label.f32" 2>/dev/null
  if ! "$PY" -c '
import json, sys
import numpy as np
data, label, logits_path, kind = sys.argv[1:5]
doc = json.load(open(data))
rec = [r for r in doc["models"] if r["label"] == label][0]
p, want = len(doc["prompt"]), rec["tokens"]
logits = np.fromfile(logits_path, dtype="<f4").reshape(p + len(want), -1).astype(np.float64)
pred = logits.argmax(axis=1)[p - 1:p - 1 + len(want)]
bound = {"f32": 1e-3, "quantized": 3e-2}.get(kind)
flips = []
for i, (a, b) in enumerate(zip(pred, want)):
    if a == b:
        continue
    # Quantized weights: a flip is a near tie if the token of the engine is
    # among the 8 of the peer and the logit bound below holds (then the gap
    # of the peer to it is under the bound).
    if kind == "quantized" and a in [t for t, _ in rec["logit_diffs"][i]]:
        flips.append(i)
        continue
    print(f"FAIL {label}: greedy token {i} is {a}, llama.cpp gave {b}")
    sys.exit(1)
worst = 0.0
for k, row in enumerate(rec["logit_diffs"]):
    z, top = logits[p - 1 + k], row[0][0]
    worst = max(worst, max(abs((z[t] - z[top]) - d) for t, d in row))
if bound is not None and worst > bound:
    print(f"FAIL {label}: logit differences to the top token differ from llama.cpp by {worst:.2e} > {bound:.0e}")
    sys.exit(1)
ties = f" ({len(flips)} near ties at steps {flips})" if flips else ""
print(f"ok {label}: {len(want) - len(flips)} of {len(want)} greedy tokens equal those of llama.cpp{ties}; logit differences within {worst:.1e}")
' "$DATA" "$label" "$TMP/$label.f32" "$(if [ -n "$QUANTIZE" ]; then echo quantized; else kind_of " $* "; fi)"; then
    failures=$((failures + 1))
  fi
}

model llama-f32          --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --type f32 --seed 31
model qwen2-f32          --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch qwen2 --type f32 --seed 32
model llama3-f32-gqa2    --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch llama3 --rope-scaling-factor 64 --rope-orig-ctx 8 --type f32 --seed 33
model llama3-f16-hd64    --dim 128 --layers 2 --heads 4 --kv-heads 1 --head-dim 64 --ff 256 --arch llama3 --rope-orig-ctx 16 --type f16 --tied --seed 34
model llama-yarn-f32     --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --rope-scaling yarn --rope-scaling-factor 8 --rope-orig-ctx 16 --type f32 --seed 35
model qwen3-f32-hd32     --dim 64  --layers 2 --heads 8 --kv-heads 2 --head-dim 32 --ff 128 --arch qwen3 --type f32 --seed 36
model qwen3-bf16-tied    --dim 64  --layers 3 --heads 4 --kv-heads 4 --ff 160 --arch qwen3 --type bf16 --tied --seed 37
model mistral-f32        --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch mistral --type f32 --seed 38
# Gemma 2: windows of 8 on the even layers (shorter than the 34 tokens),
# caps that bite at this scale on the F32 model, Gemma 2's defaults on the
# F16 one; Gemma 3: 5 local (window 8, base 10000) : 1 global layers, linear
# scaling on the global ones; Phi-3: fused matrices, LongRoPE with an
# original context longer than the sequence (llama.cpp, with a short context,
# and Tessera, at positions before it, both use the short factors; the
# attn_factor applies), no window (llama.cpp ignores Phi-3's).
model gemma2-f32-w8-caps --dim 64  --layers 3 --heads 4 --kv-heads 2 --ff 128 --arch gemma2 --sliding-window 8 --attn-softcap 0.05 --final-softcap 0.2 --type f32 --seed 39
model gemma2-f16-hd32    --dim 64  --layers 2 --heads 8 --kv-heads 2 --head-dim 32 --ff 160 --arch gemma2 --type f16 --seed 40
model gemma3-f32-w8      --dim 64  --layers 7 --heads 4 --kv-heads 2 --ff 128 --arch gemma3 --sliding-window 8 --type f32 --seed 41
model gemma3-bf16-linear --dim 64  --layers 6 --heads 4 --kv-heads 1 --head-dim 32 --ff 128 --arch gemma3 --sliding-window 16 --rope-scaling linear --rope-scaling-factor 8 --type bf16 --tied --seed 42
model phi3-f32           --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch phi3 --type f32 --seed 43
model phi3-f32-longrope  --dim 96  --layers 2 --heads 3 --kv-heads 3 --ff 192 --arch phi3 --rope-scaling longrope --ctx 4096 --rope-orig-ctx 2048 --type f32 --seed 44
# Mixtures of experts: Mixtral (a llama file with llama.expert_count),
# Qwen2-MoE with its shared expert, Qwen3-MoE; k = 1, 2 and 4.
model mixtral-f32-k2     --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch mixtral --experts 8 --experts-used 2 --type f32 --seed 45
model qwen2moe-f32-k4    --dim 64  --layers 2 --heads 4 --kv-heads 2 --ff 128 --arch qwen2moe --experts 8 --experts-used 4 --ff-exp 64 --ff-shexp 96 --type f32 --seed 46
model qwen3moe-f32-k1    --dim 64  --layers 2 --heads 4 --kv-heads 2 --head-dim 32 --ff 128 --arch qwen3moe --experts 4 --experts-used 1 --ff-exp 64 --type f32 --seed 47
# gpt-oss: sinks, biases, a window on even layers (short here, so that it
# cuts), clamped SwiGLU, top-k by logit with a softmax over the k; YaRN as
# the released files have it; MXFP4 matrices as its experts are released.
model gpt-oss-f32-k2     --dim 64  --layers 4 --heads 4 --kv-heads 2 --ff 128 --arch gpt-oss --experts 8 --experts-used 2 --ff-exp 64 --sliding-window 4 --type f32 --seed 60
model gpt-oss-f32-yarn-k4 --dim 64 --layers 3 --heads 8 --kv-heads 2 --head-dim 16 --ff 128 --arch gpt-oss --experts 16 --experts-used 4 --ff-exp 96 --sliding-window 8 --rope-scaling yarn --rope-scaling-factor 32 --rope-orig-ctx 64 --type f32 --seed 61
model gpt-oss-mxfp4-k2   --dim 128 --layers 2 --heads 4 --kv-heads 1 --ff 128 --arch gpt-oss --experts 8 --experts-used 2 --ff-exp 128 --sliding-window 6 --type mxfp4 --seed 62
# Every other type llama-quantize writes that Tessera reads and writes
# (issue 35): the matrices in the type (llama.cpp reads Tessera's blocks as
# its own), the token embedding too (make-model writes one type).
model llama-q8_0         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q8_0 --seed 57
model llama-q4_0         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q4_0 --seed 58
model llama-q4_1         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q4_1 --seed 48
model llama-q5_0         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q5_0 --seed 49
model llama-q5_1         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q5_1 --seed 50
model llama-iq4_nl       --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type iq4_nl --seed 51
model llama-mxfp4        --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type mxfp4 --seed 52
model llama-q2_k         --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type q2_k --seed 53
model llama-iq4_xs       --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type iq4_xs --seed 54
model llama-tq1_0        --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type tq1_0 --seed 55
model llama-tq2_0        --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type tq2_0 --seed 56
# The super-block types tessera quantize writes on its grids (rtn here):
# an F32 file rewritten (token_embd and output too).
QUANTIZE=q2_k model llama-q2_k-quantized --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type f32 --seed 67
QUANTIZE=q3_k model llama-q3_k-quantized --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type f32 --seed 63
QUANTIZE=q4_k model llama-q4_k-quantized --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type f32 --seed 64
QUANTIZE=q5_k model llama-q5_k-quantized --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type f32 --seed 65
QUANTIZE=q6_k model llama-q6_k-quantized --dim 256 --layers 2 --heads 4 --kv-heads 2 --ff 512 --type f32 --seed 66

if [ "$MODE" = --record ]; then
  printf '%s\n' "${records[@]}" | "$PY" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
doc = {"what": "greedy tokens of llama.cpp (through node-llama-cpp, F32 KV cache) after the prompt, per make-model file, "
               "and at each step the 8 most likely tokens with their logit minus the top one; "
               "recorded by tests/scripts/llamacpp_greedy.sh --record",
       "peer": rows[0]["peer"], "version": rows[0]["version"], "llama_cpp_release": rows[0]["llama_cpp"],
       "vocab": "ggml-vocab-llama-spm.gguf", "prompt": [int(t) for t in sys.argv[1].split(",")],
       "models": [{"label": r["label"], "make_model": r["make_model"], "tokens": r["tokens"],
                   "logit_diffs": [[[t, round(d, 7)] for t, d in row] for row in r["logit_diffs"]]} for r in rows]}
# One line per step of a model: reviewable, and small in a diff.
dump = json.dumps
lines = ["{"] + [" %s: %s," % (dump(k), dump(v)) for k, v in doc.items() if k != "models"] + [" %s: [" % dump("models")]
for i, m in enumerate(doc["models"]):
    rows = m["logit_diffs"]
    lines.append("  {%s: %s, %s: %s," % (dump("label"), dump(m["label"]), dump("make_model"), dump(m["make_model"])))
    lines.append("   %s: %s," % (dump("tokens"), dump(m["tokens"])))
    lines.append("   %s: [" % dump("logit_diffs"))
    lines += ["    " + dump(r) + ("," if j + 1 < len(rows) else "") for j, r in enumerate(rows)]
    lines.append("   ]}" + ("," if i + 1 < len(doc["models"]) else ""))
open(sys.argv[2], "w").write("\n".join(lines + [" ]", "}"]) + "\n")
' "$PROMPT" "$DATA"
  echo "wrote $DATA"
  exit 0
fi
if [ "$failures" -ne 0 ]; then
  echo "llamacpp_greedy: $failures failure(s)"
  exit 1
fi
echo "llamacpp_greedy: every model agrees with llama.cpp (greedy tokens, near ties of quantized models aside; logit bounds)"
