'use strict';
// `wmreplay/agents` under the OpenAI Agents SDK's own runner (`run(agent, input,
// { session })`) with the SDK's scripted model (`@openai/agents/testing`): no
// network, tracing off. Skipped without `@openai/agents` unless
// WMREPLAY_REQUIRE_FRAMEWORKS is set (CI installs it: there a missing SDK is a
// failure). Also checks the entry point's TypeScript types against the SDK's.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const { PACKAGE, PACKAGE_DIR, ROOT, scratch } = require('./support');
const { WmreplaySession } = require(`${PACKAGE}/agents`);
const { tmp } = scratch('wmreplay-agents-');

let sdk;
let testing;
let zod;
test.before(async () => {
  try {
    sdk = await import('@openai/agents');
    testing = await import('@openai/agents/testing');
    zod = await import('zod');
  } catch (e) {
    if (process.env.WMREPLAY_REQUIRE_FRAMEWORKS) throw e;
  }
  if (sdk) sdk.setTracingDisabled(true);
});

// Each test: skipped without the SDK.
function sdkTest(name, fn) {
  test(name, async (t) => {
    if (!sdk) {
      t.skip('@openai/agents is not installed');
      return;
    }
    await fn(t);
  });
}

let n = 0;
const fresh = () => path.join(tmp, `a-${n++}.log`);
const lines = (log) => fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
// An item as JSON holds it: members whose value is `undefined` (the runner
// hands over `providerData: undefined`, …) left out, as JSON.stringify does.
const asJson = (x) => JSON.parse(JSON.stringify(x));
const kind = (i) => (i.type === 'message' || (!i.type && i.role) ? `message:${i.role}` : i.type);

// The session, keeping a copy of every batch the runner adds.
class Recorded extends WmreplaySession {
  added = [];

  async addItems(items) {
    this.added.push(structuredClone(items));
    await super.addItems(items);
  }
}

// The folder of an installed package, from where its entry point resolves.
function packageDir(name) {
  const entry = require.resolve(name);
  const at = entry.lastIndexOf(`node_modules${path.sep}${name}${path.sep}`);
  assert.ok(at >= 0, entry);
  return entry.slice(0, at + `node_modules${path.sep}${name}`.length);
}

function weatherTool() {
  return sdk.tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: zod.z.object({ city: zod.z.string() }),
    execute: async ({ city }) => `sunny in ${city}`,
  });
}

sdkTest('two runs share the history kept in the log, a tool call and its result included', async () => {
  const { ScriptedModel, assistantMessage, functionCall } = testing;
  const log = fresh();
  const model = new ScriptedModel([
    [functionCall('get_weather', { city: 'Paris' }, { callId: 'call_1' })],
    [assistantMessage('It is sunny in Paris.', { id: 'msg_1' })],
    [assistantMessage('You asked about Paris.', { id: 'msg_2' })],
  ]);
  const agent = new sdk.Agent({ name: 'weather', instructions: 'Be brief.', model, tools: [weatherTool()] });
  const session = new Recorded({ logPath: log, sessionId: 'user-1' });
  const r1 = await sdk.run(agent, 'Weather in Paris?', { session });
  const afterFirst = await session.getItems();
  // Another object on the same log, and a streamed run.
  const again = new Recorded({ logPath: log, sessionId: 'user-1' });
  const r2 = await sdk.run(agent, 'What city did I ask about?', { session: again, stream: true });
  for await (const _ of r2) {
    // drain the events
  }
  await r2.completed;
  model.assertComplete();
  assert.equal(r1.finalOutput, 'It is sunny in Paris.');
  assert.equal(r2.finalOutput, 'You asked about Paris.');
  assert.deepStrictEqual(afterFirst.map(kind), ['message:user', 'function_call', 'function_call_result', 'message:assistant']);
  const [, call, result] = afterFirst;
  assert.deepStrictEqual([call.name, call.callId, JSON.parse(call.arguments)], ['get_weather', 'call_1', { city: 'Paris' }]);
  assert.equal(result.callId, 'call_1');
  assert.deepStrictEqual(result.output, { type: 'text', text: 'sunny in Paris' });

  // What the runner added is what comes back, item for item.
  const added = asJson([...session.added, ...again.added].flat());
  const items = await new WmreplaySession({ logPath: log, sessionId: 'user-1' }).getItems();
  assert.deepStrictEqual(items, added);
  assert.deepStrictEqual(items.slice(0, 4), afterFirst);
  const recs = lines(log);
  assert.deepStrictEqual(recs.map((r) => r.type), Array(6).fill('session_item'));
  assert.ok(recs.every((r) => r.session_id === 'user-1' && Number.isInteger(r.ts_ms)));
  assert.deepStrictEqual(recs.map((r) => r.item), added);

  // The second run's model saw the first run's items, then the new question.
  const third = model.calls[2].request.input;
  assert.deepStrictEqual(third.map(kind), ['message:user', 'function_call', 'function_call_result', 'message:assistant', 'message:user']);
  assert.equal(third[0].content, 'Weather in Paris?');
  assert.equal(third[1].callId, 'call_1');
  assert.equal(third[2].callId, 'call_1');
  assert.equal(third[4].content, 'What city did I ask about?');
});

