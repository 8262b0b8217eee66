'use strict';
// The Node.js package against the original algorithm (the repository's
// oracle, tests/oracle/replay.js) and the CLI.
// Which package is tested (WMREPLAY_PACKAGE, WMREPLAY_REPO, WMREPLAY_BIN):
// support.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');

const { INSTALLED, PACKAGE, PACKAGE_DIR, ROOT, oracle, EXAMPLE, cli, scratch } = require('./support');
const { replayWorkingMemoryLog, buildRequestBody, LiveReplay } = require(PACKAGE);
const { tmp, write } = scratch('wmreplay-node-');

const EDGE_CASES = [
  '\ufeff{"type":"a","ts_ms":2}\r\n\n  \t{"type":"b","ts_ms":1}\t\n',
  '{"type":"n","ts_ms":1e3}\n{"type":"n","ts_ms":-0}\n{"type":"n","ts_ms":0}\n{"type":"n","ts_ms":1.5}\n' +
    '{"type":"n","ts_ms":12345678901234567890}\n{"type":"n","ts_ms":1e400}\n{"type":"n","ts_ms":1e-7}\n',
  'not json\n{"type":"a","ts_ms":1,}\n[1,2]\n{"ts_ms":1}\n{"type":1,"ts_ms":1}\n{"type":"a","ts_ms":"1"}\n' +
    '{"type":"a","ts_ms":NaN}\n{"type":"a","ts_ms":01}\n',
  '{"type":"x","type":"text_output","ts_ms":5,"t":"é \\u00e9 \\"q\\" \\ud800 /","1":2,"0":{"b":1.50}}\n' +
    '{"type":"text\\u005finput","ts_ms":4}\n',
  '{"type":"a","ts_ms":1}\n{"type":"b","ts_ms":0}',
  '',
];

async function same(p) {
  for (const record of ['js', 'raw']) {
    const got = await replayWorkingMemoryLog({ logPath: p, record });
    assert.deepStrictEqual(got, await oracle.replayWorkingMemoryLog({ logPath: p, record }), `${p} ${record}`);
  }
  // record "js" is the default: the drop-in, called as the original is.
  assert.deepStrictEqual(await replayWorkingMemoryLog({ logPath: p }),
    await oracle.replayWorkingMemoryLog({ logPath: p }));
}

test('the example log replays exactly as the original function', async () => {
  await same(EXAMPLE);
});

