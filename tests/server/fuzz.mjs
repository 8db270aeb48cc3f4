// Hostile traffic against a running `tessera serve`: malformed and hostile
// bodies (deep nesting, numbers out of range, invalid UTF-8, wrong types at
// every field, oversized strings, missing fields, binary garbage), bad
// headers and request lines, wrong methods and unknown paths, at every
// endpoint. Every answer must be a 4xx (or 2xx where the input happens to be
// valid); never a 5xx, never a dead server. Run by tests/scripts/server_fuzz.sh.
//
//   node tests/server/fuzz.mjs URL [API_KEY] [--quick]   (--quick: skip the field x value matrix)
import net from 'node:net';
import assert from 'node:assert/strict';

const [, , URL_ARG, KEY = '', MODE = ''] = process.argv;
const url = new URL(URL_ARG);
const host = url.hostname;
const port = Number(url.port);
const auth = KEY ? `Authorization: Bearer ${KEY}\r\n` : '';

// One request on its own connection, written as raw bytes. With halfClose
// the client shuts its side after writing, so a body shorter than its
// Content-Length ends in EOF rather than the server's read timeout (the
// server takes EOF for a client that left).
function raw(bytes, { halfClose = false, timeoutMs = 30000 } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    const sock = net.connect(port, host, () => {
      const b = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes, 'latin1');
      if (halfClose) sock.end(b);
      else sock.write(b);
    });
    const timer = setTimeout(() => {
      sock.destroy();
      resolve({ status: 0, text: '', timedOut: true });
    }, timeoutMs);
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      // The first final response (after any interim 100 Continue); garbage
      // after a request may draw further responses on the same connection.
      const resp = text.replace(/^HTTP\/1\.1 1\d\d [^\r]*\r\n(\r\n)?/, '');
      const m = resp.match(/^HTTP\/1\.[01] (\d{3})/);
      const headEnd = resp.indexOf('\r\n\r\n');
      const len = resp.slice(0, headEnd).match(/\r\nContent-Length: (\d+)/i);
      const body = headEnd < 0 ? '' : len ? resp.substr(headEnd + 4, Number(len[1])) : resp.slice(headEnd + 4);
      resolve({ status: m ? Number(m[1]) : 0, text, body, timedOut: false });
    });
  });
}

function post(path, body, extraHeaders = '') {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  const head = `POST ${path} HTTP/1.1\r\nHost: ${host}\r\n${auth}Content-Type: application/json\r\n` +
    `Content-Length: ${b.length}\r\nConnection: close\r\n${extraHeaders}\r\n`;
  return raw(Buffer.concat([Buffer.from(head, 'latin1'), b]));
}

const results = { requests: 0, by_status: {}, closed_without_response: 0 };
const problems = [];

function record(label, r, { allow2xx = false } = {}) {
  results.requests++;
  results.by_status[r.status] = (results.by_status[r.status] ?? 0) + 1;
  if (r.timedOut) {
    problems.push(`${label}: no answer in time`);
  } else if (r.status === 0) {
    results.closed_without_response++;  // the server hung up on bytes that are not HTTP
  } else if (r.status >= 500) {
    problems.push(`${label}: ${r.status} ${r.text.slice(0, 300)}`);
  } else if (r.status < 400 && !(allow2xx && r.status < 300)) {
    problems.push(`${label}: unexpected ${r.status}`);
  } else if (r.status >= 400) {
    // Errors carry the OpenAI shape.
    const body = r.body;
    try {
      const j = JSON.parse(body);
      if (typeof j?.error?.message !== 'string') problems.push(`${label}: ${r.status} without an error object`);
    } catch {
      problems.push(`${label}: ${r.status} body is not JSON: ${body.slice(0, 100)}`);
    }
  }
}

let seed = 12345;
const rand = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 4294967296;
};

const GEN = ['/v1/completions', '/v1/chat/completions'];
const ALL = [...GEN, '/v1/models', '/v1/models/stories260K', '/health', '/metrics'];

