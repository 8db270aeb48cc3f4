// The llama.cpp peer, driven through node-llama-cpp (bench/peer/node_modules,
// installed by bench/setup_peer). Prints one JSON object on stdout.
//
//   node bench/peer.mjs bench      --model F --threads T --pp 128,512 --tg 64 --reps 3
//   node bench/peer.mjs throughput --model F --threads T --workload W.json --sequences S
//   node bench/peer.mjs prefix     --model F --threads T --workload W.json
//
// bench: ppN = N prompt tokens evaluated in one batch on an empty sequence;
//        tgN = N tokens generated one at a time after BOS (greedy), as llama-bench does.
// throughput: requests {prompt: [ids], max_tokens} run with up to S sequences in one
//        context (llama.cpp batches the sequences' tokens into shared forward passes).
// prefix: requests run one after another on one sequence (llama.cpp reuses the KV of
//        the common prefix with the previous request): time to first token each.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import {readFileSync} from "node:fs";

function args() {
  const a = {mode: process.argv[2], threads: 2, reps: 3, pp: "128", tg: "64", sequences: 1};
  for (let i = 3; i < process.argv.length; i += 2) a[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
  a.threads = Number(a.threads); a.reps = Number(a.reps); a.sequences = Number(a.sequences);
  return a;
}

const median = (v) => { const s = [...v].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const now = () => Number(process.hrtime.bigint()) / 1e9;

const a = args();
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: a.model});
const out = {peer: "node-llama-cpp", version: "3.21.1", model: a.model, threads: a.threads, mode: a.mode};
const vocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length ?? 512;
// The same token pattern as `tessera bench` uses (ids do not change the cost).
const fill = (n) => Array.from({length: n}, (_, i) => (i * 7919 + 1) % vocab);

if (a.mode === "bench") {
  const pps = a.pp.split(",").filter(Boolean).map(Number);
  const tg = Number(a.tg);
  const ctxSize = Math.max(...pps, tg) + 16;
  const ctx = await model.createContext({contextSize: ctxSize, batchSize: Math.max(...pps, 1), threads: a.threads, sequences: 1});
  const seq = ctx.getSequence();
  out.pp = {};
  for (const n of pps) {
    const samples = [];
    const toks = fill(n);
    for (let r = 0; r <= a.reps; ++r) {
      await seq.clearHistory();
      const t0 = now();
      await seq.evaluateWithoutGeneratingNewTokens(toks);
      if (r > 0) samples.push(n / (now() - t0));  // first run warms up
    }
    out.pp[n] = {tps: median(samples), samples};
  }
  if (tg > 0) {
    const samples = [];
    for (let r = 0; r <= a.reps; ++r) {
      await seq.clearHistory();
      let k = 0;
      const t0 = now();
      for await (const t of seq.evaluate([model.tokens.bos ?? 1], {temperature: 0})) { if (++k >= tg) break; }
      if (r > 0) samples.push(tg / (now() - t0));
    }
    out.tg = {tokens: tg, tps: median(samples), samples};
  }
  await ctx.dispose();
} else if (a.mode === "throughput") {
  const reqs = JSON.parse(readFileSync(a.workload, "utf8"));
  const maxLen = Math.max(...reqs.map((r) => r.prompt.length + r.max_tokens)) + 8;
  const ctx = await model.createContext({contextSize: maxLen * a.sequences, sequences: a.sequences, batchSize: 512, threads: a.threads});
  let next = 0, outTokens = 0;
  const t0 = now();
  const worker = async () => {
    const seq = ctx.getSequence();
    while (next < reqs.length) {
      const r = reqs[next++];
      await seq.clearHistory();
      let k = 0;
      for await (const t of seq.evaluate(r.prompt, {temperature: 0})) { ++outTokens; if (++k >= r.max_tokens) break; }
    }
    seq.dispose();
  };
  await Promise.all(Array.from({length: a.sequences}, worker));
  const secs = now() - t0;
  Object.assign(out, {requests: reqs.length, sequences: a.sequences, output_tokens: outTokens, seconds: secs,
                      output_tps: outTokens / secs, requests_per_s: reqs.length / secs});
  await ctx.dispose();
} else if (a.mode === "prefix") {
  const reqs = JSON.parse(readFileSync(a.workload, "utf8"));
  const maxLen = Math.max(...reqs.map((r) => r.prompt.length + r.max_tokens)) + 8;
  const ctx = await model.createContext({contextSize: maxLen, sequences: 1, batchSize: 512, threads: a.threads});
  const seq = ctx.getSequence();
  const ttft = [];
  for (const r of reqs) {
    // evaluate() keeps the KV of the longest common prefix with what the
    // sequence already holds and evaluates only the rest.
    const t0 = now();
    for await (const t of seq.evaluate(r.prompt, {temperature: 0})) { ttft.push(now() - t0); break; }
  }
  Object.assign(out, {requests: reqs.length, ttft_s: ttft, ttft_p50_s: median(ttft)});
  await ctx.dispose();
} else {
  console.error("usage: node bench/peer.mjs bench|throughput|prefix --model FILE ...");
  process.exit(1);
}
console.log(JSON.stringify(out));
