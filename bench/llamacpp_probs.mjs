// Next-token probabilities from llama.cpp (node-llama-cpp, bench/peer) over
// the chunks tessera perplexity scores: for each chunk of CTX tokens (first
// replaced by BOS, evaluated from an empty cache), the full distribution at
// positions CTX/2 .. CTX-2. Writes f32 [rows, n_vocab] to OUT, for
// bench/llamacpp_kl.py. The quantization table of docs/BENCHMARKS.md uses it
// for llama.cpp's K-quant files, whose fallback types (Q5_0, Q5_1) Tessera
// cannot load.
//
//   node bench/llamacpp_probs.mjs MODEL TOKENS.txt (comma-separated ids, BOS first) CTX BOS OUT [THREADS]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync, writeFileSync} from "node:fs";

const [model_path, tokens_path, ctx_s, bos_s, out, threads_s] = process.argv.slice(2);
const ctx = Number(ctx_s), bos = Number(bos_s), threads = Number(threads_s ?? 2);
const tokens = readFileSync(tokens_path, "utf8").trim().replace(/[\[\]\s]/g, "").split(",").map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path});
const V = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
const context = await model.createContext({contextSize: ctx, batchSize: ctx, threads, sequences: 1});
const seq = context.getSequence();
const n_chunks = Math.floor(tokens.length / ctx);
const rows = [];
for (let c = 0; c < n_chunks; ++c) {
  const chunk = tokens.slice(c * ctx, (c + 1) * ctx);
  chunk[0] = bos;
  await seq.clearHistory();
  const input = chunk.map((t, j) => (j >= ctx / 2 && j < ctx - 1 ? [t, {generateNext: {probabilities: true}}] : t));
  const res = await seq.controlledEvaluate(input);
  for (let j = ctx / 2; j < ctx - 1; ++j) {
    const row = new Float32Array(V);
    for (const [tok, p] of res[j].next.probabilities) row[tok] = p;
    rows.push(row);
  }
}
const buf = new Float32Array(rows.length * V);
rows.forEach((r, i) => buf.set(r, i * V));
writeFileSync(out, Buffer.from(buf.buffer));
console.log(JSON.stringify({model: model_path, rows: rows.length, n_vocab: V, chunks: n_chunks}));
