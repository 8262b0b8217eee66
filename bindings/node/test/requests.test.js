'use strict';
// Request bodies that are requests (model, token limit, params), selections,
// cache breakpoints and the pending mark, against the CLI's `respond`; the
// options' checks and defaults; append() beside `wmreplay serve`; the ES
// module; lone surrogates in `type`; a missing log and a log of junk.
//
// The package under test is chosen in support.js (WMREPLAY_PACKAGE, else
// this checkout; WMREPLAY_REPO, WMREPLAY_BIN).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');

const { PACKAGE, PACKAGE_DIR, ROOT, oracle, EXAMPLE, cli, scratch, serve, stop } = require('./support');
const wm = require(PACKAGE);
const { replayWorkingMemoryLog, buildRequestBody, LiveReplay, append } = wm;
const { tmp, write } = scratch('wmreplay-node-requests-');

// A log with turns and events: the example, then a burst of events longer
// than the cache's lookback, and an unanswered text_input at the end.
function turnsLog() {
  const lines = [fs.readFileSync(EXAMPLE, 'utf8').trimEnd()];
  for (let i = 0; i < 90; i++) {
    lines.push(JSON.stringify({ type: i % 3 ? 'wm_event' : 'text_output', ts_ms: 1763700100000 + i, session_id: `s-${i % 2}`, n: i }));
  }
  // Keyed facts and a summary of the first part (for summaries and facts).
  lines.push('{"type":"wm_fact","ts_ms":1763700100010,"key":"user.name","value":"Ann"}');
  lines.push('{"type":"wm_fact","ts_ms":1763700100020,"key":"tone","value":{"short":true}}');
  lines.push('{"type":"wm_summary","ts_ms":1763700100050,"covers":{"ts_ms":1763700100030,"offset":0},"text":"earlier turns"}');
  lines.push('{"type": "text_input", "ts_ms": 1763700200000, "session_id": "s-0", "text": "pending?"}');
  return write(lines.join('\n') + '\n');
}

// The CLI's flags for a package's options.
function flags(o) {
  const out = [];
  const add = (name, v) => out.push(`--${name}`, String(v));
  if (o.sessionId !== undefined) add('session', o.sessionId);
  if (o.sessionOnly) out.push('--session-only');
  if (o.format) add('format', o.format);
  if (o.system) add('system', o.system);
  if (o.record) add('record', o.record);
  if (o.model) add('model', o.model);
  if (o.maxOutputTokens !== undefined) add('max-output-tokens', o.maxOutputTokens);
  for (const [k, v] of Object.entries(o.params ?? {})) add('param', `${k}=${JSON.stringify(v)}`);
  if (o.kinds) add('kinds', o.kinds.join(','));
  if (o.since !== undefined) add('since', o.since);
  if (o.until !== undefined) add('until', o.until);
  if (o.tail !== undefined) add('tail', o.tail);
  if (o.maxTokens !== undefined) add('max-tokens', o.maxTokens);
  if (o.tokenizer) add('tokenizer', o.tokenizer);
  if (o.trimTo !== undefined) add('trim-to', o.trimTo);
  if (o.startOn) add('start-on', o.startOn);
  if (o.markPending) out.push('--mark-pending');
  if (o.summaries) out.push('--summaries');
  if (o.facts) out.push('--facts');
  if (o.cache) add('cache', o.cache);
  if (o.cacheTtl) add('cache-ttl', o.cacheTtl);
  if (o.state) add('state', o.state);
  if (o.recall !== undefined) add('recall', o.recall);
  if (o.language) add('language', o.language);
  return out;
}

function respond(logPath, o) {
  return execFileSync(cli(), ['respond', logPath, '--text', o.text, ...flags(o)], { stdio: ['ignore', 'pipe', 'ignore'] });
}

