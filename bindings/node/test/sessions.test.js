'use strict';
// `records()` and the session records of `wmreplay/agents` without the SDK: the
// fold of items, pops and clears, limits, errors, concurrent writers (other
// sessions and processes, append(), `wmreplay serve`), and that neither entry
// point loads `@openai/agents`. The SDK's own runs are in agents.test.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawn, spawnSync } = require('child_process');
const { pathToFileURL } = require('url');

const { INSTALLED, PACKAGE, scratch, serve, stop } = require('./support');
const { records, append, replayWorkingMemoryLog } = require(PACKAGE);
const { WmreplaySession, SESSION_RECORD_TYPES } = require(`${PACKAGE}/agents`);
const { tmp, write } = scratch('wmreplay-sessions-');

let n = 0;
const fresh = () => path.join(tmp, `s-${n++}.log`);
const lines = (log) => fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
function offsets(log) {
  const out = [];
  let at = 0;
  for (const l of fs.readFileSync(log).toString('latin1').split('\n').slice(0, -1)) {
    out.push(at);
    at += l.length + 1;
  }
  return out;
}

test('records() gives each record with its offset, in replay or log order, with the filters', async () => {
  const rows = [
    { type: 'text_input', ts_ms: 30, session_id: 's', text: 'late' },
    { type: 'wm_event', ts_ms: 10, n: 1.5 },
    { type: 'text_output', ts_ms: 20, session_id: 't', text: 'é' },
  ];
  const log = write(rows.map((r) => JSON.stringify(r)).join('\n') + '\nnot json\n');
  const at = offsets(log);
  const byReplay = await records(log, { warn: false });
  assert.deepStrictEqual(byReplay.map((r) => Object.keys(r)), Array(3).fill(['offset', 'ts_ms', 'type', 'record']));
  assert.deepStrictEqual(byReplay.map((r) => r.record), [rows[1], rows[2], rows[0]]);
  assert.deepStrictEqual(byReplay.map((r) => r.offset), [at[1], at[2], at[0]]);
  assert.deepStrictEqual(byReplay.map((r) => [r.ts_ms, r.type]), [[10, 'wm_event'], [20, 'text_output'], [30, 'text_input']]);
  assert.deepStrictEqual((await records(log, { order: 'log' })).map((r) => r.record), rows);
  assert.deepStrictEqual((await records(log, { session: 's', order: 'log' })).map((r) => r.record), [rows[0], rows[1]]);
  assert.deepStrictEqual((await records(log, { kinds: ['text_output'] })).map((r) => r.record), [rows[2]]);
  assert.deepStrictEqual((await records(log, { since: 15, until: 25 })).map((r) => r.ts_ms), [20]);
  assert.deepStrictEqual(await records(path.join(tmp, 'none.log')), []);
  await assert.rejects(records(path.join(tmp, 'none.log'), { requireLog: true }), { code: 'ENOENT' });
  await assert.rejects(records(tmp), (e) => e.code === 'EISDIR' && e.path === tmp);
  await assert.rejects(records(log, { order: 'time' }), { name: 'TypeError', code: 'EINVALIDARG', field: 'order' });
  await assert.rejects(records(log, { since: '1' }), { code: 'EINVALIDARG', field: 'since' });
  await assert.rejects(records(log, { sessions: 's' }), { code: 'EINVALIDARG', field: 'sessions' });
});

