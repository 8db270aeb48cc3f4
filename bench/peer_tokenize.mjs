// Token ids of the llama.cpp peer (node-llama-cpp, installed by
// bench/setup_peer) for each text of a JSON array, from a GGUF's vocabulary
// alone: {"ids": [...], "ids_special": [...]} per text and line, "ids" with
// special-token texts left as text, "ids_special" with them parsed (no BOS
// in either). Used by tests/scripts/llamacpp_convert.sh.
//
//   node bench/peer_tokenize.mjs --model F --texts TEXTS.json
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const a = {};
for (let i = 2; i < process.argv.length; i += 2) a[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: a.model, vocabOnly: true});
for (const text of JSON.parse(readFileSync(a.texts, "utf8"))) {
  console.log(JSON.stringify({ids: model.tokenize(text, false), ids_special: model.tokenize(text, true)}));
}
await model.dispose();