test("messages have the original's shape: { role, content: [{ type: 'text', text }] }", async () => {
  const { messages, stats } = await replayWorkingMemoryLog({ logPath: EXAMPLE });
  assert.ok(messages.length > 0);
  assert.equal(messages.length, stats.parsed_entries);
  for (const m of messages) {
    assert.deepStrictEqual(Object.keys(m), ['role', 'content']);
    assert.ok(m.role === 'user' || m.role === 'assistant');
    assert.ok(Array.isArray(m.content));
    assert.equal(m.content.length, 1);
    assert.deepStrictEqual(Object.keys(m.content[0]), ['type', 'text']);
    assert.equal(m.content[0].type, 'text');
    assert.match(m.content[0].text, /^WM_KIND=[^\n]*\nts_ms: [^\n]*\nWM_JSON: \{/);
    assert.equal(m.role === 'assistant', m.content[0].text.startsWith('WM_KIND=text_output\n'));
  }
  // The messages go into a request as they are.
  const body = JSON.stringify({ system: oracle.SYSTEM_RULE, messages });
  assert.equal(JSON.parse(body).messages.length, messages.length);
});

test("the contract's edge cases replay exactly as the original function", async () => {
  for (const c of EDGE_CASES) await same(write(c));
});

test('a generated 10 MiB log replays exactly as the original function', async () => {
  const p = path.join(tmp, 'big.log');
  execFileSync(cli(), ['gen', p, '--size', '10MiB', '--seed', '3']);
  await same(p);
});

test("buildRequestBody is the CLI's respond body, byte for byte", async () => {
  for (const p of [EXAMPLE, write(EDGE_CASES[3])]) {
    for (const format of ['anthropic', 'openai', 'ndjson', 'xml']) {
      const want = execFileSync(cli(), ['respond', p, '--text', 'what "now"?\n', '--session', 's-42',
        '--format', format]);
      const got = await buildRequestBody({ logPath: p, text: 'what "now"?\n', sessionId: 's-42', format });
      assert.ok(Buffer.isBuffer(got));
      assert.ok(got.equals(want), `${p} ${format}`);
    }
  }
});

test('a missing log is an empty replay', async () => {
  const p = path.join(tmp, 'none.log');
  assert.deepStrictEqual(await replayWorkingMemoryLog({ logPath: p }), {
    messages: [],
    stats: { total_lines: 0, parsed_entries: 0, skipped_invalid_json: 0, skipped_invalid_shape: 0 },
  });
  const body = await buildRequestBody({ logPath: p, text: 'hi' });
  assert.ok(body.toString().endsWith('user_text: hi"}]}]}'));
});

test('an unreadable log rejects with an Error naming the path', async () => {
  await assert.rejects(replayWorkingMemoryLog({ logPath: tmp }), (e) => {
    assert.ok(e instanceof Error);
    assert.equal(e.code, 'EISDIR');
    assert.equal(e.path, tmp);
    assert.ok(e.message.includes(tmp));
    return true;
  });
  await assert.rejects(buildRequestBody({ logPath: tmp, text: 'x' }), { code: 'EISDIR' });
  await assert.rejects(buildRequestBody({ logPath: EXAMPLE, text: 'x', format: 'html' }), TypeError);
  await assert.rejects(replayWorkingMemoryLog({ logPath: EXAMPLE, record: 'yaml' }), TypeError);
  await assert.rejects(replayWorkingMemoryLog({}), TypeError);
});

test('LiveReplay after appends equals a fresh replay', async () => {
  const p = write(fs.readFileSync(EXAMPLE));
  const live = new LiveReplay(p);
  assert.equal((await live.refresh()).rebuilt, true);
  fs.appendFileSync(p, '{"type":"text_output","ts_ms":1763700099000,"text":"new"}\n' +
    '{"type":"wm_event","ts_ms":1,"late":true}\n{"type":"half');
  // The unterminated line is not read until it is complete.
  const committed = write(fs.readFileSync(p, 'utf8').replace(/\{"type":"half$/, ''));
  const got = await live.requestBody({ text: 'next?', sessionId: 's-42' });
  assert.ok(got.equals(await buildRequestBody({ logPath: committed, text: 'next?', sessionId: 's-42' })));
  fs.appendFileSync(p, '","ts_ms":5}\n');
  const again = await live.requestBody({ text: 'again' });
  assert.ok(again.equals(await buildRequestBody({ logPath: p, text: 'again' })));
  const r = await live.refresh();
  assert.equal(r.rebuilt, false);
  assert.equal(r.recordsAdded, 0);
});

test(INSTALLED
  ? 'the installed package loads its binary from the per-platform package'
  : 'the development checkout loads the .node that `npm run build` made', () => {
  const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node'));
  assert.equal(loaded.length, 1, `one native module loaded: ${loaded}`);
  const [native] = loaded;
  if (INSTALLED) {
    // Not a .node of the main package: the one its optional dependency holds.
    assert.equal(fs.readdirSync(PACKAGE_DIR).filter((f) => f.endsWith('.node')).length, 0);
    const platformDir = path.dirname(native);
    const platformPkg = JSON.parse(fs.readFileSync(path.join(platformDir, 'package.json'), 'utf8'));
    assert.match(platformPkg.name, /^wmreplay-/);
    assert.equal(path.join(platformDir, platformPkg.main), native);
    const main = JSON.parse(fs.readFileSync(path.join(PACKAGE_DIR, 'package.json'), 'utf8'));
    assert.equal(main.optionalDependencies[platformPkg.name], main.version);
    assert.equal(platformPkg.version, main.version);
    for (const dir of [PACKAGE_DIR, platformDir]) {
      for (const f of ['README.md', 'LICENSE-MIT', 'LICENSE-APACHE', 'package.json']) {
        assert.ok(fs.existsSync(path.join(dir, f)), `${dir}/${f}`);
      }
    }
    assert.ok(fs.existsSync(path.join(PACKAGE_DIR, 'index.d.ts')));
  } else {
    assert.equal(path.dirname(native), PACKAGE_DIR);
  }
});

test('without a binary the package fails at once, naming the platform', () => {
  // The package's loader alone, where neither a .node nor a per-platform
  // package can be found.
  const dir = fs.mkdtempSync(path.join(tmp, 'no-binary-'));
  fs.copyFileSync(path.join(PACKAGE_DIR, 'index.js'), path.join(dir, 'index.js'));
  const r = spawnSync(process.execPath, ['-e', `
    try { require(${JSON.stringify(dir)}); } catch (e) {
      console.log(JSON.stringify({ code: e.code, platform: e.platform, message: e.message }));
    }`], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const e = JSON.parse(r.stdout);
  assert.equal(e.code, 'ERR_WMREPLAY_NO_BINARY');
  assert.ok(e.platform.startsWith(`${process.platform}-${process.arch}`), e.platform);
  assert.ok(e.message.includes(e.platform), e.message);
  assert.ok(e.message.includes(`wmreplay-${e.platform}`), e.message);
});
