#!/usr/bin/env node
// Connections that cost the server nothing (issue 32), against a running
// `tessera serve` on loopback. Prints one JSON object.
//
//   --mode idle       N connections (half idle, half with half a request,
//                     reopened whenever the server closes them) + C streaming
//                     clients: every stream must complete; the TTFT of a probe
//                     stream is compared with the same probe on the idle server.
//   --mode slow       S clients read their streams one byte a second (or not
//                     at all with --stall): the probe's TTFT with them vs without.
//   --mode keepalive  R short requests over K keep-alive connections: the
//                     server's descriptors, threads and RSS before and after.
//
// Server figures (RSS, threads, descriptors) come from /proc/PID (--pid).
//
//   node bench/server_idle_load.mjs --url http://127.0.0.1:PORT --pid PID [--mode idle|slow|keepalive]
//     [--connections 2000] [--clients 64] [--slow 8] [--stall] [--requests 10000] [--keepalive 8]
//     [--max-tokens 32] [--probes 21]
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';

function parseArgs(argv) {
  const a = { url: '', pid: 0, mode: 'idle', connections: 2000, clients: 64, slow: 8, stall: false, requests: 10000,
    keepalive: 8, maxTokens: 32, probes: 21 };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => argv[++i];
    if (k === '--url') a.url = v();
    else if (k === '--pid') a.pid = Number(v());
    else if (k === '--mode') a.mode = v();
    else if (k === '--connections') a.connections = Number(v());
    else if (k === '--clients') a.clients = Number(v());
    else if (k === '--slow') a.slow = Number(v());
    else if (k === '--stall') a.stall = true;
    else if (k === '--requests') a.requests = Number(v());
    else if (k === '--keepalive') a.keepalive = Number(v());
    else if (k === '--max-tokens') a.maxTokens = Number(v());
    else if (k === '--probes') a.probes = Number(v());
    else throw new Error(`unknown argument ${k}`);
  }
  if (!a.url) throw new Error('--url is required');
  return a;
}

const args = parseArgs(process.argv);
const url = new URL(args.url);
const host = url.hostname;
const port = Number(url.port);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function serverStats() {
  if (!args.pid) return null;
  const status = fs.readFileSync(`/proc/${args.pid}/status`, 'utf8');
  const field = (name) => Number(status.match(new RegExp(`^${name}:\\s+(\\d+)`, 'm'))?.[1] ?? -1);
  return { rss_mb: +(field('VmRSS') / 1024).toFixed(1), threads: field('Threads'),
    fds: fs.readdirSync(`/proc/${args.pid}/fd`).length };
}

const completionBody = (maxTokens, stream) => JSON.stringify({ prompt: 'Once upon a time', max_tokens: maxTokens,
  ignore_eos: true, temperature: 0, stream });

// A stream on a fresh connection: time to its first event and to [DONE].
function stream(maxTokens, { timeoutMs = 60000, agent = false } = {}) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    let ttft = null;
    let text = '';
    const body = completionBody(maxTokens, true);
    const req = http.request({ host, port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (ttft === null && d.includes('data: {')) ttft = performance.now() - t0;
        text += d;
      });
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ ok: res.statusCode === 200 && text.includes('data: [DONE]'), ttft_ms: ttft, total_ms: performance.now() - t0 });
      });
    });
    const timer = setTimeout(() => req.destroy(new Error('timeout')), timeoutMs);
    req.on('error', () => {
      clearTimeout(timer);
      resolve({ ok: false, ttft_ms: ttft, total_ms: performance.now() - t0 });
    });
    req.end(body);
  });
}

const median = (xs) => {
  const s = xs.filter((x) => x !== null).sort((a, b) => a - b);
  return s.length ? +s[Math.floor(s.length / 2)].toFixed(2) : null;
};

async function probe() {
  const ttfts = [];
  await stream(8, { timeoutMs: 30000 });  // warm-up (first connection, allocations)
  for (let i = 0; i < args.probes; i++) ttfts.push((await stream(8, { timeoutMs: 30000 })).ttft_ms);
  return median(ttfts);
}

// N connections held open: half send nothing, half half a request. Each is
// reopened when the server closes it (its idle or header timeout).
function holdConnections(n) {
  const st = { open: 0, reopened: 0, stopping: false, socks: new Set() };
  const open = (i) => {
    if (st.stopping) return;
    const s = net.connect(port, host, () => {
      st.open++;
      if (i % 2) s.write(`POST /v1/completions HTTP/1.1\r\nHost: ${host}\r\nContent-Le`);
    });
    st.socks.add(s);
    s.on('error', () => {});
    s.on('data', () => {});
    s.on('close', (hadError) => {
      st.socks.delete(s);
      st.open--;
      if (!st.stopping) {
        st.reopened++;
        setTimeout(() => open(i), 50);
      }
    });
  };
  for (let i = 0; i < n; i++) open(i);
  st.stop = () => {
    st.stopping = true;
    for (const s of st.socks) s.destroy();
  };
  return st;
}