test('items, pops and clears are records, and a session is their fold', async () => {
  const log = fresh();
  fs.writeFileSync(log, '{"type":"wm_event","ts_ms":1}\n');
  const s = new WmreplaySession({ logPath: log, sessionId: 's1' });
  const other = new WmreplaySession({ logPath: log, sessionId: 's2' });
  assert.equal(await s.getSessionId(), 's1');
  assert.deepStrictEqual(await s.getItems(), []);
  assert.equal(await s.popItem(), undefined);
  assert.equal(lines(log).length, 1, 'popping an empty session writes nothing');
  const a = { type: 'message', role: 'user', content: 'hi' };
  const b = { type: 'function_call', callId: 'c1', name: 'f', arguments: '{"x":[1,2.5,null]}', status: 'completed' };
  const c = { type: 'function_call_result', callId: 'c1', name: 'f', status: 'completed', output: { type: 'text', text: 'ok ✓' } };
  await s.addItems([a, b]);
  await other.addItems([{ type: 'message', role: 'user', content: 'elsewhere' }]);
  await s.addItems([c]);
  assert.deepStrictEqual(await s.getItems(), [a, b, c]);
  const recs = lines(log);
  const at = offsets(log);
  assert.deepStrictEqual(recs[1], { ts_ms: recs[1].ts_ms, type: 'session_item', session_id: 's1', item: a });
  assert.deepStrictEqual(Object.keys(recs[1]), ['ts_ms', 'type', 'session_id', 'item'], 'stamped first, by append()');

  assert.deepStrictEqual(await s.popItem(), c);
  const pop = lines(log).at(-1);
  assert.deepStrictEqual(pop, { ts_ms: pop.ts_ms, type: 'session_pop', session_id: 's1', popped: { offset: at[4], ts_ms: recs[4].ts_ms } });
  assert.deepStrictEqual(await s.getItems(), [a, b]);
  assert.deepStrictEqual(await s.popItem(), b);
  await s.addItems([c]);
  assert.deepStrictEqual(await s.getItems(), [a, c]);
  await s.clearSession();
  const clear = lines(log).at(-1);
  assert.deepStrictEqual(clear, { ts_ms: clear.ts_ms, type: 'session_clear', session_id: 's1' });
  assert.deepStrictEqual(await s.getItems(), []);
  await s.addItems([b]);
  assert.deepStrictEqual(await s.getItems(), [b], 'items added after a clear stay');
  assert.deepStrictEqual(await other.getItems(), [{ type: 'message', role: 'user', content: 'elsewhere' }]);
  assert.deepStrictEqual(lines(log).map((r) => r.type), ['wm_event', 'session_item', 'session_item', 'session_item', 'session_item',
    'session_pop', 'session_pop', 'session_item', 'session_clear', 'session_item'], 'nothing deleted');
  assert.deepStrictEqual([...SESSION_RECORD_TYPES], ['session_item', 'session_pop', 'session_clear']);
});

test("getItems(limit) is the latest N in chronological order, as the SDK's MemorySession", async () => {
  const s = new WmreplaySession({ logPath: fresh() });
  assert.match(s.sessionId, /^[0-9a-f-]{36}$/, 'a random id by default');
  const items = [0, 1, 2, 3, 4].map((i) => ({ type: 'message', role: 'user', content: String(i) }));
  await s.addItems(items);
  assert.deepStrictEqual(await s.getItems(), items);
  assert.deepStrictEqual(await s.getItems(2), items.slice(3));
  assert.deepStrictEqual(await s.getItems(5), items);
  assert.deepStrictEqual(await s.getItems(50), items);
  assert.deepStrictEqual(await s.getItems(0), []);
  assert.deepStrictEqual(await s.getItems(-1), []);
  await s.popItem();
  assert.deepStrictEqual(await s.getItems(2), items.slice(2, 4));
  await assert.rejects(s.getItems('2'), { code: 'EINVALIDARG', field: 'limit' });
});

test('items come back exactly as added', async () => {
  const log = fresh();
  const item = {
    type: 'message', role: 'assistant', id: 'msg_1', status: 'completed',
    content: [{ type: 'output_text', text: 'line\nbreak "quoted" \\ \u2028 😀 \ud800 lone', providerData: { annotations: [] } }],
    numbers: [0, -1, 9007199254740991, 1.5, 1e-7, 1.7976931348623157e308],
    nested: { a: { b: { c: [null, true, false, {}, []] } } },
    '': 'empty key', 'unicode key é': 'x',
  };
  await new WmreplaySession({ logPath: log, sessionId: 'rt' }).addItems([item]);
  const [back] = await new WmreplaySession({ logPath: log, sessionId: 'rt' }).getItems();
  assert.deepStrictEqual(back, item);
  assert.deepStrictEqual(Object.keys(back), Object.keys(item), 'key order kept');
});

