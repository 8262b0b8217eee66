// The official TypeScript SDKs (`@anthropic-ai/sdk`, `openai`, from npm)
// pointed at `wmreplay serve`, which calls the test's mock model: the same
// steps as python_sdks.py, in the SDKs' JavaScript; the Rust test that runs
// this script (tests/service/sdk_clients.rs) checks the log and what the model was
// sent.
//
// Usage: node node_sdks.mjs anthropic|openai ROOT_URL NODE_MODULES_PARENT
// Prints one JSON object: what each step saw.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [provider, rootArg, modules] = process.argv.slice(2);
const root = rootArg.replace(/\/$/, '');
const require = createRequire(`${modules}/`);
const load = async (name) => {
  const m = await import(pathToFileURL(require.resolve(name)).href);
  return m.default ?? m;
};

const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
};
const TOOL_TEXT = 'What is the weather?\nTOOLS: [[{"name":"get_weather","input":{"city":"Paris"}}]]';

async function raises(f, Class) {
  try {
    await f();
  } catch (e) {
    assert.ok(e instanceof Class, `${e?.constructor?.name}: ${e}`);
    return e;
  }
  throw new Error(`${Class.name} was expected`);
}

async function anthropicSteps() {
  const Anthropic = await load('@anthropic-ai/sdk');
  const seen = {};
  const c = new Anthropic({ baseURL: `${root}/anthropic`, apiKey: 'sk-client', maxRetries: 0 });
  const model = 'claude-test';

  const m = await c.messages.create({
    model,
    max_tokens: 100,
    system: 'Answer briefly.',
    messages: [{ role: 'user', content: 'first question' }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.content[0].type, 'text');
  assert.equal(m.model, model);
  seen.plain = m.content[0].text;

  const history = [
    { role: 'user', content: 'first question' },
    { role: 'assistant', content: m.content[0].text },
    { role: 'user', content: 'second question' },
  ];
  const s = c.messages.stream({ model, max_tokens: 100, messages: history });
  let streamed = '';
  s.on('text', (t) => {
    streamed += t;
  });
  const final = await s.finalMessage();
  assert.equal(final.content[0].text, streamed);
  assert.equal(final.stop_reason, 'end_turn');
  seen.streamed = streamed;

  const tools = [{ name: 'get_weather', description: 'The weather in a city.', input_schema: WEATHER }];
  const msgs = [{ role: 'user', content: TOOL_TEXT }];
  const r1 = await c.messages.create({ model, max_tokens: 100, tools, messages: msgs });
  assert.equal(r1.stop_reason, 'tool_use');
  const call = r1.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(call.input, { city: 'Paris' });
  msgs.push(
    { role: 'assistant', content: r1.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny in Paris' }] },
  );
  const r2 = await c.messages.stream({ model, max_tokens: 100, tools, messages: msgs }).finalMessage();
  const text = r2.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  assert.ok(text.includes('Sunny in Paris'), text);
  seen.tool_call_id = call.id;
  seen.tool_answer = text;

  const bad = await raises(
    () =>
      c.messages.create({
        model,
        max_tokens: 100,
        top_k: 'many',
        messages: [{ role: 'user', content: 'never sent' }],
      }),
    Anthropic.BadRequestError,
  );
  assert.equal(bad.status, 400);
  seen.bad_request = bad.error;

  const limited = await raises(
    () => c.messages.create({ model, max_tokens: 100, messages: [{ role: 'user', content: 'limited\nMOCK_STATUS: 429' }] }),
    Anthropic.RateLimitError,
  );
  assert.equal(limited.status, 429);
  seen.rate_limited = limited.error;

  const retrying = new Anthropic({ baseURL: `${root}/anthropic`, apiKey: 'sk-client', maxRetries: 2 });
  let r = await retrying.messages.create({
    model,
    max_tokens: 100,
    messages: [{ role: 'user', content: 'retried\nMOCK_FAIL_ONCE: 503' }],
  });
  seen.retried_503 = r.content[0].text;
  r = await retrying.messages.create(
    { model, max_tokens: 100, messages: [{ role: 'user', content: 'slow\nMOCK_SLOW: 1800' }] },
    { timeout: 1000 },
  );
  seen.retried_timeout = r.content[0].text;

  const other = new Anthropic({ baseURL: `${root}/anthropic`, apiKey: 'sk-client', maxRetries: 0 });
  r = await other.messages.create({
    model,
    max_tokens: 100,
    messages: [{ role: 'user', content: 'what did I ask before?' }],
  });
  seen.second_session = r.content[0].text;

  // Beside the messages: the upstream's models, a count of the tokens the
  // server would send, and an unknown path raised as the SDK's own 404.
  const models = [];
  for await (const m of other.models.list()) models.push(m.id);
  assert.deepEqual(models, ['test-model']);
  const counted = await other.messages.countTokens({ model, messages: [{ role: 'user', content: 'count me' }] });
  assert.ok(counted.input_tokens > 0, JSON.stringify(counted));
  await raises(() => other.models.retrieve('no-such-model'), Anthropic.NotFoundError);
  seen.models = models;
  seen.counted = counted.input_tokens;
  return seen;
}

async function openaiSteps() {
  const OpenAI = await load('openai');
  const seen = {};
  const c = new OpenAI({ baseURL: `${root}/openai/v1`, apiKey: 'sk-client', maxRetries: 0 });
  const model = 'gpt-test';

  const r0 = await c.chat.completions.create({
    model,
    messages: [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'first question' },
    ],
  });
  assert.equal(r0.object, 'chat.completion');
  assert.equal(r0.choices[0].finish_reason, 'stop');
  const first = r0.choices[0].message.content;
  seen.plain = first;

  const history = [
    { role: 'user', content: 'first question' },
    { role: 'assistant', content: first },
    { role: 'user', content: 'second question' },
  ];
  const final = await c.chat.completions.stream({ model, messages: history }).finalChatCompletion();
  seen.streamed = final.choices[0].message.content;
  assert.ok(seen.streamed.includes('second question'));

  // The SDK's own tool loop: it runs the tool and sends the result.
  const runner = c.chat.completions.runTools({
    model,
    messages: [{ role: 'user', content: TOOL_TEXT }],
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'The weather in a city.',
          parameters: WEATHER,
          function: (args) => `Sunny in ${(typeof args === 'string' ? JSON.parse(args) : args).city}`,
          parse: JSON.parse,
        },
      },
    ],
  });
  const text = await runner.finalContent();
  assert.ok(text.includes('Sunny in Paris'), text);
  const calls = (await runner.allChatCompletions())
    .flatMap((cc) => cc.choices[0].message.tool_calls ?? []);
  seen.tool_call_id = calls[0].id;
  seen.tool_answer = text;

  const bad = await raises(
    () => c.chat.completions.create({ model, temperature: 'hot', messages: [{ role: 'user', content: 'never sent' }] }),
    OpenAI.BadRequestError,
  );
  assert.equal(bad.status, 400);
  seen.bad_request = bad.error;

  const limited = await raises(
    () => c.chat.completions.create({ model, messages: [{ role: 'user', content: 'limited\nMOCK_STATUS: 429' }] }),
    OpenAI.RateLimitError,
  );
  seen.rate_limited = limited.error;

  const retrying = new OpenAI({ baseURL: `${root}/openai/v1`, apiKey: 'sk-client', maxRetries: 2 });
  let r = await retrying.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'retried\nMOCK_FAIL_ONCE: 503' }],
  });
  seen.retried_503 = r.choices[0].message.content;
  r = await retrying.chat.completions.create(
    { model, messages: [{ role: 'user', content: 'slow\nMOCK_SLOW: 1800' }] },
    { timeout: 1000 },
  );
  seen.retried_timeout = r.choices[0].message.content;

  const other = new OpenAI({ baseURL: `${root}/openai/v1`, apiKey: 'sk-client', maxRetries: 0 });
  r = await other.chat.completions.create({ model, messages: [{ role: 'user', content: 'what did I ask before?' }] });
  seen.second_session = r.choices[0].message.content;

  const models = [];
  for await (const m of other.models.list()) models.push(m.id);
  assert.deepEqual(models, ['test-model']);
  await raises(() => other.models.retrieve('no-such-model'), OpenAI.NotFoundError);
  seen.models = models;
  return seen;
}

const seen = provider === 'anthropic' ? await anthropicSteps() : await openaiSteps();
console.log(JSON.stringify(seen));