// Option sets `respond` takes, each with the window, selection and marks it
// exercises. Those with a model need the CLI's --model.
const CASES = [
  { tail: 12, cache: 'auto' },
  { maxTokens: 900, tokenizer: 'o200k_base', startOn: 'text_input', markPending: true },
  { maxTokens: 700, tokenizer: 'cl100k_base', cache: 'auto', cacheTtl: '1h' },
  { tail: 40, sessionOnly: true, sessionId: 's-0', kinds: ['wm_event', 'text_input'], since: 1763700000000 },
  { until: 1763700150000, markPending: true, format: 'openai', system: 'Be brief.' },
  { maxTokens: 500, tokenizer: 'bytes', format: 'ndjson' },
  { tail: 5, format: 'xml', record: 'js' },
  { model: 'claude-sonnet-4-5', tail: 12, cache: 'auto', markPending: true },
  { model: 'claude-opus-4-5', maxOutputTokens: 200, params: { temperature: 0.2, stop_sequences: ['END'] }, maxTokens: 800 },
  { model: 'gpt-5', format: 'openai', params: { max_tokens: 50, stop: ['END'] }, tail: 20 },
  { summaries: true, facts: true, tail: 30 },
  { summaries: true, model: 'claude-sonnet-4-5', cache: 'auto', markPending: true },
  { facts: true, format: 'openai' },
];

test("recall is the CLI's respond --recall, byte for byte", async () => {
  const log = turnsLog();
  const text = 'what was the user refactoring yesterday, the replay module?';
  for (const c of [{ recall: 2, tail: 5 }, { recall: 3, tail: 5, language: 'none', format: 'openai' }, { recall: 1, kinds: ['wm_event'], model: 'claude-sonnet-4-5' }]) {
    const o = { text, ...c };
    const want = respond(log, o);
    assert.ok(want.includes('WM_KIND=recall'), JSON.stringify(c));
    assert.ok((await buildRequestBody({ logPath: log, ...o })).equals(want), JSON.stringify(c));
    const live = new LiveReplay(log, { format: c.format });
    const { format: _f, ...per } = o;
    for (let i = 0; i < 2; i++) assert.ok((await live.requestBody(per)).equals(want), `live ${JSON.stringify(c)}`);
  }
  for (const bad of [0, 1001, 2.5]) {
    await assert.rejects(buildRequestBody({ logPath: log, text, recall: bad }),
      (e) => e instanceof TypeError && e.code === 'EINVALIDARG' && e.field === 'recall' && e.message.includes('`recall` must be a whole number from 1 to 1000'));
  }
  await assert.rejects(buildRequestBody({ logPath: log, text, recall: 2, language: 'klingon' }),
    (e) => e instanceof TypeError && e.field === 'language' && e.message.includes('unknown language'));
});

test('a LiveReplay recalls what was appended since, from the index it keeps open', async () => {
  const log = turnsLog();
  const text = 'what was the user refactoring yesterday, the replay module?';
  const c = { recall: 2, tail: 5 };
  const live = new LiveReplay(log);
  assert.ok((await live.requestBody({ text, ...c })).equals(respond(log, { text, ...c })));
  // Older than the window's records: only recall can bring it.
  fs.appendFileSync(log, '{"type":"wm_insight","ts_ms":1763700000500,"text":"yesterday the user was '
    + 'refactoring the replay module, its chunk splitter"}\n');
  const want = respond(log, { text, ...c });
  assert.ok(want.includes('its chunk splitter'));
  assert.ok((await live.requestBody({ text, ...c })).equals(want));
  const other = { text, ...c, language: 'none' };
  assert.ok((await live.requestBody(other)).equals(respond(log, other)));
  assert.ok((await live.requestBody({ text, ...c })).equals(want));
});

test("bodies with a model, windows, selections, cache marks and the pending mark are the CLI's respond, byte for byte", async () => {
  const log = turnsLog();
  for (const c of CASES) {
    const o = { text: 'what "now"?', sessionId: 's-42', ...c };
    const want = respond(log, o);
    const got = await buildRequestBody({ logPath: log, ...o });
    assert.ok(Buffer.isBuffer(got));
    assert.ok(got.equals(want), `${JSON.stringify(c)}:\n${got.toString().slice(0, 300)}\n${want.toString().slice(0, 300)}`);
    // A LiveReplay of the same log gives the same bytes, call after call.
    const live = new LiveReplay(log, { format: c.format, record: c.record });
    const { format: _f, record: _r, ...per } = o;
    for (let i = 0; i < 2; i++) assert.ok((await live.requestBody(per)).equals(want), `live ${JSON.stringify(c)}`);
  }
});