test('bad items and options are TypeErrors naming them, and write nothing', async () => {
  const log = fresh();
  const s = new WmreplaySession({ logPath: log, sessionId: 's' });
  await s.addItems([{ type: 'message', role: 'user', content: 'kept' }]);
  const before = fs.readFileSync(log);
  await assert.rejects(s.addItems([{ ok: 1 }, 'no']), { name: 'TypeError', code: 'EINVALIDARG', message: 'addItems: item 1 must be an object' });
  await assert.rejects(s.addItems([{ ok: 1 }, { n: 10n }]), (e) => e.code === 'EINVALIDARG' && e.message.startsWith(`${log}: addItems: item 1 cannot be written as JSON`));
  await assert.rejects(s.addItems({}), { code: 'EINVALIDARG', field: 'items' });
  assert.deepStrictEqual(fs.readFileSync(log), before);
  assert.throws(() => new WmreplaySession(), { code: 'EINVALIDARG', field: 'logPath' });
  assert.throws(() => new WmreplaySession({ logPath: log, sessionId: 42 }), { code: 'EINVALIDARG', field: 'sessionId' });
  assert.throws(() => new WmreplaySession({ logPath: log, session: 'x' }), { code: 'EINVALIDARG', field: 'session' });
  await assert.rejects(new WmreplaySession({ logPath: tmp, sessionId: 's' }).getItems(), (e) => e.code === 'EISDIR' && e.path === tmp);
  await assert.rejects(new WmreplaySession({ logPath: tmp, sessionId: 's' }).addItems([{ a: 1 }]), (e) => e.code === 'EISDIR' && e.path === tmp);
});

