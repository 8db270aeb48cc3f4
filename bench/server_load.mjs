#!/usr/bin/env node
// Load test of `tessera serve` (loopback only): C concurrent streaming
// clients send R /v1/completions requests in all (random token-id prompts
// of P tokens, max_tokens M, ignore_eos so every request must yield exactly
// M tokens). A fraction of the requests disconnect at a random point.
// Checks: every other request completes with M tokens and [DONE], no 5xx,
// the server's RSS stays bounded, and afterwards /metrics shows no KV block
// in use and nothing running or waiting. Prints one JSON object.
//
//   node bench/server_load.mjs --url http://127.0.0.1:PORT [--api-key K] [--pid PID]
//     [--clients 256] [--requests 1024] [--prompt 16:64] [--max-tokens 16:48]
//     [--vocab 32000] [--disconnect 0.1] [--seed 1] [--max-rss-mb N] [--timeout S] [--check]
//
// With --check the exit status is 1 when any check fails.
import fs from 'node:fs';

function parseArgs(argv) {
  const a = {
    url: '', apiKey: '', pid: 0, clients: 256, requests: 1024, prompt: [16, 64], maxTokens: [16, 48],
    vocab: 32000, disconnect: 0, seed: 1, maxRssMb: 0, check: false, model: '', timeoutS: 120,
  };
  const range = (s) => {
    const [lo, hi] = s.split(':').map(Number);
    return [lo, hi ?? lo];
  };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => argv[++i];
    if (k === '--url') a.url = v();
    else if (k === '--api-key') a.apiKey = v();
    else if (k === '--pid') a.pid = Number(v());
    else if (k === '--clients') a.clients = Number(v());
    else if (k === '--requests') a.requests = Number(v());
    else if (k === '--prompt') a.prompt = range(v());
    else if (k === '--max-tokens') a.maxTokens = range(v());
    else if (k === '--vocab') a.vocab = Number(v());
    else if (k === '--disconnect') a.disconnect = Number(v());
    else if (k === '--seed') a.seed = Number(v());
    else if (k === '--max-rss-mb') a.maxRssMb = Number(v());
    else if (k === '--model') a.model = v();
    else if (k === '--timeout') a.timeoutS = Number(v());
    else if (k === '--check') a.check = true;
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.url) throw new Error('--url is required');
  return a;
}

// mulberry32: a small seeded generator, so a run's prompts are reproducible.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const args = parseArgs(process.argv);
const rand = rng(args.seed);
const between = ([lo, hi]) => lo + Math.floor(rand() * (hi - lo + 1));
const headers = { 'Content-Type': 'application/json' };
if (args.apiKey) headers.Authorization = `Bearer ${args.apiKey}`;

function rssMb(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB$/m);
    return m ? Number(m[1]) / 1024 : null;
  } catch {
    return null;
  }
}

async function metrics() {
  const text = await (await fetch(`${args.url}/metrics`)).text();
  const get = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, 'm'))?.[1] ?? NaN);
  return {
    kv_blocks_used: get('tessera_kv_blocks_used'),
    running: get('tessera_num_requests_running'),
    waiting: get('tessera_num_requests_waiting'),
    in_flight: get('tessera_requests_in_flight'),
  };
}

// The requests, drawn up front so that every run with a seed is the same.
const jobs = [];
for (let i = 0; i < args.requests; i++) {
  const prompt = Array.from({ length: between(args.prompt) }, () => 3 + Math.floor(rand() * (args.vocab - 3)));
  const maxTokens = between(args.maxTokens);
  const disconnect = rand() < args.disconnect;
  // Where a disconnecting client hangs up: before the first event, or after k events.
  const hangUpAfter = disconnect ? Math.floor(rand() * (maxTokens + 1)) - 1 : null;
  const hangUpMs = rand() * 50;  // for hangUpAfter < 0: this long after sending
  jobs.push({ prompt, maxTokens, disconnect, hangUpAfter, hangUpMs });
}

const stats = {
  completed: 0, disconnected: 0, ended_before_hang_up: 0, status_5xx: 0, status_4xx: 0, wrong_tokens: 0, incomplete: 0, errors: 0,
  output_tokens: 0, ttft: [],
};
const failures = [];

async function runOne(job, model) {
  const controller = new AbortController();
  // A request that never ends is a failure to report, not a hung benchmark.
  let stuck = false;
  const watchdog = setTimeout(() => {
    stuck = true;
    controller.abort();
  }, args.timeoutS * 1000);
  try {
    await runOneInner(job, model, controller, () => stuck);
  } finally {
    clearTimeout(watchdog);
  }
}