test('a model brings its leading fields (1024 tokens by default); without one the body has none', async () => {
  const log = turnsLog();
  const body = JSON.parse(await buildRequestBody({ logPath: log, text: 'hi', model: 'claude-sonnet-4-5' }));
  assert.deepStrictEqual(Object.keys(body), ['model', 'max_tokens', 'system', 'messages']);
  assert.equal(body.model, 'claude-sonnet-4-5');
  assert.equal(body.max_tokens, 1024);
  const openai = JSON.parse(await buildRequestBody({
    logPath: log, text: 'hi', format: 'openai', model: 'gpt-5', maxOutputTokens: 300, params: { temperature: 0.5 },
  }));
  assert.deepStrictEqual(Object.keys(openai), ['model', 'max_completion_tokens', 'temperature', 'messages']);
  assert.equal(openai.max_completion_tokens, 300);
  const plain = JSON.parse(await buildRequestBody({ logPath: log, text: 'hi' }));
  assert.deepStrictEqual(Object.keys(plain), ['system', 'messages']);
});

test('bodies default to record "raw", the drop-in to "js"', async () => {
  const log = write('{"type": "wm_event", "ts_ms": 1.0, "b": 2, "a": 1}\n');
  const body = (await buildRequestBody({ logPath: log, text: 'hi' })).toString();
  assert.ok(body.includes('WM_JSON: {\\"type\\": \\"wm_event\\", \\"ts_ms\\": 1.0, \\"b\\": 2, \\"a\\": 1}'), body);
  const live = (await new LiveReplay(log).requestBody({ text: 'hi' })).toString();
  assert.equal(live, body);
  const { messages } = await replayWorkingMemoryLog({ logPath: log });
  assert.ok(messages[0].content[0].text.endsWith('WM_JSON: {"type":"wm_event","ts_ms":1,"b":2,"a":1}'));
});

test('invalid options reject with a TypeError naming the option', async () => {
  const log = turnsLog();
  const cases = [
    [{ model: 'm', maxOutputToken: 5 }, 'maxOutputToken', /unknown option/],
    [{ maxOutputTokens: 5 }, 'maxOutputTokens', /needs `model`/],
    [{ params: { temperature: 1 } }, 'params', /needs `model`/],
    [{ model: 'claude-sonnet-4-5', maxOutputTokens: 0 }, 'maxOutputTokens', /whole number/],
    [{ model: 'claude-sonnet-4-5', maxOutputTokens: 1.5 }, 'maxOutputTokens', /whole number/],
    [{ model: 'claude-sonnet-4-5', params: { temprature: 1 } }, 'temprature', /temprature/],
    [{ model: 'claude-sonnet-4-5', params: { temperature: 'hot' } }, 'temperature', /temperature/],
    [{ model: 'claude-sonnet-4-5', params: [1] }, 'params', /must be an object/],
    [{ model: 7 }, 'model', /must be a string/],
    [{ tail: -1 }, 'tail', /whole number/],
    [{ tail: '5' }, 'tail', /must be a number/],
    [{ trimTo: 0.5 }, 'trimTo', /`trimTo` needs `maxTokens` or `tail`/],
    [{ tail: 5, trimTo: 2 }, 'trimTo', /trimTo/],
    [{ startOn: 'text_input' }, 'startOn', /startOn/],
    [{ since: 5, until: 1 }, 'since', /since/],
    [{ tokenizer: 'gpt2', maxTokens: 5 }, 'tokenizer', /tokenizer/],
    [{ cache: 'yes' }, 'cache', /"auto" or "none"/],
    [{ cache: 'auto', format: 'openai' }, 'cache', /anthropic/],
    [{ cacheTtl: '2h' }, 'cacheTtl', /cacheTtl/],
    [{ format: 'html' }, 'format', /format/],
    [{ record: 'yaml' }, 'record', /record/],
    [{ sessionOnly: true }, 'sessionOnly', /sessionId/],
    [{ kinds: 'wm_event' }, 'kinds', /array of strings/],
  ];
  for (const [o, field, message] of cases) {
    await assert.rejects(buildRequestBody({ logPath: log, text: 'x', ...o }), (e) => {
      assert.ok(e instanceof TypeError, `${JSON.stringify(o)}: ${e}`);
      assert.equal(e.code, 'EINVALIDARG', JSON.stringify(o));
      assert.equal(e.field, field, `${JSON.stringify(o)}: ${e.message}`);
      assert.match(e.message, message);
      return true;
    });
  }
  const live = new LiveReplay(log);
  await assert.rejects(live.requestBody({ text: 'x', format: 'openai' }), { code: 'EINVALIDARG', field: 'format' });
  await assert.rejects(live.requestBody({ text: 'x', maxOutputTokens: 3 }), { code: 'EINVALIDARG', field: 'maxOutputTokens' });
});

