'use strict';
// What the test files share: the package under test, the repository (its
// oracle and example log), the CLI, and scratch logs.
//
// By default the package under test is this checkout (`..`, with the `.node`
// of `npm run build`). WMREPLAY_PACKAGE names another copy to test instead:
// a path, or a package name resolved from this file (an installed copy, as
// .ci/node-package.sh runs these tests in a fresh npm project). WMREPLAY_REPO
// is the repository when these files are not in it; WMREPLAY_BIN the CLI.
const assert = require('node:assert/strict');
const { spawn } = require('child_process');
const test = require('node:test');
const fs = require('fs');
const os = require('os');
const path = require('path');

const INSTALLED = Boolean(process.env.WMREPLAY_PACKAGE);
const PACKAGE = process.env.WMREPLAY_PACKAGE || path.resolve(__dirname, '..');
const PACKAGE_DIR = path.dirname(require.resolve(PACKAGE));
const ROOT = path.resolve(process.env.WMREPLAY_REPO || path.join(__dirname, '../../..'));
const oracle = require(path.join(ROOT, 'tests/oracle/replay.js'));
const EXAMPLE = path.join(ROOT, 'examples/working_memory.log');

function cli() {
  if (process.env.WMREPLAY_BIN) return process.env.WMREPLAY_BIN;
  // The newer of the binaries cargo built.
  const built = ['release', 'debug'].map((p) => path.join(ROOT, 'target', p, 'wmreplay')).filter((p) => fs.existsSync(p));
  if (built.length) return built.sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0];
  throw new Error('build the CLI first (cargo build) or set WMREPLAY_BIN');
}

// A scratch directory for one test file (removed after it), and `write`,
// which puts a log in it.
function scratch(prefix) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  test.after(() => fs.rmSync(tmp, { recursive: true, force: true }));
  let n = 0;
  const write = (content) => {
    const p = path.join(tmp, `log-${n++}.log`);
    fs.writeFileSync(p, content);
    return p;
  };
  return { tmp, write };
}

// Starts `wmreplay serve --log LOG`; resolves to { url, child } once it
// listens. `child.log()` is what it has written to stderr so far.
function serve(log) {
  const child = spawn(cli(), ['serve', '--log', log, '--addr', '127.0.0.1:0', '--no-fsync'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, RUST_LOG: 'info' },
  });
  let seen = '';
  child.log = () => seen;
  child.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${seen}`)), 20000);
    child.stderr.on('data', (d) => {
      seen += d;
      const m = /(127\.0\.0\.1:\d+)/.exec(seen);
      if (m && seen.includes('listening')) {
        clearTimeout(timer);
        resolve({ url: `http://${m[1]}`, child });
      }
    });
    child.on('exit', (code) => reject(new Error(`serve exited ${code}: ${seen}`)));
  });
}

// Stops a server from serve(): it must still be running (a server that
// exited mid-test explains its clients' errors), and must stop cleanly.
async function stop(child) {
  const running = child.exitCode === null && child.signalCode === null;
  child.kill('SIGTERM');
  const { code, signal } = await child.exited;
  const tail = child.log().split('\n').slice(-20).join('\n');
  assert.ok(running, `serve exited during the test (${code ?? signal}):\n${tail}`);
  assert.equal(code, 0, `serve stopped with ${code ?? signal}:\n${tail}`);
}

module.exports = { INSTALLED, PACKAGE, PACKAGE_DIR, ROOT, oracle, EXAMPLE, cli, scratch, serve, stop };