async function runOneInner(job, model, controller, isStuck) {
  const t0 = performance.now();
  let events = 0;
  let ttft = null;
  let usage = null;
  let done = false;
  let finish = null;
  try {
    if (job.disconnect && job.hangUpAfter < 0) setTimeout(() => controller.abort(), job.hangUpMs);
    const res = await fetch(`${args.url}/v1/completions`, {
      method: 'POST', headers, signal: controller.signal,
      body: JSON.stringify({
        model, prompt: job.prompt, max_tokens: job.maxTokens, ignore_eos: true, temperature: 1.0,
        stream: true, stream_options: { include_usage: true },
      }),
    });
    if (res.status >= 500) stats.status_5xx++;
    else if (res.status >= 400) stats.status_4xx++;
    if (res.status !== 200) {
      failures.push(`status ${res.status}: ${(await res.text()).slice(0, 200)}`);
      return;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let hangUp = false;
    while (!hangUp) {
      const { value, done: eof } = await reader.read();
      if (eof) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!event.startsWith('data: ')) continue;  // ": keep-alive" comments
        const data = event.slice(6);
        if (data === '[DONE]') {
          done = true;
          continue;
        }
        const j = JSON.parse(data);
        if (j.error) throw new Error(`error event: ${j.error.message}`);
        if (j.usage) usage = j.usage;
        const c = j.choices?.[0];
        if (c) {
          if (ttft === null && c.text) ttft = (performance.now() - t0) / 1000;
          if (c.finish_reason) finish = c.finish_reason;
          events++;
          if (job.disconnect && events > job.hangUpAfter) {
            hangUp = true;
            break;
          }
        }
      }
    }
    if (hangUp) {
      // Hang up without reading on: once the whole body has arrived, a read
      // after abort() may never settle (undici), so do not read again.
      controller.abort();
      reader.cancel().catch(() => {});
    }
  } catch (e) {
    if (isStuck()) {
      stats.errors++;
      failures.push(`no end after ${args.timeoutS} s (${events} events)`);
      return;
    }
    if (job.disconnect && (e.name === 'AbortError' || controller.signal.aborted)) {
      stats.disconnected++;
      return;
    }
    stats.errors++;
    failures.push(String(e));
    return;
  }
  if (job.disconnect && controller.signal.aborted) {
    stats.disconnected++;
    return;
  }
  if (!done || !usage || finish !== 'length') {
    stats.incomplete++;
    failures.push(`incomplete: done=${done} finish=${finish}`);
    return;
  }
  if (usage.completion_tokens !== job.maxTokens || usage.prompt_tokens !== job.prompt.length) {
    stats.wrong_tokens++;
    failures.push(`tokens: got ${usage.completion_tokens}/${usage.prompt_tokens}, want ${job.maxTokens}/${job.prompt.length}`);
    return;
  }
  stats.completed++;
  // A client meant to hang up after k events may see the whole stream first:
  // the server sends the tokens of one step as one event, so a stream can
  // have fewer events than tokens.
  if (job.disconnect) stats.ended_before_hang_up++;
  stats.output_tokens += usage.completion_tokens;
  if (ttft !== null) stats.ttft.push(ttft);
}

const model = args.model ||
  (await (await fetch(`${args.url}/v1/models`, { headers })).json()).data[0].id;
const rss = { start: args.pid ? rssMb(args.pid) : null, peak: 0, samples: [] };
const sampler = args.pid ? setInterval(() => {
  const v = rssMb(args.pid);
  if (v !== null) {
    rss.peak = Math.max(rss.peak, v);
    rss.samples.push(v);
  }
}, 200) : null;

const t0 = performance.now();
let next = 0;
await Promise.all(Array.from({ length: args.clients }, async () => {
  while (next < jobs.length) await runOne(jobs[next++], model);
}));
const seconds = (performance.now() - t0) / 1000;

// Aborted requests are freed at the engine's next step: give it a moment.
let after = await metrics();
for (let i = 0; i < 100 && (after.kv_blocks_used !== 0 || after.running !== 0 || after.waiting !== 0); i++) {
  await new Promise((r) => setTimeout(r, 100));
  after = await metrics();
}
if (sampler) clearInterval(sampler);
const rssEnd = args.pid ? rssMb(args.pid) : null;

const q = (xs, p) => {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const expectedDisconnects = jobs.filter((j) => j.disconnect).length;
const result = {
  requests: args.requests,
  clients: args.clients,
  completed: stats.completed,
  disconnected: stats.disconnected,
  ended_before_hang_up: stats.ended_before_hang_up,
  expected_disconnects: expectedDisconnects,
  status_5xx: stats.status_5xx,
  status_4xx: stats.status_4xx,
  errors: stats.errors,
  incomplete: stats.incomplete,
  wrong_token_count: stats.wrong_tokens,
  seconds: Number(seconds.toFixed(3)),
  requests_per_s: Number((stats.completed / seconds).toFixed(2)),
  output_tokens_per_s: Number((stats.output_tokens / seconds).toFixed(1)),
  ttft_p50_s: q(stats.ttft, 0.5),
  ttft_p99_s: q(stats.ttft, 0.99),
  rss_start_mb: rss.start,
  rss_peak_mb: args.pid ? Number(rss.peak.toFixed(1)) : null,
  rss_end_mb: rssEnd,
  kv_blocks_used_after: after.kv_blocks_used,
  running_after: after.running,
  waiting_after: after.waiting,
  in_flight_after: after.in_flight,
};
const problems = [];
if (stats.status_5xx) problems.push(`${stats.status_5xx} responses with 5xx`);
if (stats.completed + stats.disconnected !== args.requests) {
  problems.push(`${args.requests - stats.completed - stats.disconnected} requests neither completed nor disconnected`);
}
if (stats.disconnected + stats.ended_before_hang_up !== expectedDisconnects) {
  problems.push(`disconnected ${stats.disconnected} (+${stats.ended_before_hang_up} ended first) of ${expectedDisconnects}`);
}
if (after.kv_blocks_used !== 0) problems.push(`${after.kv_blocks_used} KV blocks still used`);
if (after.running !== 0 || after.waiting !== 0 || after.in_flight !== 0) problems.push('requests left in the engine');
if (args.maxRssMb && rss.peak > args.maxRssMb) problems.push(`peak RSS ${rss.peak} MB over ${args.maxRssMb} MB`);
result.ok = problems.length === 0;
if (problems.length) result.problems = problems;
if (failures.length) result.first_failures = failures.slice(0, 5);
console.log(JSON.stringify(result, null, 2));
if (args.check && !result.ok) process.exit(1);