sdkTest('popItem and clearSession are records, and the next run sees what is left', async () => {
  const { ScriptedModel, assistantMessage } = testing;
  const log = fresh();
  const model = new ScriptedModel([
    [assistantMessage('first answer', { id: 'm1' })],
    [assistantMessage('second answer', { id: 'm2' })],
    [assistantMessage('after clear', { id: 'm3' })],
  ]);
  const agent = new sdk.Agent({ name: 'a', model });
  const s = new WmreplaySession({ logPath: log, sessionId: 's' });
  await sdk.run(agent, 'one', { session: s });
  const popped = await s.popItem();
  assert.equal(popped.role, 'assistant');
  assert.equal(popped.content[0].text, 'first answer');
  assert.deepStrictEqual((await s.getItems()).map((i) => i.content), ['one']);
  await sdk.run(agent, 'two', { session: s });
  assert.deepStrictEqual(model.calls[1].request.input.map((i) => i.content), ['one', 'two'], 'the popped answer is gone');
  await s.clearSession();
  assert.deepStrictEqual(await s.getItems(), []);
  await sdk.run(agent, 'three', { session: s });
  assert.deepStrictEqual(model.calls[2].request.input.map((i) => i.content), ['three'], 'the cleared history is gone');
  assert.deepStrictEqual((await s.getItems()).map(kind), ['message:user', 'message:assistant']);

  const recs = lines(log);
  assert.deepStrictEqual(recs.map((r) => r.type), ['session_item', 'session_item', 'session_pop', 'session_item', 'session_item',
    'session_clear', 'session_item', 'session_item']);
  const firstLine = fs.readFileSync(log, 'utf8').indexOf('\n') + 1;
  assert.deepStrictEqual(recs[2].popped, { offset: firstLine, ts_ms: recs[1].ts_ms });
  assert.deepStrictEqual(recs[1].item, popped, 'nothing deleted: the popped item is still in its record');
});

sdkTest("the SDK's MemorySession and this session give the runner the same history", async () => {
  const { ScriptedModel, assistantMessage, functionCall } = testing;
  const script = () => [
    [functionCall('get_weather', { city: 'Rome' }, { callId: 'call_r' })],
    [assistantMessage('Sunny in Rome.', { id: 'r1' })],
    [assistantMessage('Rome.', { id: 'r2' })],
  ];
  const inputs = [];
  for (const session of [new sdk.MemorySession({ sessionId: 'm' }), new WmreplaySession({ logPath: fresh(), sessionId: 'm' })]) {
    const model = new ScriptedModel(script());
    const agent = new sdk.Agent({ name: 'w', model, tools: [weatherTool()] });
    await sdk.run(agent, 'Rome?', { session });
    await sdk.run(agent, 'Which city?', { session });
    inputs.push(asJson({ calls: model.calls.map((c) => c.request.input), items: await session.getItems(), last2: await session.getItems(2) }));
  }
  assert.equal(inputs[0].calls.length, 3);
  assert.equal(inputs[0].items.length, 6);
  assert.deepStrictEqual(inputs[1], inputs[0]);
});

sdkTest('the types of wmreplay/agents fit the SDK: a Session for run()', (t) => {
  let tsc;
  try {
    tsc = require.resolve('typescript/bin/tsc', { paths: [path.join(ROOT, 'bindings/node')] });
  } catch {
    t.skip('no TypeScript in bindings/node/node_modules (npm ci there)');
    return;
  }
  const project = fs.mkdtempSync(path.join(tmp, 'types-'));
  fs.mkdirSync(path.join(project, 'node_modules'));
  // 'junction': a directory link Windows makes without extra rights; ignored elsewhere.
  fs.symlinkSync(PACKAGE_DIR, path.join(project, 'node_modules', 'wmreplay'), 'junction');
  // The SDK as this test resolves it (its own dependencies beside it).
  fs.symlinkSync(path.dirname(packageDir('@openai/agents')), path.join(project, 'node_modules', '@openai'), 'junction');
  fs.symlinkSync(packageDir('zod'), path.join(project, 'node_modules', 'zod'), 'junction');
  fs.writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      noEmit: true, strict: true, module: 'node16', moduleResolution: 'node16', target: 'es2022',
      types: [], skipLibCheck: true,
    },
    files: ['agents.mts'],
  }));
  fs.writeFileSync(path.join(project, 'agents.mts'), `
import { Agent, run, type AgentInputItem, type Session } from '@openai/agents';
import { WmreplaySession, SESSION_RECORD_TYPES, type WmreplaySessionOptions } from 'wmreplay/agents';
import { records, type LogRecord } from 'wmreplay';

const options: WmreplaySessionOptions = { logPath: 'wm.log', sessionId: 'user-1' };
const session: Session = new WmreplaySession(options);
const typed = new WmreplaySession({ logPath: 'wm.log' });
const agent = new Agent({ name: 'a' });
const result = await run(agent, 'hi', { session: typed });
const out: unknown = result.finalOutput;
const items: AgentInputItem[] = await typed.getItems(3);
const popped: AgentInputItem | undefined = await session.popItem();
const id: string = (await typed.getSessionId()) + typed.sessionId + typed.logPath;
const kinds: readonly string[] = SESSION_RECORD_TYPES;
const found: LogRecord[] = await records('wm.log', { kinds: [...kinds], session: id, order: 'log' });
const offset: number = found[0].offset + (found[0].ts_ms ?? 0) + (await typed.liveItems())[0].entry.offset;
// @ts-expect-error: the log's path is required
new WmreplaySession({ sessionId: 'x' });
// @ts-expect-error: an order is "replay" or "log"
await records('wm.log', { order: 'time' });
export { out, items, popped, offset };
`);
  const r = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