test('trimTo remembers the window start in the state store, as respond does', async () => {
  const log = turnsLog();
  const state = path.join(tmp, 'trim.db');
  const o = { text: 'hi', maxTokens: 600, tokenizer: 'bytes', trimTo: 0.5, state };
  const first = await buildRequestBody({ logPath: log, ...o });
  // A few records appended: the start stays put (the store remembers it), so
  // the new body begins with the old one's messages.
  fs.appendFileSync(log, '{"type":"wm_event","ts_ms":1763700300000,"x":1}\n');
  const second = await buildRequestBody({ logPath: log, ...o });
  const start = (b) => JSON.parse(b).messages[0].content[0].text;
  assert.equal(start(second), start(first));
  assert.ok(fs.existsSync(state));
  // And the CLI, with the same store, agrees.
  assert.ok(second.equals(respond(log, o)));
});

test('a bad record mode, format or record is a TypeError with code and field', async () => {
  const log = write('{"type":"a","ts_ms":1}\n');
  const isInvalid = (field, says) => (e) => {
    assert.ok(e instanceof TypeError, String(e));
    assert.equal(e.code, 'EINVALIDARG');
    assert.equal(e.field, field);
    assert.ok(e.message.includes(says), e.message);
    return true;
  };
  await assert.rejects(replayWorkingMemoryLog({ logPath: log, record: 'bogus' }), isInvalid('record', 'bogus'));
  await assert.rejects(buildRequestBody({ logPath: log, text: 'x', record: 'bogus' }), isInvalid('record', 'bogus'));
  await assert.rejects(buildRequestBody({ logPath: log, text: 'x', format: 'yaml' }), isInvalid('format', 'yaml'));
  assert.throws(() => new LiveReplay(log, { format: 'yaml' }), isInvalid('format', 'yaml'));
  assert.throws(() => new LiveReplay(log, { record: 'bogus' }), isInvalid('record', 'bogus'));
  const circular = { type: 'a' };
  circular.self = circular;
  for (const [record, says] of [[{ type: 'a', n: 1n }, 'BigInt'], [circular, 'circular']]) {
    await assert.rejects(append(log, record), isInvalid('records', says));
  }
  assert.equal(fs.readFileSync(log, 'utf8'), '{"type":"a","ts_ms":1}\n', 'nothing written');
});

