#!/usr/bin/env bash
# `tessera tokenize` end to end: ids as one JSON array on stdout, --bos,
# --pieces, --tokenizer-json, and errors as "error: ..." with exit status 1.
# Expected ids come from the shared reference files, not from tessera.
set -euo pipefail
build="${1:-build}"
bin="$build/tessera"
stories=../shared/models/stories260K/stories260K.gguf
golden=../shared/models/stories260K/stories260K_greedy256_expected.json
failures=0

check() {  # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected '$2', got '$3'"
    failures=$((failures + 1))
  fi
}

# llama.cpp's ids for the golden sentence (no BOS); its first four words are
# "Once upon a time".
ref=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['llamacpp_tokenize_check']['ids_no_bos'])" "$golden" | tr -d ' ')
first4=$(echo "$ref" | cut -d, -f1-4)"]"
check "stories260K ids" "$first4" "$("$bin" tokenize -m "$stories" -p "Once upon a time")"
check "stories260K --bos" "[1,${first4#[}" "$("$bin" tokenize -m "$stories" -p "Once upon a time" --bos)"
check "stories260K --pieces" '[" Once"," upon"," a"," time"]' \
  "$("$bin" tokenize -m "$stories" -p "Once upon a time" --pieces | sed -n 2p)"

# Qwen3's tokenizer.json against the qwen2 reference line for "Hello world"
# (the 12th test string).
qwen_ref="[$(sed -n 12p ../shared/models/vocab/ggml-vocab-qwen2.gguf.out | sed 's/^ //; s/ /,/g')]"
check "qwen3 tokenizer.json" "$qwen_ref" \
  "$("$bin" tokenize --tokenizer-json ../shared/models/tokenizers/qwen3/tokenizer.json -p "Hello world")"

# Errors: message on stderr, exit status 1.
set +e
err=$("$bin" tokenize -m /nonexistent.gguf -p x 2>&1 >/dev/null); rc=$?
set -e
check "missing file exit status" 1 "$rc"
check "missing file message" "error:" "${err:0:6}"
set +e
err=$("$bin" tokenize -p x 2>&1 >/dev/null); rc=$?
set -e
check "no model exit status" 1 "$rc"
check "no model message" "error:" "${err:0:6}"

echo "$(( 8 - failures )) passed, $failures failed"
[ "$failures" -eq 0 ]
