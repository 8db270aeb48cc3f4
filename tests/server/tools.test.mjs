// Tool calls through the official OpenAI client (openai-node) against a
// random-weight model with Qwen 3's tokenizer and chat template (whose
// calls are <tool_call>{...}</tool_call>), run by tests/scripts/server.sh:
//   TESSERA_URL   that server
// A random model calls tools only when it must (tool_choice "required" or
// a named function): those calls must parse into OpenAI tool_calls whose
// arguments validate against the function's parameters.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.TESSERA_URL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const MESSAGES = [{ role: 'user', content: 'What is the weather in Paris, and what time is it there?' }];
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city.',
      strict: true,
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 24 }, unit: { enum: ['celsius', 'fahrenheit'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      strict: true,
      parameters: { type: 'object', properties: { zone: { type: 'integer', minimum: -12, maximum: 14 } }, required: ['zone'], additionalProperties: false },
    },
  },
];

function validate(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city', 'unit'], call.function.arguments);
    assert.ok(typeof args.city === 'string' && [...args.city].length <= 24);
    assert.ok(['celsius', 'fahrenheit'].includes(args.unit));
  } else {
    assert.equal(call.function.name, 'get_time');
    assert.deepEqual(Object.keys(args), ['zone']);
    assert.ok(Number.isInteger(args.zone) && args.zone >= -12 && args.zone <= 14);
  }
}

const MODEL = (await client.models.list()).data[0].id;
const base = { model: MODEL, messages: MESSAGES, tools: TOOLS, max_tokens: 256, temperature: 1 };

test('tool_choice names a function: one call to it, its arguments valid', async () => {
  const r = await client.chat.completions.create({ ...base, seed: 1, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  validate(m.tool_calls[0]);
});

test('tool_choice required, streamed: the deltas assemble into valid calls, the same as unstreamed', async () => {
  const body = { ...base, seed: 2, tool_choice: 'required' };
  const whole = await client.chat.completions.create(body);
  assert.equal(whole.choices[0].finish_reason, 'tool_calls');
  assert.ok(whole.choices[0].message.tool_calls.length >= 1);
  whole.choices[0].message.tool_calls.forEach(validate);
  const calls = [];
  let finish = null;
  for await (const chunk of await client.chat.completions.create({ ...body, stream: true })) {
    const c = chunk.choices[0];
    if (!c) continue;
    for (const d of c.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].function.name += d.function.name;
      if (d.function?.arguments) calls[d.index].function.arguments += d.function.arguments;
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.function.name, c.function.arguments]),
    whole.choices[0].message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  calls.forEach(validate);
});

test('tool results go back through the template; auto replies are well-formed', async () => {
  const first = await client.chat.completions.create({ ...base, seed: 3, tool_choice: 'required', parallel_tool_calls: false });
  const call = first.choices[0].message.tool_calls[0];
  assert.equal(first.choices[0].message.tool_calls.length, 1);
  const r = await client.chat.completions.create({
    ...base, seed: 4, max_tokens: 16, tool_choice: 'auto',
    messages: [...MESSAGES, first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: '{"ok": true}' }],
  });
  const m = r.choices[0].message;
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  assert.ok(typeof m.content === 'string' || Array.isArray(m.tool_calls));
  await assert.rejects(client.chat.completions.create({ ...base, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e.status === 400 && e.error?.param === 'tool_choice');
});
