'use strict';
// What the test files share: the package under test, the repository (its
// oracle and example log), the CLI, and scratch logs.
//
// By default the package under test is this checkout (`..`, with the `.node`
// of `npm run build`). WMREPLAY_PACKAGE names another copy to test instead:
// a path, or a package name resolved from this file (an installed copy, as
// .ci/node-package.sh runs these tests in a fresh npm project). WMREPLAY_REPO
// is the repository when these files are not in it; WMREPLAY_BIN the CLI.
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

module.exports = { INSTALLED, PACKAGE, PACKAGE_DIR, ROOT, oracle, EXAMPLE, cli, scratch };
