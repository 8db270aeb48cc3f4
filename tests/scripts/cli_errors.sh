#!/usr/bin/env bash
# The CLI on bad model files: `info`, `logits` and `generate` must exit 1
# with exactly one line on stderr, "error: <what went wrong>", and print
# nothing on stdout — for a missing file, a directory, an empty file, a
# file that is not GGUF, files truncated in the header and in the data, and a
# valid GGUF that holds no model.
#
# usage: tests/scripts/cli_errors.sh BUILD_DIR   (from the repo root)
set -euo pipefail
BUILD=${1:-build}
TESSERA="$BUILD/tessera"
SHARED=${TESSERA_SHARED:-../shared}
MODEL="$SHARED/models/stories260K/stories260K.gguf"
VOCAB="$SHARED/models/vocab/ggml-vocab-llama-spm.gguf"
[ -x "$TESSERA" ] || { echo "no $TESSERA (build it first)"; exit 1; }
for f in "$MODEL" "$VOCAB"; do [ -f "$f" ] || { echo "FAIL: missing shared test data $f"; exit 1; }; done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
checks=0

# expect_error NEEDLE COMMAND...: exit status 1, stdout empty, stderr one
# line "error: ..." containing NEEDLE.
expect_error() {
  local needle=$1 rc=0
  shift
  checks=$((checks + 1))
  "$@" >"$TMP/stdout" 2>"$TMP/stderr" || rc=$?
  local why=""
  if [ "$rc" -ne 1 ]; then why="exit status $rc, expected 1"
  elif [ -s "$TMP/stdout" ]; then why="printed on stdout: $(head -c 200 "$TMP/stdout")"
  elif [ "$(wc -l <"$TMP/stderr")" -ne 1 ]; then why="stderr has $(wc -l <"$TMP/stderr") lines, expected 1"
  elif ! grep -q '^error: ' "$TMP/stderr"; then why="stderr does not start with 'error: '"
  elif ! grep -qF -- "$needle" "$TMP/stderr"; then why="stderr lacks '$needle'"
  fi
  if [ -n "$why" ]; then
    echo "FAIL: $* -> $why"
    sed 's/^/    stderr: /' "$TMP/stderr" | head -5
    failures=$((failures + 1))
  fi
}

size=$(stat -c %s "$MODEL")
mkdir "$TMP/dir.gguf"
: >"$TMP/empty.gguf"
printf 'GGUG\003\000\000\000' >"$TMP/magic.gguf"
cat "$MODEL" >"$TMP/magic2.gguf"
printf 'XXXX' | dd of="$TMP/magic2.gguf" bs=1 seek=0 conv=notrunc status=none
head -c 5000 "$MODEL" >"$TMP/cut-header.gguf"
head -c $((size - 100)) "$MODEL" >"$TMP/cut-data.gguf"

#        file                 what the message must say
cases=(
  "$TMP/missing.gguf"    "cannot open '$TMP/missing.gguf': No such file or directory"
  "$TMP/dir.gguf"        "neither a GGUF file nor a Hugging Face model folder"
  "$TMP/empty.gguf"      "truncated reading magic at offset 0"
  "$TMP/magic.gguf"      "not a GGUF file"
  "$TMP/magic2.gguf"     "not a GGUF file"
  "$TMP/cut-header.gguf" "truncated reading"
  "$TMP/cut-data.gguf"   "extends past the end of the file"
)
for ((i = 0; i < ${#cases[@]}; i += 2)); do
  file=${cases[i]} needle=${cases[i + 1]}
  expect_error "$needle" "$TESSERA" info -m "$file"
  expect_error "$needle" "$TESSERA" logits -m "$file" --tokens 1,2,3
  expect_error "$needle" "$TESSERA" generate -m "$file" -p "Once upon a time" -n 4
done

# A valid GGUF that is a vocabulary, not a model: info works, the others
# name what is missing.
"$TESSERA" info -m "$VOCAB" >/dev/null || { echo "FAIL: info on $VOCAB"; failures=$((failures + 1)); }
expect_error "missing" "$TESSERA" logits -m "$VOCAB" --tokens 1
expect_error "missing" "$TESSERA" generate -m "$VOCAB" -p "hi" -n 1

# Bad arguments on a good model.
expect_error "bad token id 'x'" "$TESSERA" logits -m "$MODEL" --tokens 1,x
expect_error "token id 512 out of range (vocabulary 512)" "$TESSERA" logits -m "$MODEL" --tokens 1,512

# Fine-tuning's bad data: an empty file, a missing one, QLoRA over an
# unquantized base.
: >"$TMP/empty.txt"
expect_error "fewer than one window" "$TESSERA" finetune -m "$MODEL" --data "$TMP/empty.txt" -o "$TMP/a.gguf"
expect_error "cannot open" "$TESSERA" finetune -m "$MODEL" --data "$TMP/none.txt" -o "$TMP/a.gguf"
printf 'Once upon a time there was a ball. %.0s' $(seq 40) >"$TMP/short.txt"
expect_error "is not quantized" "$TESSERA" finetune -m "$MODEL" --data "$TMP/short.txt" -o "$TMP/a.gguf" --method qlora -c 16

# And the good model works, so none of the above passed by accident.
"$TESSERA" info -m "$MODEL" >/dev/null || { echo "FAIL: info on the real model"; failures=$((failures + 1)); }
"$TESSERA" logits -m "$MODEL" --tokens 1,2,3 >/dev/null || { echo "FAIL: logits on the real model"; failures=$((failures + 1)); }

if [ "$failures" -ne 0 ]; then
  echo "cli_errors: $failures of $checks checks failed"
  exit 1
fi
echo "cli_errors: $checks checks passed"