test('append() writes what the server would, and its stamps never go back', async () => {
  const log = path.join(tmp, 'append.log');
  fs.writeFileSync(log, '{"type":"wm_event","ts_ms":9000000000000}\n{"type":"to');
  const r = await append(log, [{ type: 'text_input', text: 'hi "there"' }, '{ "type": "wm_event",\n "ts_ms": 3 }']);
  assert.equal(r.written, 2);
  assert.equal(r.records[0].ts_ms, 9000000000000);
  assert.equal(r.records[1].ts_ms, 3);
  const text = fs.readFileSync(log, 'utf8');
  assert.equal(text, '{"type":"wm_event","ts_ms":9000000000000}\n{"type":"to\n' +
    '{"ts_ms":9000000000000,"type":"text_input","text":"hi \\"there\\""}\n{"type":"wm_event","ts_ms":3}\n');
  assert.equal(r.records[0].offset, text.indexOf('{"ts_ms"'));
  assert.equal(r.records[0].bytes, text.indexOf('{"type":"wm_event","ts_ms":3}') - r.records[0].offset);
  // One record alone, or a Buffer of its JSON.
  assert.equal((await append(log, { type: 'a', ts_ms: 5 })).written, 1);
  assert.equal((await append(log, Buffer.from('{"type":"b","ts_ms":6}'))).written, 1);
  // A record that is not one rejects the batch; nothing is written.
  const before = fs.readFileSync(log);
  for (const [batch, says] of [
    [[{ type: 'a' }, { ts_ms: 1 }], /record 1: no "type" member/],
    [[{ type: 'a', ts_ms: 'now' }], /record 0: "ts_ms" is not a number/],
    [[{ type: 1 }], /"type" is not a string/],
    [['not json'], /record 0: invalid JSON/],
    [[[1, 2]], /record 0 must be an object/],
    [[], /no records/],
  ]) {
    await assert.rejects(append(log, batch), (e) => {
      assert.ok(e instanceof TypeError, String(e));
      assert.equal(e.code, 'EINVALIDARG');
      assert.match(e.message, says);
      return true;
    });
  }
  assert.ok(fs.readFileSync(log).equals(before));
  await assert.rejects(append(tmp, { type: 'a' }), { code: 'EISDIR', path: tmp });
  // The replay reads what append wrote.
  const { stats } = await replayWorkingMemoryLog({ logPath: log, warn: false });
  assert.equal(stats.parsed_entries, 5);
  assert.equal(stats.skipped_invalid_json, 1);
});

test('append() interleaved with `wmreplay serve` writing the same log loses and tears nothing', async () => {
  const log = path.join(tmp, 'served.log');
  fs.writeFileSync(log, '{"type":"wm_event","ts_ms":1}\n');
  const { url, child } = await serve(log);
  try {
    const ROUNDS = 40;
    const writers = [];
    for (let t = 0; t < 3; t++) {
      writers.push((async () => {
        for (let i = 0; i < ROUNDS; i++) {
          await append(log, [{ type: 'wm_event', who: `node-${t}`, n: i, k: 0 }, { type: 'wm_event', who: `node-${t}`, n: i, k: 1 }]);
        }
      })());
    }
    for (let t = 0; t < 2; t++) {
      writers.push((async () => {
        for (let i = 0; i < ROUNDS; i++) {
          const r = await fetch(`${url}/v1/records`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify([{ type: 'wm_event', who: `serve-${t}`, n: i, k: 0 }, { type: 'wm_event', who: `serve-${t}`, n: i, k: 1 }]),
          });
          assert.equal(r.status, 200, await r.text());
        }
      })());
    }
    await Promise.all(writers);
    const lines = fs.readFileSync(log, 'utf8').split('\n');
    assert.equal(lines.pop(), '', 'the log ends a line');
    const records = lines.map((l) => JSON.parse(l));
    const seen = new Map();
    for (const r of records.slice(1)) seen.set(`${r.who}/${r.n}/${r.k}`, (seen.get(`${r.who}/${r.n}/${r.k}`) ?? 0) + 1);
    assert.equal(seen.size, 5 * ROUNDS * 2, 'every record is there');
    assert.ok([...seen.values()].every((c) => c === 1), 'once');
    // Each batch's two records are adjacent, whoever wrote it.
    for (let i = 1; i < records.length; i++) {
      if (records[i].k === 0) assert.equal(`${records[i + 1].who}/${records[i + 1].n}/${records[i + 1].k}`, `${records[i].who}/${records[i].n}/1`);
    }
  } finally {
    await stop(child);
  }
});