// 1. Bodies that are not JSON, or JSON that is hostile.
const deepArr = '['.repeat(100000) + ']'.repeat(100000);
const deepObj = '{"a":'.repeat(100000) + '1' + '}'.repeat(100000);
const hostile = [
  '', ' ', '{', '}', '[', 'nul', 'null', 'true', '0', '"s"', '[]', '{}', '{"prompt":}', '{"prompt":"a",}',
  '{"prompt":"a"} trailing', '{"prompt":"a"}{"prompt":"b"}', deepArr, deepObj, `{"prompt": ${deepArr}}`,
  '{"prompt":"a","max_tokens":1e400}', '{"prompt":"a","max_tokens":-1e400}', '{"prompt":"a","temperature":1e-400}',
  '{"prompt":"a","seed":123456789012345678901234567890}', '{"prompt":"a","n":1e20}',
  '{"prompt":"\\ud800"}', '{"prompt":"\\u0000"}', '{"prompt":"\\x41"}', '{"prompt":"a\nb"}',
  '{"prompt":"a","max_tokens":2,"stop":["\\udfff"]}',
];
for (const path of GEN) {
  for (const b of hostile) record(`body ${path} ${b.slice(0, 40)}`, await post(path, b), { allow2xx: true });
  // invalid UTF-8 inside and outside strings
  record(`utf8 ${path}`, await post(path, Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xc0, 0x80, 0x22, 0x7d])));
  record(`utf8-out ${path}`, await post(path, Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d])));
  // binary garbage
  for (let i = 0; i < 40; i++) {
    const n = 1 + Math.floor(rand() * 2000);
    const g = Buffer.alloc(n);
    for (let k = 0; k < n; k++) g[k] = Math.floor(rand() * 256);
    record(`garbage ${path} #${i}`, await post(path, g));
  }
  // over the size limit (the server runs with --max-body-bytes 1M)
  record(`huge ${path}`, await post(path, JSON.stringify({ prompt: 'x'.repeat(3 << 20) })));
  // missing fields
  for (const b of ['{}', '{"model":"stories260K"}', '{"max_tokens":2}', '{"messages":null}', '{"prompt":null}']) {
    record(`missing ${path} ${b}`, await post(path, b));
  }
}

// 2. Wrong types at every field, on both endpoints.
const FIELDS = ['model', 'prompt', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k',
  'min_p', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'stop', 'n', 'stream',
  'stream_options', 'logprobs', 'top_logprobs', 'echo', 'ignore_eos', 'stop_token_ids', 'best_of', 'suffix',
  'logit_bias', 'response_format', 'tools', 'chat_template_kwargs', 'add_generation_prompt', 'user'];
const VALUES = [null, true, false, 0, -1, 1.5, 3, 1e308, -1e308, '', 'x', [], [1], [[1, 2]], ['a', 1], {}, { a: 1 },
  { include_usage: 'x' }, [{ role: 'user' }], [{ role: 'user', content: [{ type: 'x' }] }], '\u0000', 2 ** 63, -(2 ** 63), 2 ** 64];
for (const path of MODE === '--quick' ? [] : GEN) {
  const base = path === GEN[0] ? { prompt: 'a', max_tokens: 2 } : { messages: [{ role: 'user', content: 'a' }], max_tokens: 2 };
  for (const f of FIELDS) {
    for (const v of VALUES) {
      // max_tokens stays bounded: when it is the field under test, the other
      // name holds 2 (chat's default would be the rest of the context).
      const body = { ...base, [f]: v };
      if (f === 'max_tokens') body.max_completion_tokens = 2;
      if (f === 'max_completion_tokens') body.max_tokens = 2;
      const r = await post(path, JSON.stringify(body));
      // Small valid values may succeed; what matters is: no 5xx, no hang.
      record(`field ${path} ${f}=${JSON.stringify(v)}`, r, { allow2xx: true });
    }
  }
}

