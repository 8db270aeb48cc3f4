// `tessera serve` through the official OpenAI client (openai-node), run by
// tests/scripts/server.sh, which starts the servers and passes:
//   TESSERA_URL, TESSERA_API_KEY  main server: stories260K, --chat-template chatml,
//                                 --api-key, --max-body-bytes 1M
//   TESSERA_URL_BARE              no chat template, --max-num-seqs 1 --max-queue 0
//   GOLDEN_TEXT_FILE              stdout of `tessera generate -p "Once upon a time" -n 64 --temp 0`
//   PROMPT_IDS, CHAT_PROMPT_IDS   `tessera tokenize` of the prompt and of the
//                                 hand-written chatml rendering of CHAT_MESSAGES
//   PC_GOLDEN_TEXT_FILE           stdout of `tessera generate --prompt-schema
//                                 bench/data/prompt_schema.json --modules lily,moral
//                                 -p " One day" -n 32 --temp 0` (the main server
//                                 runs with that schema)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';

const URL = process.env.TESSERA_URL;
const KEY = process.env.TESSERA_API_KEY;
const BARE = process.env.TESSERA_URL_BARE;
const MODEL = 'stories260K';
const PROMPT = 'Once upon a time';
const GOLDEN = fs.readFileSync(process.env.GOLDEN_TEXT_FILE, 'utf8').replace(/\n$/, '');
const PC_GOLDEN = fs.readFileSync(process.env.PC_GOLDEN_TEXT_FILE, 'utf8').replace(/\n$/, '');
const PROMPT_IDS = JSON.parse(process.env.PROMPT_IDS);
const CHAT_PROMPT_IDS = JSON.parse(process.env.CHAT_PROMPT_IDS);
const CHAT_MESSAGES = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me about a cat.' }];
// chatml, written out by hand: what the template must render for CHAT_MESSAGES.
const CHAT_RENDERED =
  '<|im_start|>system\nYou tell stories.<|im_end|>\n<|im_start|>user\nTell me about a cat.<|im_end|>\n<|im_start|>assistant\n';

const client = new OpenAI({ baseURL: `${URL}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
const bare = new OpenAI({ baseURL: `${BARE}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

async function expectApiError(promise, status, check = () => {}) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError, `expected APIError, got ${e}`);
    assert.equal(e.status, status, `status of: ${e.message}`);
    assert.equal(typeof e.error?.message, 'string');
    check(e);
    return true;
  });
}

test('models: lists the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  assert.equal(models.data[0].object, 'model');
  const one = await client.models.retrieve(MODEL);
  assert.equal(one.id, MODEL);
  await expectApiError(client.models.retrieve('no-such-model'), 404);
});

test('completion: greedy output equals `tessera generate`', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 64, temperature: 0 });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, MODEL);
  assert.equal(typeof r.created, 'number');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].text, GOLDEN);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: PROMPT_IDS.length, completion_tokens: 64, total_tokens: PROMPT_IDS.length + 64 });
});

test('completion text continues the prompt, streamed or not (" was", not "was")', async () => {
  const body = { model: MODEL, prompt: 'The little dog', max_tokens: 8, temperature: 0 };
  const r = await client.completions.create(body);
  assert.ok(('The little dog' + r.choices[0].text).startsWith('The little dog was a little girl'), r.choices[0].text);
  const chunks = await collect(await client.completions.create({ ...body, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0]?.text ?? '').join(''), r.choices[0].text);
  assert.ok(chunks.some((c) => (c.choices[0]?.text ?? '').startsWith(' was')), 'the first word streams with its space');
});

