// llama.cpp's perplexity (node-llama-cpp, bench/peer) over the chunks tessera
// perplexity scores (each chunk of CTX tokens from an empty cache, its first
// token replaced by BOS, positions CTX/2 .. CTX-2 scored), with an optional
// LoRA adapter. Prints {"ppl", "scored", "chunks"}. Recorded in
// tests/reference/llamacpp_lora_q4_0.json.
//
//   node bench/llamacpp_ppl.mjs MODEL TOKENS.txt (comma-separated ids, BOS first) CTX BOS [LORA]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";
const [model_path, tokens_path, ctx_s, bos_s, lora] = process.argv.slice(2);
const ctx = Number(ctx_s), bos = Number(bos_s);
const tokens = readFileSync(tokens_path, "utf8").trim().replace(/[\[\]\s]/g, "").split(",").map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path});
const context = await model.createContext({contextSize: ctx, batchSize: ctx, threads: 2, sequences: 1,
  ...(lora ? {lora: {adapters: [{filePath: lora, scale: 1}]}} : {})});
const seq = context.getSequence();
const n_chunks = Math.floor(tokens.length / ctx);
let nll = 0, n = 0;
for (let c = 0; c < n_chunks; ++c) {
  const chunk = tokens.slice(c * ctx, (c + 1) * ctx);
  chunk[0] = bos;
  await seq.clearHistory();
  const input = chunk.map((t, j) => (j >= ctx / 2 && j < ctx - 1 ? [t, {generateNext: {probabilities: true}}] : t));
  const res = await seq.controlledEvaluate(input);
  for (let j = ctx / 2; j < ctx - 1; ++j) {
    const p = res[j].next.probabilities.get(chunk[j + 1]);
    nll -= Math.log(p); ++n;
  }
}
console.log(JSON.stringify({ppl: Math.exp(nll / n), scored: n, chunks: n_chunks}));