test('a type with lone surrogates replays exactly as the original function', async () => {
  const logs = [
    '{"type":"\\ud800","ts_ms":1}\n',
    '{"type":"a\\udc00b","ts_ms":2,"x":"\\ud800"}\n{"type":"text_output","ts_ms":1}\n',
    '{"type":"\\ud83d\\ude00 pair, then \\udbff alone","ts_ms":3}\n{"type":"\\\\ud800 not an escape","ts_ms":4}\n',
    '{"type":"x","type":"\\uDFFF\\u00e9\\n","ts_ms":5}\n{"type":"é\\ud800é","ts_ms":0,"t":"' + 'long '.repeat(50) + '"}\n',
  ];
  for (const content of logs) {
    const p = write(content);
    for (const record of ['js', 'raw']) {
      assert.deepStrictEqual(await replayWorkingMemoryLog({ logPath: p, record }),
        await oracle.replayWorkingMemoryLog({ logPath: p, record }), `${record}: ${content}`);
    }
  }
  // The texts hold the lone surrogate itself, not U+FFFD.
  const { messages } = await replayWorkingMemoryLog({ logPath: write(logs[0]) });
  assert.equal(messages[0].content[0].text.charCodeAt('WM_KIND='.length), 0xd800);
});

test('the system rule and the current-request builder are exported', () => {
  assert.equal(wm.SYSTEM_RULE, oracle.SYSTEM_RULE);
  for (const sessionId of ['s-1', '', null, undefined]) {
    assert.equal(wm.buildCurrentUserRequestMessage({ text: 'hi\nthere', sessionId }),
      oracle.buildCurrentUserRequestMessage({ text: 'hi\nthere', sessionId }), String(sessionId));
  }
  assert.equal(wm.buildCurrentUserRequestMessage({ text: 'x', sessionId: '' }), 'CURRENT_USER_REQUEST\nsession_id: \nuser_text: x');
  assert.equal(wm.buildCurrentUserRequestMessage('x', 's'), oracle.buildCurrentUserRequestMessage('x', 's'));
  assert.throws(() => wm.buildCurrentUserRequestMessage({ text: 1 }), TypeError);
});