test('prompt_cache extension: greedy output equals `tessera generate --prompt-schema`', async () => {
  const body = { model: MODEL, prompt: ' One day', max_tokens: 32, temperature: 0, prompt_cache: { modules: ['lily', 'moral'] } };
  const r = await client.completions.create(body);
  assert.equal(r.choices[0].text, PC_GOLDEN);
  assert.ok(r.usage.prompt_tokens > 40, `module tokens count as prompt tokens: ${r.usage.prompt_tokens}`);
  // Modules are reused, not recomputed: the same request again gives the same text.
  const again = await client.completions.create({ ...body, stream: true });
  assert.equal((await collect(again)).map((c) => c.choices[0]?.text ?? '').join(''), PC_GOLDEN);
  // Without modules the text differs (the modules are really imported).
  const plain = await client.completions.create({ ...body, prompt_cache: { modules: [] } });
  assert.notEqual(plain.choices[0].text, PC_GOLDEN);
  await expectApiError(client.completions.create({ ...body, prompt_cache: { modules: ['nope'] } }), 400,
    (e) => assert.equal(e.param, 'prompt_cache.modules'));
  await expectApiError(client.completions.create({ ...body, prompt_cache: { modules: ['moral', 'lily'] } }), 400);
  await expectApiError(client.completions.create({ ...body, prompt_cache: 'lily' }), 400);
  await expectApiError(bare.completions.create({ ...body }), 400, (e) => assert.match(e.message, /--prompt-schema/));
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, prompt_cache: { modules: [] } }), 400);
});

test('completion: token-id prompts and several prompts', async () => {
  const byText = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 12, temperature: 0 });
  const byIds = await client.completions.create({ model: MODEL, prompt: PROMPT_IDS, max_tokens: 12, temperature: 0 });
  assert.equal(byIds.choices[0].text, byText.choices[0].text);
  const many = await client.completions.create({
    model: MODEL, prompt: [PROMPT_IDS, PROMPT_IDS.slice(0, 2)], max_tokens: 12, temperature: 0, n: 2,
  });
  assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.equal(many.choices[0].text, byText.choices[0].text);
  assert.equal(many.choices[1].text, byText.choices[0].text);  // greedy: both samples agree
  assert.equal(many.usage.prompt_tokens, PROMPT_IDS.length + 2);
  assert.equal(many.usage.completion_tokens, 4 * 12);
  const strings = await client.completions.create({ model: MODEL, prompt: [PROMPT, PROMPT], max_tokens: 5, temperature: 0 });
  assert.equal(strings.choices.length, 2);
  assert.equal(strings.choices[1].text, strings.choices[0].text);
});

test('completion: streamed text equals the whole response, usage chunk last', async () => {
  const stream = await client.completions.create({
    model: MODEL, prompt: PROMPT, max_tokens: 64, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const chunks = await collect(stream);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, { prompt_tokens: PROMPT_IDS.length, completion_tokens: 64, total_tokens: PROMPT_IDS.length + 64 });
  const body = chunks.slice(0, -1);
  for (const c of body) {
    assert.equal(c.usage, null);
    assert.equal(c.object, 'text_completion');
    assert.equal(c.id, last.id);
  }
  assert.equal(body.map((c) => c.choices[0].text).join(''), GOLDEN);
  assert.equal(body.at(-1).choices[0].finish_reason, 'length');
  assert.ok(body.slice(0, -1).every((c) => c.choices[0].finish_reason === null));
});

test('chat: chatml rendering, greedy, streamed equals whole', async () => {
  const asCompletion = await client.completions.create({ model: MODEL, prompt: CHAT_RENDERED, max_tokens: 40, temperature: 0 });
  const r = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 40, temperature: 0 });
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  // The same tokens; a chat reply starts a turn, so its one leading space is dropped.
  assert.equal(r.choices[0].message.content, asCompletion.choices[0].text.replace(/^ /, ''));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: CHAT_PROMPT_IDS.length, completion_tokens: 40, total_tokens: CHAT_PROMPT_IDS.length + 40 });

  const chunks = await collect(await client.chat.completions.create({
    model: MODEL, messages: CHAT_MESSAGES, max_tokens: 40, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  }));
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(usage.usage, r.usage);
  const text = chunks.slice(0, -1).map((c) => c.choices[0].delta.content ?? '').join('');
  assert.equal(text, r.choices[0].message.content);
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  // max_completion_tokens is the newer name of max_tokens.
  const r2 = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_completion_tokens: 7, temperature: 0 });
  assert.equal(r2.usage.completion_tokens, 7);
});

