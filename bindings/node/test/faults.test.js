'use strict';
// The package when things go wrong around it: a log truncated while a body is
// built from it, and memory that runs out. The package under test is chosen
// in support.js (WMREPLAY_PACKAGE, else this checkout).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');

const { PACKAGE, scratch } = require('./support');
const { replayWorkingMemoryLog, buildRequestBody, LiveReplay } = require(PACKAGE);
const { tmp } = scratch('wmreplay-node-faults-');

const MiB = 1 << 20;

// `n` records in ts_ms order, about 1 KiB each.
function numberedLog(p, n) {
  const text = 'x'.repeat(1000);
  const lines = [];
  for (let i = 0; i < n; i++) lines.push(JSON.stringify({ type: 'text_input', ts_ms: i, text }));
  fs.writeFileSync(p, lines.join('\n') + '\n');
  return p;
}

// Records whose text is all double quotes, about `size` bytes: a quote is 2
// bytes in the log (\") and 4 in a JSON body that carries the line (\\\"), so
// this log's request body is twice its size.
function quotedLog(p, size) {
  const line = (i) => JSON.stringify({ type: 'text_input', ts_ms: i, text: '"'.repeat(32 << 10) }) + '\n';
  const fd = fs.openSync(p, 'w');
  for (let i = 0, written = 0; written < size; i++) {
    const l = line(i);
    fs.writeSync(fd, l);
    written += l.length;
  }
  fs.closeSync(fd);
  return p;
}

test('a log truncated while a body is built from its map rejects with ECHANGED, never with NUL bytes', async () => {
  // Every call maps the log, replays and renders it, then checks the file:
  // a truncation meanwhile leaves zero pages where the file's bytes were
  // (the engine's SIGBUS guard), and the result is withheld. The truncation
  // lands before the call opens the log (the result is the empty log's),
  // during it (ECHANGED), or after it (the whole log's); never a result with
  // the zero pages in it.
  const template = fs.readFileSync(numberedLog(path.join(tmp, 'template.log'), 32 << 10));
  const p = path.join(tmp, 'truncated.log');
  const seen = {};
  for (let round = 0; round < 16; round++) {
    fs.writeFileSync(p, template);
    const body = round % 2 === 0;
    const pending = body
      ? buildRequestBody({ logPath: p, text: 'x' })
      : replayWorkingMemoryLog({ logPath: p, record: round % 4 === 1 ? 'js' : 'raw' });
    // Time for the call to open the log; its replay takes longer.
    await new Promise((resolve) => setTimeout(resolve, round % 4 < 2 ? 2 : 0));
    fs.truncateSync(p, round % 3 === 0 ? 0 : template.length / 2);
    try {
      const got = await pending;
      if (body) {
        assert.equal(got.indexOf(0), -1, 'a NUL byte in the body');
        JSON.parse(got.toString());
      } else {
        for (const m of got.messages) assert.ok(!m.content[0].text.includes('\0'), 'a NUL in a message');
      }
      seen.whole = (seen.whole || 0) + 1;
    } catch (e) {
      assert.equal(e.code, 'ECHANGED', e.stack);
      assert.equal(e.path, p);
      assert.match(e.message, /changed while it was being read .*replay it again/);
      seen.ECHANGED = (seen.ECHANGED || 0) + 1;
    }
  }
  assert.ok(seen.ECHANGED > 0, `no truncation landed during a call: ${JSON.stringify(seen)}`);
});

test('LiveReplay after a truncation answers for the file as it is now, without NUL bytes', async () => {
  // The live replay keeps rendered messages, not the map: a log that shrank
  // is replayed again from the start (documented), never read as zeros.
  const p = numberedLog(path.join(tmp, 'live.log'), 4096);
  const live = new LiveReplay(p);
  assert.equal((await live.refresh()).rebuilt, true);
  const whole = await live.requestBody({ text: 'x' });
  fs.truncateSync(p, fs.statSync(p).size / 2);
  const got = await live.requestBody({ text: 'x' });
  assert.equal(got.indexOf(0), -1);
  assert.ok(got.length < whole.length);
  assert.ok(got.equals(await buildRequestBody({ logPath: p, text: 'x' })));
});

// The child: warms up the thread pools, then lowers its own address-space
// limit (the soft one, with prlimit(1), as `ulimit -v` would) to what it then
// holds plus a margin, and reports how each call ends.
const CHILD = `
const fs = require('fs');
const { execFileSync } = require('child_process');
const [pkg, log, tiny] = process.argv.slice(1);
const { replayWorkingMemoryLog, buildRequestBody, LiveReplay } = require(pkg);
const MiB = 1 << 20;
const vm = () => Number(/VmSize:\\s+(\\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
const limit = (bytes) => execFileSync('prlimit', ['--pid', String(process.pid), '--as=' + bytes + ':']);
async function outcome(call) {
  try {
    const got = await call();
    return ['ok', Buffer.isBuffer(got) ? got.length : got.messages.length];
  } catch (e) {
    return [e.code, e.path, e.message];
  }
}
(async () => {
  // libuv's threads and the engine's pool start before the limit.
  await buildRequestBody({ logPath: tiny, text: 'x' });
  await replayWorkingMemoryLog({ logPath: tiny });
  const got = {};
  // Room to map the log and 64 MiB more: not for its body (twice the log),
  // its messages' texts, or its records re-serialised (about the log each).
  limit(vm() + fs.statSync(log).size + 64 * MiB);
  got.body = await outcome(() => buildRequestBody({ logPath: log, text: 'x' }));
  got.messages = await outcome(() => replayWorkingMemoryLog({ logPath: log, record: 'raw' }));
  got.js = await outcome(() => replayWorkingMemoryLog({ logPath: log, record: 'js' }));
  got.live = await outcome(() => new LiveReplay(log).requestBody({ text: 'x' }));
  limit('unlimited');
  // The process goes on, and the memory is back.
  got.after = await outcome(() => buildRequestBody({ logPath: log, text: 'x' }));
  console.log(JSON.stringify(got));
})();
`;

test('memory running out rejects with ENOMEM, naming the log, instead of aborting', () => {
  // Under an address-space limit (ulimit -v) buildRequestBody aborted the
  // process (SIGABRT) allocating the body, and replayWorkingMemoryLog
  // growing the records or the texts. They are allocated fallibly now. The
  // limit is set by the child itself once it runs (node needs some 700 MiB
  // of address space to start), to what it holds plus the log plus 64 MiB:
  // the same margin on any machine.
  const log = quotedLog(path.join(tmp, 'quotes.log'), 128 * MiB);
  const tiny = numberedLog(path.join(tmp, 'tiny.log'), 10);
  const out = spawnSync(process.execPath, ['-e', CHILD, require.resolve(PACKAGE), log, tiny], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  assert.equal(out.signal, null, `killed by ${out.signal}: ${out.stderr.slice(-2000)}`);
  assert.equal(out.status, 0, out.stderr.slice(-2000));
  const got = JSON.parse(out.stdout);
  for (const call of ['body', 'messages', 'js', 'live']) {
    const [code, file, message] = got[call];
    assert.equal(code, 'ENOMEM', `${call}: ${JSON.stringify(got[call])}`);
    assert.equal(file, log, call);
    assert.ok(message.startsWith(`${log}: cannot allocate `), message);
  }
  assert.equal(got.after[0], 'ok');
  assert.ok(got.after[1] > 2 * fs.statSync(log).size, `a body of ${got.after[1]} bytes`);
});
