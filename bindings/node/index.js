'use strict';
// wmreplay for Node.js: replays an append-only JSONL working-memory log into
// the messages of an LLM request with the Rust engine, off the JavaScript
// thread. See index.d.ts for the API and README.md for examples.
const fs = require('fs');
const path = require('path');

// The platform's name as napi-rs spells it in the names of its binaries and
// per-platform packages (`linux-x64-gnu`, `darwin-arm64`, `win32-x64-msvc`, ...).
function platformArchAbi() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const libc = isMusl() ? 'musl' : 'gnu';
    return arch === 'arm' ? `linux-arm-${libc}eabihf` : `linux-${arch}-${libc}`;
  }
  if (platform === 'win32') return `win32-${arch}-msvc`;
  if (platform === 'android' && arch === 'arm') return 'android-arm-eabi';
  return `${platform}-${arch}`;
}

function isMusl() {
  try {
    const ldd = fs.readFileSync('/usr/bin/ldd', 'latin1');
    if (ldd.includes('musl')) return true;
    if (ldd.includes('GNU C Library') || ldd.includes('GLIBC')) return false;
  } catch {
    // No ldd: ask Node which C library it runs on.
  }
  try {
    return !process.report.getReport().header.glibcVersionRuntime;
  } catch {
    return false;
  }
}

// The engine, a napi-rs addon: `wmreplay.<platform>.node` beside this file in a
// development checkout (`npm run build`), else the per-platform package
// `wmreplay-<platform>` that npm installs with this one as an optional
// dependency.
function loadNative() {
  const id = platformArchAbi();
  const local = path.join(__dirname, `wmreplay.${id}.node`);
  if (fs.existsSync(local)) return require(local);
  const pkg = `wmreplay-${id}`;
  try {
    return require(pkg);
  } catch (e) {
    if (e?.code !== 'MODULE_NOT_FOUND' || !String(e.message).includes(`'${pkg}'`)) throw e;
  }
  const err = new Error(
    `wmreplay: no native binary for this platform (${id}): the package ${pkg} is not installed ` +
      `and there is no development build at ${local}. Install wmreplay with its optional ` +
      'dependencies (not --omit=optional) on a platform it ships a binary for, or build it ' +
      'from source with `npm run build` in bindings/node (needs Rust).',
  );
  err.code = 'ERR_WMREPLAY_NO_BINARY';
  err.platform = id;
  throw err;
}

const native = loadNative();

// Native errors carry "CODE\0PATH\0MESSAGE": rebuild them as Errors with a
// `code` and the `path` they concern, like Node's own fs errors.
function rethrow(e) {
  const parts = typeof e?.message === 'string' ? e.message.split('\u0000') : [];
  if (parts.length !== 3) throw e;
  const [code, file, message] = parts;
  const err = code === 'EINVALIDARG' ? new TypeError(message) : new Error(message);
  err.code = code;
  if (file) err.path = file;
  throw err;
}

function options(arg, what) {
  if (typeof arg === 'string') return { logPath: arg };
  if (arg === null || typeof arg !== 'object' || typeof arg.logPath !== 'string') {
    throw new TypeError(`${what}: pass { logPath: string, ... }`);
  }
  return arg;
}

/**
 * The drop-in: `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`
 * exactly as the original TypeScript function returns them (`record: "js"`, the
 * default: WM_JSON is `JSON.stringify(entry)`; `record: "raw"`: the line as
 * written).
 */
async function replayWorkingMemoryLog(arg) {
  const { logPath, record } = options(arg, 'replayWorkingMemoryLog');
  let r;
  try {
    r = await native.replayWorkingMemoryLog({ logPath, record: record ?? 'js' });
  } catch (e) {
    rethrow(e);
  }
  // The engine hands over the texts laid end to end in a few hundred
  // strings, and where each message's text is: cutting them out here makes
  // each text a slice of its string (V8 copies only texts under 13
  // characters, which no message is), instead of one string crossing from
  // Rust per message. A message kept alone keeps its string (the texts of
  // up to 2,048 messages) alive.
  const { parents, spans, outputs, stats } = r;
  const messages = [];
  for (let i = 0, k = 0; i < outputs.length; i++, k += 3) {
    messages.push({
      role: outputs[i] ? 'assistant' : 'user',
      content: [{ type: 'text', text: parents[spans[k]].substring(spans[k + 1], spans[k + 2]) }],
    });
  }
  return { messages, stats };
}

/**
 * The request body as a Buffer, ready for `fetch`: the system rule, every
 * record in `ts_ms` order, and CURRENT_USER_REQUEST. No JavaScript object is
 * built per message.
 */
async function buildRequestBody(arg) {
  const o = options(arg, 'buildRequestBody');
  if (typeof o.text !== 'string') throw new TypeError('buildRequestBody: `text` must be a string');
  try {
    return await native.buildRequestBody({
      logPath: o.logPath,
      text: o.text,
      sessionId: o.sessionId ?? undefined,
      format: o.format,
      system: o.system,
      record: o.record,
    });
  } catch (e) {
    rethrow(e);
  }
}

/** A replay kept across calls: each call parses only the bytes appended since. */
class LiveReplay {
  #inner;

  constructor(logPath, { format, record } = {}) {
    if (typeof logPath !== 'string') throw new TypeError('LiveReplay: logPath must be a string');
    try {
      this.#inner = new native.LiveReplay(logPath, { format, record });
    } catch (e) {
      rethrow(e);
    }
  }

  async refresh() {
    try {
      return await this.#inner.refresh();
    } catch (e) {
      rethrow(e);
    }
  }

  async requestBody({ text, sessionId, system } = {}) {
    if (typeof text !== 'string') throw new TypeError('requestBody: `text` must be a string');
    try {
      return await this.#inner.requestBody({ text, sessionId: sessionId ?? undefined, system });
    } catch (e) {
      rethrow(e);
    }
  }
}

module.exports = { replayWorkingMemoryLog, buildRequestBody, LiveReplay };