test('n = 2: two distinct seeded samples, each reproducible', async () => {
  const req = { model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 1.5, n: 2, seed: 42, ignore_eos: true };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.notEqual(a.choices[0].text, a.choices[1].text);
  assert.equal(a.usage.completion_tokens, 64);
  assert.equal(a.usage.prompt_tokens, PROMPT_IDS.length);  // counted once for both samples
  const chunks = await collect(await client.chat.completions.create({
    model: MODEL, messages: CHAT_MESSAGES, max_tokens: 16, temperature: 1.5, n: 2, seed: 7, stream: true,
  }));
  const texts = ['', ''];
  for (const c of chunks) for (const ch of c.choices) texts[ch.index] += ch.delta.content ?? '';
  const whole = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 16, temperature: 1.5, n: 2, seed: 7 });
  assert.deepEqual(texts, whole.choices.map((c) => c.message.content));
});

test('seed: same seed same text, other seed other text', async () => {
  const req = { model: MODEL, prompt: PROMPT, max_tokens: 48, temperature: 1.0, top_p: 0.95, seed: 1234 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  const c = await client.completions.create({ ...req, seed: 99 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  const sa = await collect(await client.completions.create({ ...req, stream: true }));
  assert.equal(sa.map((x) => x.choices[0]?.text ?? '').join(''), a.choices[0].text);
});

test('stop: text ends before the stop string, finish_reason stop', async () => {
  const stop = 'Lily';
  const cut = GOLDEN.indexOf(stop);
  assert.ok(cut > 0, 'the golden text holds the stop string');
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 64, temperature: 0, stop: [stop, 'zzzz'] });
  assert.equal(r.choices[0].text, GOLDEN.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.completion_tokens < 64);
  const chunks = await collect(await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 64, temperature: 0, stop, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0].text).join(''), GOLDEN.slice(0, cut));
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
});

test('ignore_eos and echo', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 300, temperature: 0, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 300);
  assert.equal(r.choices[0].finish_reason, 'length');
  const e = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 8, temperature: 0, echo: true });
  assert.ok(e.choices[0].text.startsWith(PROMPT));
  assert.equal(e.choices[0].text.slice(PROMPT.length), GOLDEN.slice(0, e.choices[0].text.length - PROMPT.length));
});

test('logprobs: completions shape and greedy consistency', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 16);
  assert.equal(lp.token_logprobs.length, 16);
  assert.equal(lp.top_logprobs.length, 16);
  assert.equal(lp.text_offset.length, 16);
  for (let i = 0; i < 16; i++) {
    const top = lp.top_logprobs[i];
    assert.ok(Object.keys(top).length <= 4 && Object.keys(top).length >= 1);
    assert.ok(lp.token_logprobs[i] <= 0);
    // greedy: the chosen token is the most likely one
    assert.equal(top[lp.tokens[i]], lp.token_logprobs[i]);
    assert.ok(Math.max(...Object.values(top)) <= lp.token_logprobs[i] + 1e-6);
    if (i > 0) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + lp.tokens[i - 1].length);
  }
  assert.equal(lp.tokens.join('').trimStart(), r.choices[0].text.trimStart());
  const streamed = await collect(await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 0, logprobs: 3, stream: true }));
  assert.deepEqual(streamed.flatMap((c) => c.choices[0].logprobs?.tokens ?? []), lp.tokens);
  assert.deepEqual(streamed.flatMap((c) => c.choices[0].logprobs?.token_logprobs ?? []), lp.token_logprobs);
});

test('logprobs: chat shape', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 10);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.ok(Array.isArray(t.bytes));
    assert.equal(t.top_logprobs.length, 2);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
  }
  assert.equal(Buffer.from(content.flatMap((t) => t.bytes)).toString('utf8').trimStart(), r.choices[0].message.content.trimStart());
  const none = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 3 });
  assert.equal(none.choices[0].logprobs, null);
});

