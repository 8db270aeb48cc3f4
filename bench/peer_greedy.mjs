// Greedy tokens of the llama.cpp peer (node-llama-cpp, installed by
// bench/setup_peer) for a prompt of token ids, with an F32 KV cache, and at
// each of them the 8 most likely tokens with their logit minus the top one's.
// Prints {"peer": ..., "version": ..., "tokens": [...], "logit_diffs":
// [[[token, diff], ...], ...]} on stdout. Used to record
// tests/reference/llamacpp_greedy.json (tests/scripts/llamacpp_greedy.sh).
//
//   node bench/peer_greedy.mjs --model F --tokens 1,2,3 --n 24 [--lora ADAPTER [--lora-scale S]]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const a = {n: "24"};
for (let i = 2; i < process.argv.length; i += 2) a[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const prompt = a.tokens.split(",").map(Number);
const n = Number(a.n);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: a.model});
const ctx = await model.createContext({contextSize: prompt.length + n + 16, threads: 2, sequences: 1,
                                       experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
                                       ...(a.lora ? {lora: {adapters: [{filePath: a.lora, scale: Number(a["lora-scale"] ?? 1)}]}} : {})});
const seq = ctx.getSequence();
const tokens = [];
for await (const t of seq.evaluate(prompt, {temperature: 0})) {
  tokens.push(t);
  if (tokens.length >= n) break;
}
// Then the same prompt + tokens again, asking for the next-token
// distribution (temperature 1, no truncation) at each generated position:
// the differences of log probabilities to the top token are llama.cpp's logit
// differences.
await seq.clearHistory();
const all = [...prompt, ...tokens];
const opts = {temperature: 1, topK: 0, topP: 1, minP: 0};
const input = all.map((t, i) => i >= prompt.length - 1 && i < all.length - 1
  ? [t, {generateNext: {probabilities: true, options: opts}}] : t);
const res = await seq.controlledEvaluate(input);
const logit_diffs = [];
for (let i = prompt.length - 1; i < all.length - 1; ++i) {
  const probs = res[i].next.probabilities;
  const top = [...probs.entries()].slice(0, 8);
  const l0 = Math.log(top[0][1]);
  logit_diffs.push(top.map(([t, p]) => [t, Math.log(p) - l0]));
}
const version = JSON.parse(readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url))).version;
console.log(JSON.stringify({peer: "node-llama-cpp", version, llama_cpp: llama.llamaCppRelease?.release ?? null, tokens, logit_diffs}));