test('the ES module exports the same functions as the CommonJS one', () => {
  // Imported by name, from a project whose node_modules holds the package:
  // the `import` condition of its exports.
  const project = fs.mkdtempSync(path.join(tmp, 'esm-'));
  fs.mkdirSync(path.join(project, 'node_modules'));
  // 'junction': a directory link Windows makes without extra rights; ignored elsewhere.
  fs.symlinkSync(PACKAGE_DIR, path.join(project, 'node_modules', 'wmreplay'), 'junction');
  fs.writeFileSync(path.join(project, 'main.mjs'), `
    import wm, { buildRequestBody, append, LiveReplay, SYSTEM_RULE, buildCurrentUserRequestMessage, replayWorkingMemoryLog, search, SearchIndex } from 'wmreplay';
    import { createRequire } from 'node:module';
    const cjs = createRequire(import.meta.url)('wmreplay');
    const same = wm === cjs && buildRequestBody === cjs.buildRequestBody && append === cjs.append &&
      LiveReplay === cjs.LiveReplay && SYSTEM_RULE === cjs.SYSTEM_RULE &&
      buildCurrentUserRequestMessage === cjs.buildCurrentUserRequestMessage &&
      replayWorkingMemoryLog === cjs.replayWorkingMemoryLog && search === cjs.search &&
      SearchIndex === cjs.SearchIndex;
    const body = await buildRequestBody({ logPath: ${JSON.stringify(EXAMPLE)}, text: 'hi' });
    console.log(JSON.stringify({ same, system: JSON.parse(body).system === SYSTEM_RULE }));
  `);
  const r = spawnSync(process.execPath, ['main.mjs'], { cwd: project, encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.deepStrictEqual(JSON.parse(r.stdout), { same: true, system: true });
});

test('the TypeScript types check for import and require', (t) => {
  let tsc;
  try {
    tsc = require.resolve('typescript/bin/tsc', { paths: [path.join(ROOT, 'bindings/node')] });
  } catch {
    t.skip('no TypeScript in bindings/node/node_modules (npm ci there)');
    return;
  }
  const project = fs.mkdtempSync(path.join(tmp, 'types-'));
  fs.mkdirSync(path.join(project, 'node_modules'));
  fs.symlinkSync(PACKAGE_DIR, path.join(project, 'node_modules', 'wmreplay'), 'junction');
  for (const f of fs.readdirSync(path.join(__dirname, 'types'))) {
    fs.copyFileSync(path.join(__dirname, 'types', f), path.join(project, f));
  }
  const r = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test('a missing log: requireLog rejects with ENOENT, refresh() says logMissing', async () => {
  const missing = path.join(tmp, 'nowhere.log');
  for (const call of [
    () => replayWorkingMemoryLog({ logPath: missing, requireLog: true }),
    () => buildRequestBody({ logPath: missing, text: 'x', requireLog: true }),
    () => new LiveReplay(missing).requestBody({ text: 'x', requireLog: true }),
    () => new LiveReplay(missing).refresh({ requireLog: true }),
  ]) {
    await assert.rejects(call(), (e) => {
      assert.equal(e.code, 'ENOENT');
      assert.equal(e.path, missing);
      assert.ok(e.message.includes(missing) && e.message.includes('does not exist'), e.message);
      return true;
    });
  }
  // Without requireLog it is an empty replay, and says so: a process
  // warning (as the CLI warns on stderr), once per LiveReplay while the log
  // stays missing; none with warn: false.
  const warnings = [];
  const listen = (w) => warnings.push(w);
  process.on('warning', listen);
  let live;
  try {
    assert.equal((await replayWorkingMemoryLog({ logPath: missing })).messages.length, 0);
    await buildRequestBody({ logPath: missing, text: 'x' });
    await replayWorkingMemoryLog({ logPath: missing, warn: false });
    await buildRequestBody({ logPath: missing, text: 'x', warn: false });
    await new LiveReplay(missing).refresh({ warn: false });
    live = new LiveReplay(missing);
    assert.equal((await live.refresh()).logMissing, true);
    await live.requestBody({ text: 'x' });
    await live.refresh();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', listen);
  }
  assert.deepStrictEqual(warnings.map((w) => w.code), Array(3).fill('WMREPLAY_MISSING_LOG'));
  for (const w of warnings) {
    assert.equal(w.message, `${missing} does not exist; replaying it as an empty log (requireLog: true makes this an error, warn: false silences it)`);
  }
  fs.writeFileSync(missing, '{"type":"a","ts_ms":1}\n');
  const r = await live.refresh();
  assert.equal(r.logMissing, false);
  assert.equal(r.recordsAdded, 1);
});

test('a log of junk warns once (process warning), unless warn: false', async () => {
  const junk = write('{"a": 1}\nnot json\n{"type":"ok","ts_ms":1}\n');
  const warnings = [];
  const listen = (w) => warnings.push(w);
  process.on('warning', listen);
  try {
    await replayWorkingMemoryLog({ logPath: junk });
    await buildRequestBody({ logPath: junk, text: 'x' });
    await replayWorkingMemoryLog({ logPath: junk, warn: false });
    await buildRequestBody({ logPath: junk, text: 'x', warn: false });
    const live = new LiveReplay(junk);
    await live.requestBody({ text: 'x' });
    await live.requestBody({ text: 'x' });
    await live.refresh();
    // A log with few bad lines replays silently.
    await buildRequestBody({ logPath: write('{"type":"a","ts_ms":1}\n{"type":"b","ts_ms":2}\nbad\n'), text: 'x' });
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', listen);
  }
  assert.equal(warnings.length, 3, warnings.map(String).join('\n'));
  for (const w of warnings) {
    assert.equal(w.code, 'WMREPLAY_SKIPPED_LINES');
    assert.ok(w.message.startsWith(`${junk}: 2 of its 3 lines are not valid records; the first skipped is line 1 (byte 0): no "type" member`), w.message);
  }
});