test('errors: wrong types, ranges, context, n, model', async () => {
  const base = { model: MODEL, prompt: PROMPT, max_tokens: 4 };
  await expectApiError(client.completions.create({ ...base, temperature: 'hot' }), 400, (e) => assert.equal(e.param, 'temperature'));
  await expectApiError(client.completions.create({ ...base, max_tokens: 0 }), 400, (e) => assert.equal(e.param, 'max_tokens'));
  await expectApiError(client.completions.create({ ...base, max_tokens: 5000 }), 400);
  await expectApiError(client.completions.create({ ...base, prompt: Array(3000).fill(300) }), 400,
    (e) => assert.equal(e.code, 'context_length_exceeded'));
  await expectApiError(client.completions.create({ ...base, n: 1000 }), 400, (e) => assert.equal(e.param, 'n'));
  await expectApiError(client.completions.create({ ...base, n: 100 }), 400);  // more than --max-num-seqs
  await expectApiError(client.completions.create({ ...base, prompt: [1, 2, 99999] }), 400);
  await expectApiError(client.completions.create({ ...base, stop: 7 }), 400, (e) => assert.equal(e.param, 'stop'));
  await expectApiError(client.completions.create({ ...base, logprobs: 50 }), 400);
  await expectApiError(client.completions.create({ ...base, model: 'gpt-4' }), 404, (e) => assert.equal(e.code, 'model_not_found'));
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: [] }), 400, (e) => assert.equal(e.param, 'messages'));
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: [{ content: 'no role' }] }), 400);
  await expectApiError(client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, top_logprobs: 3 }), 400);
  // fields the server does not implement are refused, naming them; OpenAI's
  // no-effect fields (user) are accepted
  for (const create of [(b) => client.completions.create({ ...base, ...b }),
    (b) => client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 4, ...b })]) {
    for (const [field, value] of [['some_future_field', { x: 1 }], ['min_tokens', 2], ['tool_choice', 'required'],
      ['guided_json', { type: 'object' }]]) {
      await expectApiError(create({ [field]: value }), 400, (e) => assert.equal(e.param, field));
    }
  }
  const ok = await client.completions.create({ ...base, user: 'u' });
  assert.equal(ok.usage.completion_tokens, 4);
  const okChat = await client.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES, max_tokens: 4, user: 'u' });
  assert.equal(okChat.usage.completion_tokens, 4);
});

