#!/usr/bin/env bash
# GPT-4o's pre-tokenizer (tokenizer.ggml.pre "gpt-4o": gpt-oss, Llama 4)
# against llama.cpp's. No GPT-4o vocabulary ships in ../shared, so the GPT-2
# byte-level BPE vocabulary is given the gpt-4o pre-tokenizer (its
# tokenizer.ggml.pre rewritten): the ids then depend on where the regex cuts
# the text, which is what is tested. llama.cpp (node-llama-cpp) tokenizes
# llama.cpp's own GPT-2 test texts and texts aimed at the regex (case runs,
# contractions, digit triples, '/' after punctuation, newlines, accents),
# recorded in tests/reference/llamacpp_gpt4o.json (checked live when the
# peer is installed). The same texts through GPT-2's regex must differ on
# many of them, or the test could not tell the two apart.
#
# Tessera runs the regex of o200k's tokenizer.json; llama.cpp runs its own
# approximation ("a letter not in a-z" for the upper-case-like classes). The
# two agree on every text here; texts where they would not are listed in
# docs/MODELS.md if found.
#
# usage: tests/scripts/llamacpp_gpt4o.sh BUILD_DIR [--record]
set -euo pipefail
BUILD=${1:-build}
MODE=${2:-check}
TESSERA="$BUILD/tessera"
PY=/usr/bin/python3
DATA=tests/reference/llamacpp_gpt4o.json
SRC=${TESSERA_SHARED:-../shared}/models/vocab/ggml-vocab-gpt-2.gguf
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
[ -f "$SRC" ] || { echo "FAIL: missing shared test data $SRC"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The vocabulary with tokenizer.ggml.pre = "gpt-4o" (a vocabulary-only GGUF
# has no tensor data: the header is rewritten with the longer string).
"$PY" - "$SRC" "$TMP/gpt4o.gguf" <<'PYEOF'
import struct, sys
src, dst = sys.argv[1:3]
b = open(src, "rb").read()
key = b"tokenizer.ggml.pre"
at = b.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
vtype, n = struct.unpack_from("<IQ", b, at)
assert vtype == 8, vtype  # a string
old = b[at + 12: at + 12 + n]
assert struct.unpack_from("<Q", b, 8)[0] == 0, "the vocabulary file holds tensors"
new = b"gpt-4o"
open(dst, "wb").write(b[:at + 4] + struct.pack("<Q", len(new)) + new + b[at + 12 + n:])
print(f"pre-tokenizer {old.decode()} -> {new.decode()}")
PYEOF

"$PY" - "$SRC.inp" "$TMP/texts.json" <<'PYEOF'
import json, sys
texts = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")
texts = [t for t in texts if t]
texts += ["HELLO World", "CamelCaseWords and mixedCASE", "it's They'RE we'VE I'M you'll he'd DON'T",
          "123456789 12 1234", "path/to/file\n", "a//b?!/\n/", "ÉCOLE été Ångström", "naïve café résumé",
          "word's  two  spaces\n\n\nnewlines", "tab\tand\r\nwindows", "McDonald's iPhone eBay",
          "ΑΒΓ αβγ ДОМ дом", "x1y2 3z", "  leading and trailing  ", "don’t ‘curly’"]
json.dump(texts, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PYEOF

"$TESSERA" tokenize -m "$TMP/gpt4o.gguf" --texts "$TMP/texts.json" >"$TMP/tessera.jsonl" 2>/dev/null
"$TESSERA" tokenize -m "$SRC" --texts "$TMP/texts.json" >"$TMP/gpt2.jsonl" 2>/dev/null

have_peer=no
[ -d bench/node_modules/node-llama-cpp ] && have_peer=yes
if [ "$have_peer" = yes ]; then
  node bench/peer_tokenize.mjs --model "$TMP/gpt4o.gguf" --texts "$TMP/texts.json" >"$TMP/peer.jsonl"
  VERSION=$(node -e 'console.log(JSON.parse(require("fs").readFileSync("bench/node_modules/node-llama-cpp/package.json")).version)')
  "$PY" - "$TMP/texts.json" "$TMP/peer.jsonl" "$VERSION" "$TMP/live.json" <<'PYEOF'
import json, sys
texts = json.load(open(sys.argv[1], encoding="utf-8"))
ids = [json.loads(l)["ids"] for l in open(sys.argv[2], encoding="utf-8") if l.strip()]
doc = {"what": "llama.cpp's ids (node-llama-cpp, no BOS, special texts as text) for each text with the GPT-2 "
               "vocabulary of ../shared/models/vocab/ggml-vocab-gpt-2.gguf given tokenizer.ggml.pre gpt-4o; "
               "recorded by tests/scripts/llamacpp_gpt4o.sh --record",
       "peer": "node-llama-cpp", "version": sys.argv[3],
       "tokenized": [{"text": t, "ids": i} for t, i in zip(texts, ids)]}
json.dump(doc, open(sys.argv[4], "w", encoding="utf-8"), ensure_ascii=False)
PYEOF
  if [ "$MODE" = --record ]; then
    "$PY" -c '
import json, sys
doc = json.load(open(sys.argv[1], encoding="utf-8"))
d = json.dumps
lines = ["{"] + [" %s: %s," % (d(k), d(v)) for k, v in doc.items() if k != "tokenized"] + [" %s: [" % d("tokenized")]
rows = doc["tokenized"]
lines += ["  " + d(r, ensure_ascii=False) + ("," if i + 1 < len(rows) else "") for i, r in enumerate(rows)]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines + [" ]", "}"]) + "\n")
' "$TMP/live.json" "$DATA"
    echo "wrote $DATA"
    exit 0
  fi
  REF="$TMP/live.json"
else
  [ "$MODE" != --record ] || { echo "FAIL: --record needs node-llama-cpp (bench/setup_peer)"; exit 1; }
  REF="$DATA"
  echo "node-llama-cpp is not installed: checking against its ids recorded in $DATA"
fi

"$PY" - "$REF" "$TMP/texts.json" "$TMP/tessera.jsonl" "$TMP/gpt2.jsonl" <<'PYEOF'
import json, sys
ref = {r["text"]: r["ids"] for r in json.load(open(sys.argv[1], encoding="utf-8"))["tokenized"]}
texts = json.load(open(sys.argv[2], encoding="utf-8"))
mine = [json.loads(l)["ids"] for l in open(sys.argv[3], encoding="utf-8") if l.strip()]
gpt2 = [json.loads(l)["ids"] for l in open(sys.argv[4], encoding="utf-8") if l.strip()]
assert len(mine) == len(texts) == len(gpt2)
checked = [(t, m, g) for t, m, g in zip(texts, mine, gpt2) if t in ref]
bad = [(t, m) for t, m, _ in checked if m != ref[t]]
for t, m in bad[:5]:
    print(f"FAIL gpt-4o: {t!r}: tessera {m}, llama.cpp {ref[t]}")
differ = sum(m != g for _, m, g in checked)
if bad or len(checked) < 40:
    print(f"FAIL gpt-4o: {len(bad)} of {len(checked)} texts tokenized differently from llama.cpp")
    sys.exit(1)
if differ < 10:
    print(f"FAIL gpt-4o: only {differ} texts split differently from GPT-2's regex: the test cannot tell them apart")
    sys.exit(1)
print(f"ok: llama.cpp tokenizes {len(checked)} texts with the gpt-4o pre-tokenizer as tessera does "
      f"({differ} of them differently from GPT-2's)")
PYEOF