// 3. Bad request lines and headers.
const badHeads = [
  'GARBAGE\r\n\r\n', 'GET\r\n\r\n', 'GET /health\r\n\r\n', 'GET /health HTTP/9.9\r\n\r\n', '\r\n\r\n', '\x00\x01\x02\r\n\r\n',
  `GET /${'a'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
  `GET /health HTTP/1.1\r\nHost: x\r\nX-Long: ${'b'.repeat(20000)}\r\n\r\n`,
  `GET /health HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n\r\n`,
  'GET /health HTTP/1.1\r\nno colon here\r\n\r\n',
  'GET /health HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n',
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: -1\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: abc\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 99999999999999999999\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 100\r\n\r\n{"prompt":"a"}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 2\r\nContent-Length: 5\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Transfer-Encoding: gzip\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Content-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x00\x00`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\nContent-Length: 2\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: ${'z'.repeat(5000)}\r\nContent-Length: 2\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Expect: 100-continue\r\nContent-Length: 2\r\n\r\n{}`,
  `POST /v1/completions HTTP/1.1\r\nHost: x\r\n${auth}Range: bytes=0-1,5-9\r\nContent-Length: 2\r\n\r\n{}`,
  `GET /health HTTP/1.1\r\nHost: x\r\nRange: bytes=999999-0\r\n\r\n`,
  `GET /v1/models?${'q=1&'.repeat(3000)} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`,
  'GET /%00%ff%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n',
];
for (const h of badHeads) {
  const r = await raw(h, { halfClose: true });
  // GET /health with odd but legal extras may be fine (2xx).
  record(`head ${JSON.stringify(h.slice(0, 50))}`, r, { allow2xx: h.startsWith('GET /health') || h.startsWith('GET /v1/models') });
}

// 4. Wrong methods at every endpoint, unknown paths.
for (const path of ALL) {
  for (const m of ['PUT', 'DELETE', 'PATCH', 'OPTIONS', 'FOO', 'CONNECT', 'TRACE', GEN.includes(path) ? 'GET' : 'POST']) {
    const r = await raw(`${m} ${path} HTTP/1.1\r\nHost: x\r\n${auth}Content-Length: 0\r\nConnection: close\r\n\r\n`);
    record(`method ${m} ${path}`, r);
  }
}
// ('/' is the chat page: a route; names outside the page's files are not.)
for (const path of ['/webui/nope.js', '/webui/../../etc/passwd', '/webui/', '/v1', '/v1/', '/v2/completions', '/v1/completions/x', '/v1/chat', '/health/x', '/metricsx',
  '/../../etc/passwd', '//v1/completions', '/v1/models/', '/v1/models/nope/x']) {
  const r = await raw(`GET ${path} HTTP/1.1\r\nHost: x\r\n${auth}Connection: close\r\n\r\n`);
  record(`path ${path}`, r);
}

// 5. Requests rejected after some of their prompts were queued (issue 13:
// a group of n samples must give back n, not 1): a short prompt beside one
// longer than the context, with large n, again and again.
const longPrompt = 'Once upon a time there was a cat. '.repeat(300);  // ~2700 tokens: past the 2048 context
for (let i = 0; i < 12; i++) {
  const r = await post('/v1/completions', JSON.stringify({ prompt: ['hi', longPrompt], n: 4 + i, max_tokens: 8 }));
  record(`mixed prompts rejected ${i}`, r);
}

// The server must still be alive, with nothing left in the engine: no KV
// block, no request in flight or waiting.
const health = await raw(`GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
assert.equal(health.status, 200, 'server alive after the fuzz run');
const gauges = { tessera_kv_blocks_used: -1, tessera_requests_in_flight: -1, tessera_num_requests_waiting: -1 };
for (let i = 0; i < 50 && Object.values(gauges).some((v) => v !== 0); i++) {
  if (i > 0) await new Promise((r) => setTimeout(r, 100));
  const m = await raw(`GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  for (const g of Object.keys(gauges)) gauges[g] = Number(m.text.match(new RegExp(`^${g} (\\d+)`, 'm'))?.[1] ?? -1);
}
for (const [g, v] of Object.entries(gauges)) {
  if (v !== 0) problems.push(`${g} is ${v} after the run, not 0`);
}
// Capacity really is back: a request with n = 16 (the server's whole
// sequence budget here) is admitted.
const full = await post('/v1/completions', JSON.stringify({ prompt: 'hi', n: 16, max_tokens: 2 }));
if (full.status !== 200) problems.push(`n = 16 after the run: ${full.status} ${full.body.slice(0, 200)}`);

console.log(JSON.stringify({ ...results, problems: problems.slice(0, 20), problem_count: problems.length }, null, 2));
process.exit(problems.length ? 1 : 0);