async function modeIdle() {
  const before = serverStats();
  const idleTtft = await probe();
  const held = holdConnections(args.connections);
  for (let i = 0; i < 100 && held.open < args.connections; i++) await sleep(50);
  await sleep(500);
  const withConnections = serverStats();
  const heldOpen = held.open;
  const heldTtft = await probe();
  const streams = Array.from({ length: args.clients }, () => stream(args.maxTokens, { timeoutMs: 120000 }));
  await sleep(50);
  const loadedTtft = await probe();
  const results = await Promise.all(streams);
  const during = serverStats();
  held.stop();
  await sleep(1000);
  return {
    connections: args.connections, held_open: heldOpen, reopened: held.reopened,
    streams: args.clients, streams_completed: results.filter((r) => r.ok).length,
    stream_ttft_ms_median: median(results.map((r) => r.ttft_ms)),
    probe_ttft_ms: { idle_server: idleTtft, with_connections: heldTtft, with_connections_and_streams: loadedTtft },
    ttft_ratio: heldTtft && idleTtft ? +(heldTtft / idleTtft).toFixed(2) : null,
    server: { before, with_connections: withConnections, end_of_streams: during, after: serverStats() },
  };
}

// A raw streaming request whose reader takes one byte a second (or nothing).
function slowReader(stall) {
  const s = net.connect(port, host, () => {
    const body = completionBody(2000, true);
    s.write(`POST /v1/completions HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
  s.on('error', () => {});
  s.pause();
  const timer = stall ? null : setInterval(() => s.read(1), 1000);
  return { closeIt: () => { if (timer) clearInterval(timer); s.destroy(); }, socket: s };
}

// The engine's requests in flight, from /metrics (-1 when unreadable).
function inFlight() {
  return new Promise((resolve) => {
    http.get({ host, port, path: '/metrics', agent: false }, (res) => {
      let t = '';
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(Number(t.match(/^tessera_requests_in_flight (\d+)/m)?.[1] ?? -1)));
    }).on('error', () => resolve(-1));
  });
}

async function modeSlow() {
  const runStreams = async () => {
    const rs = await Promise.all(Array.from({ length: args.clients }, () => stream(args.maxTokens)));
    return { completed: rs.filter((r) => r.ok).length, ttft_ms_median: median(rs.map((r) => r.ttft_ms)) };
  };
  const before = serverStats();
  const alone = await probe();
  const streamsAlone = await runStreams();
  const readers = Array.from({ length: args.slow }, () => slowReader(args.stall));
  // Their generations end (what they have not read waits in buffers, or
  // they are dropped): from then on the engine is as idle as before, and
  // any difference is the cost of the connections.
  await sleep(500);
  for (let i = 0; i < 600 && (await inFlight()) !== 0; i++) await sleep(100);
  const withSlow = await probe();
  const streamsWith = await runStreams();
  const during = serverStats();
  const dropped = readers.filter((r) => r.socket.readableEnded || r.socket.destroyed).length;
  for (const r of readers) r.closeIt();
  await sleep(1000);
  return {
    slow_readers: args.slow, stalled: args.stall, streams: args.clients,
    streams_alone: streamsAlone, streams_with_slow_readers: streamsWith,
    probe_ttft_ms: { alone, with_slow_readers: withSlow }, ttft_ratio: alone && withSlow ? +(withSlow / alone).toFixed(2) : null,
    slow_readers_seen_closed: dropped, server: { before, with_slow_readers: during, after: serverStats() },
  };
}

async function modeKeepalive() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: args.keepalive });
  const get = (path) => new Promise((resolve) => {
    http.get({ host, port, path, agent }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', () => resolve(0));
  });
  for (let i = 0; i < 100; i++) await get('/health');  // warm-up
  const before = serverStats();
  const t0 = performance.now();
  let ok = 0;
  let next = 0;
  await Promise.all(Array.from({ length: args.keepalive }, async () => {
    while (next < args.requests) {
      next++;
      if ((await get(next % 2 ? '/health' : '/v1/models')) === 200) ok++;
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  const during = serverStats();
  agent.destroy();
  await sleep(500);
  return { requests: args.requests, connections: args.keepalive, ok, seconds: +secs.toFixed(2),
    requests_per_s: Math.round(args.requests / secs), server: { before, after_requests: during, after_close: serverStats() } };
}

const modes = { idle: modeIdle, slow: modeSlow, keepalive: modeKeepalive };
if (!modes[args.mode]) throw new Error(`unknown mode ${args.mode}`);
const out = await modes[args.mode]();
console.log(JSON.stringify({ mode: args.mode, ...out }, null, 2));
process.exit(0);
