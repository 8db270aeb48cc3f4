// A multi-tenant chat workload against `tessera route` (issue 39): T tenants,
// each with its own long system prompt, send chat requests with random user
// turns; C clients at a time, streamed. Reports TTFT, the replicas' prefix
// cache hit rate (from their /metrics, before and after), and what happened
// to every request. With --kill-pid, the process is killed (SIGKILL) once
// --kill-after requests have completed: requests that had not started
// streaming must still succeed (the router retries them elsewhere).
//
// usage: node bench/router_load.mjs --url ROUTER --replicas URL,URL --text FILE
//          [--tenants 8] [--system-chars 2000] [--requests 96] [--clients 4]
//          [--max-tokens 8] [--seed 1] [--kill-pid PID --kill-after N]
// Prints one JSON object on stdout.
import { readFileSync } from 'node:fs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : 'true']);
  return acc;
}, []));
const num = (k, d) => (args[k] === undefined ? d : Number(args[k]));
const url = args.url;
const replicas = (args.replicas || '').split(',').filter(Boolean);
const tenants = num('tenants', 8);
const systemChars = num('system-chars', 2000);
const requests = num('requests', 96);
const clients = num('clients', 4);
const maxTokens = num('max-tokens', 8);
const killPid = args['kill-pid'] ? Number(args['kill-pid']) : 0;
const killAfter = num('kill-after', Math.floor(requests / 3));

// Deterministic: the same seed gives the same tenants and turns in the same order.
let state = BigInt(num('seed', 1)) || 1n;
const rand = () => {
  state ^= state << 13n; state &= (1n << 64n) - 1n;
  state ^= state >> 7n;
  state ^= state << 17n; state &= (1n << 64n) - 1n;
  return Number(state % 1000000n) / 1000000;
};
const text = readFileSync(args.text, 'utf8').replace(/\s+/g, ' ');
const words = text.split(' ');
// Tenant t's system prompt: its own slice of the text (no two share a prefix).
const systems = Array.from({ length: tenants }, (_, t) =>
  `You are assistant ${t}. ` + text.slice(t * systemChars, (t + 1) * systemChars));
const work = Array.from({ length: requests }, () => {
  const tenant = Math.floor(rand() * tenants);
  const n = 5 + Math.floor(rand() * 20);
  const start = Math.floor(rand() * (words.length - n));
  return { tenant, user: words.slice(start, start + n).join(' ') };
});

async function metrics(base) {
  const body = await (await fetch(`${base}/metrics`)).text();
  const get = (name) => {
    const m = body.match(new RegExp(`^${name} ([0-9.e+]+)$`, 'm'));
    return m ? Number(m[1]) : 0;
  };
  return { hit: get('tessera_prefix_cache_hit_tokens_total'), query: get('tessera_prefix_cache_query_tokens_total') };
}

async function one(w) {
  const t0 = performance.now();
  let ttft = null, streamed = false, content = '', error = null;
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'system', content: systems[w.tenant] }, { role: 'user', content: w.user }],
        max_tokens: maxTokens, temperature: 0, stream: true,
      }),
    });
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
    const decoder = new TextDecoder();
    let buf = '', done = false;
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i).trim();
        buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ')) continue;
        streamed = true;
        const data = ev.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const delta = j.choices?.[0]?.delta?.content;
        if (delta && ttft === null) ttft = performance.now() - t0;
        if (delta) content += delta;
      }
    }
    if (!done) throw new Error('stream ended without [DONE]');
  } catch (e) {
    error = String(e.message || e);
  }
  return { tenant: w.tenant, ttft, ms: performance.now() - t0, streamed, ok: error === null, error, content };
}

const before = await Promise.all(replicas.map(metrics).map((p) => p.catch(() => ({ hit: 0, query: 0 }))));
const results = [];
let next = 0, completed = 0, killed = false;
async function client() {
  while (next < work.length) {
    const r = await one(work[next++]);
    results.push(r);
    completed += 1;
    if (killPid && !killed && completed >= killAfter) {
      killed = true;
      process.kill(killPid, 'SIGKILL');
    }
  }
}
const t0 = performance.now();
await Promise.all(Array.from({ length: clients }, client));
const wall = (performance.now() - t0) / 1000;
const after = await Promise.all(replicas.map(metrics).map((p) => p.catch(() => null)));

const ok = results.filter((r) => r.ok);
const ttfts = ok.map((r) => r.ttft).filter((x) => x !== null).sort((a, b) => a - b);
const pct = (p) => (ttfts.length ? ttfts[Math.min(ttfts.length - 1, Math.floor(p * ttfts.length))] : null);
let hit = 0, query = 0;
const perReplica = replicas.map((u, i) => {
  if (!after[i]) return { url: u, dead: true };
  const h = after[i].hit - before[i].hit, q = after[i].query - before[i].query;
  hit += h; query += q;
  return { url: u, hit_tokens: h, query_tokens: q, hit_rate: q ? h / q : 0 };
});
console.log(JSON.stringify({
  requests: results.length,
  ok: ok.length,
  failed_before_streaming: results.filter((r) => !r.ok && !r.streamed).length,
  failed_mid_stream: results.filter((r) => !r.ok && r.streamed).length,
  errors: [...new Set(results.filter((r) => !r.ok).map((r) => r.error))].slice(0, 5),
  killed_pid: killed ? killPid : null,
  wall_s: wall,
  ttft_ms: { mean: ttfts.reduce((a, b) => a + b, 0) / Math.max(1, ttfts.length), p50: pct(0.5), p90: pct(0.9) },
  prefix_hit_rate: query ? hit / query : 0,
  hit_tokens: hit,
  query_tokens: query,
  replicas: perReplica,
}));
