'use strict';
// In-process speed of the Node.js package against the original TypeScript
// algorithm (tests/oracle/replay.js, record "js": the original code as
// written) on a generated log:
//
//   npm run bench [-- SIZE]          (default 100MiB; the log is kept in target/bench-data/)
//
// Each measurement runs in a fresh Node process (so its peak memory is its
// own: it covers a warm-up call and the timed one), interleaved, median of 3.
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const ROOT = path.resolve(__dirname, '../..');

async function one(kind, log) {
  // Once to warm up (thread pools, JIT, the page cache), then timed: a
  // respond path calls it on every turn.
  await run(kind, log);
  const t = process.hrtime.bigint();
  const n = await run(kind, log);
  const s = Number(process.hrtime.bigint() - t) / 1e9;
  console.log(JSON.stringify({ s, peak: process.resourceUsage().maxRSS * 1024, n }));
}

async function run(kind, log) {
  const wm = require('.');
  const oracle = require('../../tests/oracle/replay.js');
  let n;
  if (kind === 'replayWorkingMemoryLog') {
    n = (await wm.replayWorkingMemoryLog({ logPath: log })).messages.length;
  } else if (kind === 'original replayWorkingMemoryLog') {
    n = (await oracle.replayWorkingMemoryLog({ logPath: log, record: 'js' })).messages.length;
  } else if (kind === 'buildRequestBody') {
    n = (await wm.buildRequestBody({ logPath: log, text: 'What next?', sessionId: 's-1' })).length;
  } else {
    // The original respond path: replay (its messages are already in the
    // Messages-API shape), then one JSON.stringify of the body.
    const { messages } = await oracle.replayWorkingMemoryLog({ logPath: log, record: 'js' });
    const current = oracle.buildCurrentUserRequestMessage({ text: 'What next?', sessionId: 's-1' });
    const all = [...messages, oracle.message('user', current)];
    n = Buffer.from(JSON.stringify({ system: oracle.SYSTEM_RULE, messages: all })).length;
  }
  return n;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function main() {
  if (process.argv[2] === '--one') return one(process.argv[3], process.argv[4]);
  const size = process.argv[2] || '100MiB';
  const dir = path.join(ROOT, 'target/bench-data');
  fs.mkdirSync(dir, { recursive: true });
  const log = path.join(dir, `node-${size}-seed1.log`);
  if (!fs.existsSync(log)) {
    execFileSync('cargo', ['run', '--release', '--quiet', '--', 'gen', log, '--size', size, '--seed', '1'],
      { cwd: ROOT, stdio: 'inherit' });
  }
  const pairs = [
    ['buildRequestBody', 'original request body (replay + JSON.stringify)'],
    ['replayWorkingMemoryLog', 'original replayWorkingMemoryLog'],
  ];
  const kinds = pairs.flat();
  const runs = Object.fromEntries(kinds.map((k) => [k, []]));
  for (let round = 0; round < 3; round++) {
    for (const k of kinds) {
      const out = execFileSync(process.execPath, ['--max-old-space-size=16384', __filename, '--one', k, log],
        { encoding: 'utf8', maxBuffer: 1 << 20 });
      runs[k].push(JSON.parse(out));
    }
  }
  const mib = fs.statSync(log).size / 2 ** 20;
  console.log(`log: ${path.basename(log)}, ${mib.toFixed(0)} MiB; median of 3 interleaved runs, each in its own process`);
  console.log('| what | seconds | vs the original | peak RSS (MiB) | peak / log |');
  console.log('|---|---:|---:|---:|---:|');
  for (const [ours, theirs] of pairs) {
    const base = median(runs[theirs].map((r) => r.s));
    for (const k of [ours, theirs]) {
      const s = median(runs[k].map((r) => r.s));
      const peak = Math.max(...runs[k].map((r) => r.peak)) / 2 ** 20;
      console.log(`| ${k} | ${s.toFixed(3)} | ${(base / s).toFixed(1)}× | ${peak.toFixed(0)} | ${(peak / mib).toFixed(2)}× |`);
    }
  }
}

main();