test('errors: API key, body size', async () => {
  const wrong = new OpenAI({ baseURL: `${URL}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
  await expectApiError(wrong.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2 }), 401,
    (e) => assert.equal(e.code, 'invalid_api_key'));
  const missing = await fetch(`${URL}/v1/models`);
  assert.equal(missing.status, 401);
  assert.equal((await missing.json()).error.code, 'invalid_api_key');
  // /health and /metrics need no key
  assert.equal((await fetch(`${URL}/health`)).status, 200);
  await expectApiError(client.completions.create({ model: MODEL, prompt: 'x'.repeat(2 << 20), max_tokens: 2 }), 413);
});

test('errors: malformed JSON over raw HTTP', async () => {
  const post = (body, path = '/v1/completions') => fetch(`${URL}${path}`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' }, body,
  });
  for (const body of ['{', '', 'null', '[1,2]', '{"prompt": "a", }', '"str"', '{"prompt":"a","max_tokens":1e400}']) {
    const r = await post(body);
    assert.equal(r.status, 400, `body ${body}`);
    const j = await r.json();
    assert.equal(j.error.type, 'invalid_request_error');
    assert.ok('param' in j.error && 'code' in j.error);
  }
  const wrongMethod = await fetch(`${URL}/v1/completions`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(wrongMethod.status, 405);
  const unknown = await fetch(`${URL}/v1/nothing`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(unknown.status, 404);
});

test('errors: no chat template -> 400; overload -> 429 with Retry-After', async () => {
  await expectApiError(bare.chat.completions.create({ model: MODEL, messages: CHAT_MESSAGES }), 400,
    (e) => assert.match(e.message, /chat template/));
  // The bare server admits one request (--max-num-seqs 1 --max-queue 0):
  // while a long one streams, the next is refused.
  const holder = await bare.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2000, ignore_eos: true, stream: true });
  const it = holder[Symbol.asyncIterator]();
  await it.next();  // admitted and running
  await expectApiError(bare.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2 }), 429, (e) => {
    assert.equal(e.headers.get('retry-after'), '1');
  });
  holder.controller.abort();  // disconnect: the request is aborted and its slot freed
  let admitted = null;
  for (let i = 0; i < 100 && !admitted; i++) {
    admitted = await bare.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 2 }).catch((e) => {
      if (e.status !== 429) throw e;
      return new Promise((r) => setTimeout(() => r(null), 50));
    });
  }
  assert.ok(admitted, 'the slot is freed after the client disconnects');
  assert.equal(admitted.usage.completion_tokens, 2);
});

test('metrics: Prometheus text with the documented names', async () => {
  const text = await (await fetch(`${URL}/metrics`)).text();
  for (const name of ['tessera_num_requests_running', 'tessera_num_requests_waiting', 'tessera_kv_blocks_used',
    'tessera_kv_blocks_total', 'tessera_prompt_tokens_total', 'tessera_generation_tokens_total',
    'tessera_prefix_cache_hit_tokens_total', 'tessera_preemptions_total']) {
    assert.match(text, new RegExp(`^# TYPE ${name} (gauge|counter)$`, 'm'), name);
    assert.match(text, new RegExp(`^${name} [0-9.e+]+$`, 'm'), name);
  }
  for (const h of ['tessera_time_to_first_token_seconds', 'tessera_inter_token_latency_seconds', 'tessera_e2e_request_latency_seconds']) {
    assert.match(text, new RegExp(`^# TYPE ${h} histogram$`, 'm'));
    const buckets = [...text.matchAll(new RegExp(`^${h}_bucket\\{le="([^"]+)"\\} (\\d+)$`, 'gm'))];
    assert.ok(buckets.length > 5);
    assert.equal(buckets.at(-1)[1], '+Inf');
    const counts = buckets.map((b) => Number(b[2]));
    for (let i = 1; i < counts.length; i++) assert.ok(counts[i] >= counts[i - 1], 'cumulative');
    const count = Number(text.match(new RegExp(`^${h}_count (\\d+)$`, 'm'))[1]);
    assert.equal(counts.at(-1), count);
    assert.ok(count > 0);
  }
  assert.equal(Number(text.match(/^tessera_kv_blocks_used (\d+)$/m)[1]), 0);
  const gen = Number(text.match(/^tessera_generation_tokens_total (\d+)$/m)[1]);
  assert.ok(gen > 500);
});

test('structured output: json_schema through the OpenAI client, streamed or not, n = 2; regex; refusals name the keyword', async () => {
  const schema = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 12 },
      age: { type: 'integer', minimum: 1, maximum: 12 },
      pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 3 },
    },
    required: ['name', 'age', 'pets'],
    additionalProperties: false,
  };
  const check = (text) => {
    const v = JSON.parse(text);
    assert.deepEqual(Object.keys(v), ['name', 'age', 'pets'], text);
    assert.ok(typeof v.name === 'string' && [...v.name].length <= 12, text);
    assert.ok(Number.isInteger(v.age) && v.age >= 1 && v.age <= 12, text);
    assert.ok(Array.isArray(v.pets) && v.pets.length <= 3 && v.pets.every((p) => p === 'cat' || p === 'dog'), text);
  };
  const body = {
    model: MODEL, messages: CHAT_MESSAGES, max_tokens: 200, temperature: 1, seed: 7,
    response_format: { type: 'json_schema', json_schema: { name: 'pet_owner', schema, strict: true } },
  };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices[0].finish_reason, 'stop');
  check(r.choices[0].message.content);
  const chunks = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''), r.choices[0].message.content);
  const two = await client.chat.completions.create({ ...body, n: 2, seed: 11 });
  assert.equal(two.choices.length, 2);
  for (const c of two.choices) check(c.message.content);

  // llama-server's and vLLM's spellings beside OpenAI's, on completions.
  const rx = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 32, temperature: 1, seed: 3, regex: ' [A-Z][a-z]{1,8} (ran|sat)\\.' });
  assert.match(rx.choices[0].text, /^ [A-Z][a-z]{1,8} (ran|sat)\.$/);
  assert.equal(rx.choices[0].finish_reason, 'stop');

  const bad = { ...body, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', contentEncoding: 'base64' } } } };
  await expectApiError(client.chat.completions.create(bad), 400, (e) => {
    assert.equal(e.param, 'response_format');
    assert.match(e.error.message, /contentEncoding/);
  });
});