test("other writers' session records are read by the same rules, with a warning for those that cannot apply", async () => {
  const rows = [
    { type: 'session_item', ts_ms: 1, session_id: 's', item: { n: 1 } },
    { type: 'session_item', ts_ms: 2, item: { n: 'no session' } },
    { type: 'session_item', ts_ms: 3, session_id: 's' },
    { type: 'session_item', ts_ms: 4, session_id: 's', item: { n: 2 } },
    { type: 'session_pop', ts_ms: 5, session_id: 's', popped: { offset: 'x' } },
    { type: 'session_item', ts_ms: 0, session_id: 's', item: { n: 3, ts: 'earlier' } },
    { type: 'session_pop', ts_ms: 6, session_id: 's', popped: { offset: 0 } },
    { type: 'session_pop', ts_ms: 7, session_id: 's', popped: { offset: 0 } },
  ];
  const log = write(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const at = offsets(log);
  const warnings = [];
  const listen = (w) => warnings.push(w);
  process.on('warning', listen);
  let items;
  try {
    items = await new WmreplaySession({ logPath: log, sessionId: 's' }).getItems();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', listen);
  }
  // Log order, not ts_ms order; a pop of an item popped already pops nothing more.
  assert.deepStrictEqual(items, [{ n: 2 }, { n: 3, ts: 'earlier' }]);
  assert.deepStrictEqual(warnings.map((w) => w.code), ['WMREPLAY_SESSION_RECORD', 'WMREPLAY_SESSION_RECORD']);
  assert.ok(warnings[0].message.startsWith(`${log}: byte ${at[2]}: a session_item record without \`item\``), warnings[0].message);
  assert.ok(warnings[1].message.startsWith(`${log}: byte ${at[4]}: a session_pop record`), warnings[1].message);
});

test('the pops of one process take turns: each item is popped once', async () => {
  const log = fresh();
  const items = Array.from({ length: 10 }, (_, i) => ({ n: i }));
  await new WmreplaySession({ logPath: log, sessionId: 's' }).addItems(items);
  const popped = await Promise.all(items.map(() => new WmreplaySession({ logPath: log, sessionId: 's' }).popItem()));
  assert.deepStrictEqual(popped.sort((x, y) => x.n - y.n), items);
  assert.deepStrictEqual(await new WmreplaySession({ logPath: log, sessionId: 's' }).getItems(), []);
  assert.equal(new Set(lines(log).filter((r) => r.type === 'session_pop').map((r) => r.popped.offset)).size, 10);
});

test('sessions in several processes, append() and `wmreplay serve` on one log never tear or interleave', async () => {
  const log = fresh();
  fs.writeFileSync(log, '{"type":"wm_event","ts_ms":1}\n');
  const ROUNDS = 25;
  const { url, child } = await serve(log);
  const script = `
    const { WmreplaySession } = require(${JSON.stringify(require.resolve(`${PACKAGE}/agents`))});
    (async () => {
      const s = new WmreplaySession({ logPath: process.argv[1], sessionId: process.argv[2] });
      for (let i = 0; i < ${ROUNDS}; i++) await s.addItems([{ who: process.argv[2], n: i, k: 0 }, { who: process.argv[2], n: i, k: 1 }]);
    })().catch((e) => { console.error(e); process.exit(1); });`;
  try {
    const procs = ['proc-0', 'proc-1'].map((who) => new Promise((resolve, reject) => {
      const p = spawn(process.execPath, ['-e', script, log, who], { stdio: ['ignore', 'ignore', 'inherit'] });
      p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${who} exited ${code}`))));
    }));
    const inProcess = ['here-0', 'here-1'].map(async (who) => {
      const s = new WmreplaySession({ logPath: log, sessionId: who });
      for (let i = 0; i < ROUNDS; i++) await s.addItems([{ who, n: i, k: 0 }, { who, n: i, k: 1 }]);
    });
    const server = (async () => {
      for (let i = 0; i < ROUNDS; i++) {
        const r = await fetch(`${url}/v1/records`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify([0, 1].map((k) => ({ type: 'wm_event', who: 'serve', n: i, k }))),
        });
        assert.equal(r.status, 200, await r.text());
      }
    })();
    const appender = (async () => {
      for (let i = 0; i < ROUNDS; i++) await append(log, [0, 1].map((k) => ({ type: 'wm_event', who: 'append', n: i, k })));
    })();
    await Promise.all([...procs, ...inProcess, server, appender]);
  } finally {
    await stop(child);
  }
  const text = fs.readFileSync(log, 'utf8');
  assert.ok(text.endsWith('\n'));
  const recs = text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
  assert.equal((await replayWorkingMemoryLog({ logPath: log })).stats.skipped_invalid_json, 0);
  for (let i = 0; i + 1 < recs.length; i++) {
    const first = recs[i].item ?? recs[i];
    if (first.k === 0) {
      const second = recs[i + 1].item ?? recs[i + 1];
      assert.deepStrictEqual([second.who, second.n, second.k], [first.who, first.n, 1], 'a batch is whole');
    }
  }
  for (const who of ['proc-0', 'proc-1', 'here-0', 'here-1']) {
    const want = [];
    for (let i = 0; i < ROUNDS; i++) want.push({ who, n: i, k: 0 }, { who, n: i, k: 1 });
    assert.deepStrictEqual(await new WmreplaySession({ logPath: log, sessionId: who }).getItems(), want, who);
  }
  assert.equal(recs.filter((r) => r.who === 'serve').length, 2 * ROUNDS);
  assert.equal(recs.filter((r) => r.who === 'append').length, 2 * ROUNDS);
});

test('neither wmreplay nor wmreplay/agents loads @openai/agents', () => {
  // Loading the SDK is refused in this child: both entry points still work.
  const script = `
    const Module = require('module');
    const load = Module._load;
    Module._load = function (request, ...rest) {
      if (request.startsWith('@openai/') || request === 'openai') throw new Error('refused: ' + request);
      return load.call(this, request, ...rest);
    };
    const wm = require(${JSON.stringify(require.resolve(PACKAGE))});
    const { WmreplaySession } = require(${JSON.stringify(require.resolve(`${PACKAGE}/agents`))});
    const s = new WmreplaySession({ logPath: process.argv[1], sessionId: 'x' });
    s.addItems([{ type: 'message', role: 'user', content: 'hi' }]).then(() => s.getItems()).then((items) => {
      console.log(JSON.stringify({ items, append: typeof wm.append }));
    });`;
  const r = spawnSync(process.execPath, ['-e', script, fresh()], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.deepStrictEqual(JSON.parse(r.stdout), { items: [{ type: 'message', role: 'user', content: 'hi' }], append: 'function' });
});

test('wmreplay/agents as an ES module is the same module', async () => {
  // By name through the package's exports when it is installed, else the file.
  const cjsPath = require.resolve(`${PACKAGE}/agents`);
  const esm = await import(INSTALLED ? `${PACKAGE}/agents` : pathToFileURL(cjsPath.replace(/\.js$/, '.mjs')).href);
  const cjs = require(`${PACKAGE}/agents`);
  assert.equal(esm.WmreplaySession, cjs.WmreplaySession);
  assert.equal(esm.default, cjs);
  assert.deepStrictEqual(esm.SESSION_RECORD_TYPES, cjs.SESSION_RECORD_TYPES);
});
