// transformers.js (@lenml/tokenizers) reference for tests/scripts/hf_tokenizers.sh:
//   node reference.mjs tokenize NAME TEXTS.json   one {"ids", "ids_special", "decoded"} line per text
//   node reference.mjs files NAME                 prints the folder holding NAME's tokenizer.json / tokenizer_config.json
// NAME is llama3, gemma3 or qwen3 (@lenml/tokenizer-NAME, the real files of
// those models). "ids" is encode(text, {add_special_tokens: false}),
// "ids_special" the same with add_special_tokens: true (the post-processor's
// BOS/EOS), "decoded" decode(ids) keeping special tokens and without
// clean_up_tokenization_spaces. Added tokens written in the text (special or
// not) are always matched, as transformers.js and Hugging Face do.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";

const require = createRequire(import.meta.url);
const [mode, name, textsFile] = process.argv.slice(2);
const pkg = `@lenml/tokenizer-${name}`;
const dir = path.dirname(require.resolve(`${pkg}/models/tokenizer.json`));
if (mode === "files") {
  console.log(dir);
  process.exit(0);
}
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
for (const text of JSON.parse(readFileSync(textsFile, "utf8"))) {
  const ids = tokenizer.encode(text, { add_special_tokens: false });
  const ids_special = tokenizer.encode(text, { add_special_tokens: true });
  const decoded = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  console.log(JSON.stringify({ ids, ids_special, decoded }));
}
