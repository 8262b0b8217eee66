'use strict';
// wmreplay for Node.js: replays an append-only JSONL working-memory log into
// the messages of an LLM request with the Rust engine, off the JavaScript
// thread, and searches it. See index.d.ts for the API and README.md for examples.
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
      `and there is no development build at ${local}. Installed from a tarball? Install ` +
      `${pkg}'s tarball too (target/npm/${pkg}-<version>.tgz, beside wmreplay's). From a ` +
      'registry: install wmreplay with its optional dependencies (not --omit=optional) on a ' +
      'platform it ships a binary for. Or build it from source with `npm run build` in ' +
      'bindings/node (needs Rust).',
  );
  err.code = 'ERR_WMREPLAY_NO_BINARY';
  err.platform = id;
  throw err;
}

const native = loadNative();

// Native errors carry "CODE\0FIELD-OR-PATH\0MESSAGE": rebuild them as Errors
// with a `code` and the `path` they concern, like Node's own fs errors (an
// invalid argument: a TypeError with code EINVALIDARG and the option's name
// as `field`).
function rethrow(e) {
  const parts = typeof e?.message === 'string' ? e.message.split('\u0000') : [];
  if (parts.length !== 3) throw e;
  const [code, where, message] = parts;
  if (code === 'EINVALIDARG') throw invalidArg(message, where || undefined);
  const err = new Error(message);
  err.code = code;
  if (where) err.path = where;
  throw err;
}

function invalidArg(message, field) {
  const err = new TypeError(message);
  err.code = 'EINVALIDARG';
  if (field) err.field = field;
  return err;
}

// What each option must be, checked before the engine sees it: a wrong type
// or an unknown name (a typo) is a TypeError naming it, never ignored.
const STRING = 'a string';
const NUMBER = 'a number';
const BOOLEAN = 'a boolean';
const BODY_OPTIONS = {
  text: STRING,
  sessionId: STRING,
  format: STRING,
  system: STRING,
  record: STRING,
  model: STRING,
  maxOutputTokens: NUMBER,
  params: 'an object',
  allowParams: 'an array of strings',
  sessionOnly: BOOLEAN,
  kinds: 'an array of strings',
  since: NUMBER,
  until: NUMBER,
  tail: NUMBER,
  maxTokens: NUMBER,
  tokenizer: STRING,
  trimTo: NUMBER,
  startOn: STRING,
  markPending: BOOLEAN,
  summaries: BOOLEAN,
  facts: BOOLEAN,
  cache: STRING,
  cacheTtl: STRING,
  state: STRING,
  requireLog: BOOLEAN,
  warn: BOOLEAN,
  recall: NUMBER,
  language: STRING,
};

function isType(v, type) {
  switch (type) {
    case STRING:
      return typeof v === 'string';
    case NUMBER:
      return typeof v === 'number';
    case BOOLEAN:
      return typeof v === 'boolean';
    case 'an object':
      return typeof v === 'object' && !Array.isArray(v) && !Buffer.isBuffer(v);
    case 'an array of strings':
      return Array.isArray(v) && v.every((k) => typeof k === 'string');
    default:
      return false;
  }
}

// Options checked: each known and of its type (null and undefined are "not
// given", left out), but `skip`.
function knownOptions(o, what, allowed, skip) {
  const out = {};
  for (const [k, v] of Object.entries(o)) {
    if (k === skip) continue;
    const type = allowed[k];
    if (!type) throw invalidArg(`${what}: unknown option \`${k}\``, k);
    if (v === undefined || v === null) continue;
    if (!isType(v, type)) throw invalidArg(`${what}: \`${k}\` must be ${type}, not ${describe(v)}`, k);
    out[k] = v;
  }
  return out;
}

// The options of a body call, checked, `params` as JSON text for the engine.
function bodyOptions(o, what, allowed) {
  const out = knownOptions(o, what, allowed, 'logPath');
  if (typeof out.text !== 'string') throw invalidArg(`${what}: \`text\` must be a string`, 'text');
  if (out.params !== undefined) out.params = JSON.stringify(out.params);
  return out;
}

function describe(v) {
  if (Array.isArray(v)) return 'an array';
  if (v === null) return 'null';
  return typeof v === 'string' ? JSON.stringify(v) : typeof v === 'object' ? 'an object' : String(v);
}

function options(arg, what) {
  if (typeof arg === 'string') return { logPath: arg };
  if (arg === null || typeof arg !== 'object' || typeof arg.logPath !== 'string') {
    throw invalidArg(`${what}: pass { logPath: string, ... }`, 'logPath');
  }
  return arg;
}

// A log most of whose lines are not records: a process warning (as
// `wmreplay respond` warns on stderr), unless the caller passed warn: false.
function warnOf(warning, warn) {
  if (warning && warn !== false) process.emitWarning(warning, { code: 'WMREPLAY_SKIPPED_LINES' });
}

// A log that does not exist (a mistyped path, most often): a process
// warning, as `wmreplay respond` warns on stderr, unless the caller passed
// warn: false; requireLog: true makes it an error instead.
function warnMissing(logPath, missing, warn) {
  if (missing && warn !== false) {
    process.emitWarning(
      `${logPath} does not exist; replaying it as an empty log (requireLog: true makes this an error, warn: false silences it)`,
      { code: 'WMREPLAY_MISSING_LOG' },
    );
  }
}

/**
 * The drop-in: `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`
 * exactly as the original TypeScript function returns them (`record: "js"`, the
 * default: WM_JSON is `JSON.stringify(entry)`; `record: "raw"`: the line as
 * written).
 */
async function replayWorkingMemoryLog(arg) {
  const { logPath, record, requireLog, warn } = options(arg, 'replayWorkingMemoryLog');
  if (requireLog !== undefined && typeof requireLog !== 'boolean') {
    throw invalidArg('replayWorkingMemoryLog: `requireLog` must be a boolean', 'requireLog');
  }
  let r;
  try {
    r = await native.replayWorkingMemoryLog({ logPath, record: record ?? 'js', requireLog });
  } catch (e) {
    rethrow(e);
  }
  warnOf(r.warning, warn);
  warnMissing(logPath, r.logMissing, warn);
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
  // A `type` with lone surrogates, which the engine's texts cannot hold:
  // `WM_KIND=` and the type as JSON.parse decodes it (the original's
  // `${entry.type}`), then the rest of the engine's text.
  const { surrogateIndex: at, surrogateSkip: skip, surrogateKind: kind } = r;
  for (let j = 0; j < at.length; j++) {
    const i = at[j];
    const k = 3 * i;
    const rest = parents[spans[k]].substring(spans[k + 1] + skip[j], spans[k + 2]);
    messages[i].content[0].text = `WM_KIND=${JSON.parse(`"${kind[j]}"`)}${rest}`;
  }
  return { messages, stats };
}

const BUILD_OPTIONS = BODY_OPTIONS;

/**
 * The request body as a Buffer, ready for `fetch`: what `wmreplay respond`
 * writes for the same options. No JavaScript object is built per message.
 */
async function buildRequestBody(arg) {
  const o = options(arg, 'buildRequestBody');
  const checked = bodyOptions(o, 'buildRequestBody', BUILD_OPTIONS);
  let r;
  try {
    r = await native.buildRequestBody(o.logPath, checked);
  } catch (e) {
    rethrow(e);
  }
  warnOf(r.warning, checked.warn);
  warnMissing(o.logPath, r.warnMissing, checked.warn);
  return r.body;
}

// A LiveReplay's format and record mode are its own, set when it is made.
const { format: _format, record: _record, ...LIVE_BODY_OPTIONS } = BODY_OPTIONS;

/** A replay kept across calls: each call parses only the bytes appended since. */
class LiveReplay {
  #inner;
  #logPath;

  constructor(logPath, { format, record } = {}) {
    if (typeof logPath !== 'string') throw invalidArg('LiveReplay: logPath must be a string', 'logPath');
    for (const [k, v] of Object.entries({ format, record })) {
      if (v !== undefined && typeof v !== 'string') throw invalidArg(`LiveReplay: \`${k}\` must be a string`, k);
    }
    this.#logPath = logPath;
    try {
      this.#inner = new native.LiveReplay(logPath, { format, record });
    } catch (e) {
      rethrow(e);
    }
  }

  /** The log's path. */
  get logPath() {
    return this.#logPath;
  }

  async refresh({ requireLog, warn } = {}) {
    if (requireLog !== undefined && typeof requireLog !== 'boolean') {
      throw invalidArg('refresh: `requireLog` must be a boolean', 'requireLog');
    }
    let r;
    try {
      r = await this.#inner.refresh(requireLog);
    } catch (e) {
      rethrow(e);
    }
    const { warning, warnMissing: missing, ...refreshed } = r;
    warnOf(warning, warn);
    // The engine says when: the first refresh that finds it missing.
    warnMissing(this.#logPath, missing, warn);
    return refreshed;
  }

  async requestBody(input = {}) {
    if (input === null || typeof input !== 'object') throw invalidArg('requestBody: pass { text: string, ... }', 'text');
    const checked = bodyOptions(input, 'requestBody', LIVE_BODY_OPTIONS);
    let r;
    try {
      r = await this.#inner.requestBody(checked);
    } catch (e) {
      rethrow(e);
    }
    warnOf(r.warning, checked.warn);
    warnMissing(this.#logPath, r.warnMissing, checked.warn);
    return r.body;
  }
}

/**
 * Appends one record or an array of records to the log (created if needed),
 * as `wmreplay serve` appends them: checked first (each a JSON object with a
 * string `type`; a `ts_ms`, when present, a number: one that is not rejects
 * the whole batch, nothing written), one line each, stamped with `ts_ms` when
 * it has none (never below the log's last record), written with one write
 * under the log's lock, never glued to a torn last line, cut back if the write
 * fails, synced before the promise resolves. A record is an object
 * (serialised with JSON.stringify) or the JSON text of one (a string or a
 * Buffer). Resolves to `{ written, records: [{ ts_ms, offset, bytes }] }`.
 */
async function append(logPath, records) {
  if (typeof logPath !== 'string') throw invalidArg('append: logPath must be a string', 'logPath');
  const list = Array.isArray(records) ? records : [records];
  const texts = list.map((r, i) => {
    if (typeof r === 'string') return Buffer.from(r);
    if (r instanceof Uint8Array) return Buffer.from(r.buffer, r.byteOffset, r.byteLength);
    if (r !== null && typeof r === 'object' && !Array.isArray(r)) {
      let text;
      try {
        text = JSON.stringify(r);
      } catch (e) {
        // A BigInt, a cycle, a toJSON that throws: JSON.stringify's own words.
        throw invalidArg(`append: record ${i} cannot be serialised as JSON: ${e.message}`, 'records');
      }
      if (text === undefined) throw invalidArg(`append: record ${i} cannot be serialised`, 'records');
      return Buffer.from(text);
    }
    throw invalidArg(`append: record ${i} must be an object (or the JSON text of one), not ${describe(r)}`, 'records');
  });
  try {
    return await native.append(logPath, texts);
  } catch (e) {
    rethrow(e);
  }
}

// What `records()` takes.
const RECORDS_OPTIONS = {
  kinds: 'an array of strings',
  session: STRING,
  since: NUMBER,
  until: NUMBER,
  order: STRING,
  requireLog: BOOLEAN,
  warn: BOOLEAN,
};

/**
 * The records of the log, off the JavaScript thread: `[{ offset, ts_ms, type,
 * record }]` (`record` the line's JSON, parsed), every record or those of the
 * filters (`kinds`, `session`, `since`, `until`, as a search's), in replay
 * order (`order: "replay"`, the default: by `ts_ms`) or in the order the lines
 * were written (`order: "log"`). A log that does not exist has none.
 */
async function records(logPath, options) {
  if (typeof logPath !== 'string') throw invalidArg('records: logPath must be a string', 'logPath');
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    throw invalidArg('records: options must be an object', 'options');
  }
  const { warn, ...o } = knownOptions(options ?? {}, 'records', RECORDS_OPTIONS);
  let r;
  try {
    r = await native.records(logPath, o);
  } catch (e) {
    rethrow(e);
  }
  warnOf(r.warning, warn);
  return JSON.parse(r.json);
}

// What a search takes besides the query (`wmreplay search`'s options); their
// values (a limit from 1 to 1000, the query's words) are checked by the code
// the Python package shares, before anything is read.
const SEARCH_OPTIONS = {
  limit: NUMBER,
  kinds: 'an array of strings',
  session: STRING,
  since: NUMBER,
  until: NUMBER,
};
// Where the index is and how it searches: `wmreplay search`'s --index,
// --language and --embed-* (embedTimeout in milliseconds).
const INDEX_OPTIONS = {
  indexPath: STRING,
  language: STRING,
  embedUpstream: STRING,
  embedModel: STRING,
  embedKeyEnv: STRING,
  embedDimensions: NUMBER,
  embedTimeout: NUMBER,
  embedWeight: NUMBER,
};
const SEARCH_CALL_OPTIONS = { ...SEARCH_OPTIONS, ...INDEX_OPTIONS };

// Splits a search's options into the search's and the index's.
function splitIndexOptions(o) {
  const index = {};
  const search = {};
  for (const [k, v] of Object.entries(o)) {
    if (k in INDEX_OPTIONS) index[k] = v;
    else search[k] = v;
  }
  return [search, index];
}

function searchArgs(what, query, o, allowed) {
  if (typeof query !== 'string') throw invalidArg(`${what}: \`query\` must be a string, not ${describe(query)}`, 'query');
  if (o === undefined || o === null) return {};
  if (typeof o !== 'object' || Array.isArray(o)) throw invalidArg(`${what}: options must be an object`, 'options');
  return knownOptions(o, what, allowed);
}

/**
 * The records of the log best matching `query`, best first, off the JavaScript
 * thread: what `wmreplay search` prints, as `[{ offset, ts_ms, type, score,
 * record }]` (`record` the line's JSON, parsed). The index is kept next to the
 * log (`<logPath>.wmreplay.idx`, or `indexPath`), built on first use and brought
 * up to date with the appended lines before each search. A log that does not
 * exist finds nothing.
 */
async function search(logPath, query, options) {
  if (typeof logPath !== 'string') throw invalidArg('search: logPath must be a string', 'logPath');
  const [o, index] = splitIndexOptions(searchArgs('search', query, options, SEARCH_CALL_OPTIONS));
  let text;
  try {
    text = await native.search(logPath, query, o, index);
  } catch (e) {
    rethrow(e);
  }
  return JSON.parse(text);
}

/**
 * A log's search index kept open across searches (for a long-lived process):
 * each search brings it up to date with the lines appended since the last.
 */
class SearchIndex {
  #inner;
  #logPath;

  constructor(logPath, options) {
    if (typeof logPath !== 'string') throw invalidArg('SearchIndex: logPath must be a string', 'logPath');
    if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
      throw invalidArg('SearchIndex: options must be an object', 'options');
    }
    const index = knownOptions(options ?? {}, 'SearchIndex', INDEX_OPTIONS);
    this.#logPath = logPath;
    try {
      this.#inner = new native.SearchIndex(logPath, index);
    } catch (e) {
      rethrow(e);
    }
  }

  /** The log's path. */
  get logPath() {
    return this.#logPath;
  }

  /** The index file's path. */
  get indexPath() {
    return this.#inner.indexPath;
  }

  /** Brings the index up to date, then searches it: `search()`'s hits. */
  async search(query, options) {
    const o = searchArgs('SearchIndex.search', query, options, SEARCH_OPTIONS);
    let text;
    try {
      text = await this.#inner.search(query, o);
    } catch (e) {
      rethrow(e);
    }
    return JSON.parse(text);
  }

  /** Brings the index up to date: `{ rebuilt, bytes, records }` read by this call. */
  async refresh() {
    try {
      return await this.#inner.refresh();
    } catch (e) {
      rethrow(e);
    }
  }
}

/**
 * The current request's message text, as the original
 * `buildCurrentUserRequestMessage` builds it:
 * `CURRENT_USER_REQUEST\nsession_id: <sessionId ?? "none">\nuser_text: <text>`
 * (an empty sessionId is written empty; only null or undefined is `none`).
 * `(text, sessionId)` works too.
 */
function buildCurrentUserRequestMessage(input = {}, positionalSessionId) {
  // The original's object form, or (text, sessionId) as it is also called.
  const { text, sessionId } = typeof input === 'string' ? { text: input, sessionId: positionalSessionId } : input;
  if (typeof text !== 'string') throw invalidArg('buildCurrentUserRequestMessage: `text` must be a string', 'text');
  if (sessionId !== undefined && sessionId !== null && typeof sessionId !== 'string') {
    throw invalidArg('buildCurrentUserRequestMessage: `sessionId` must be a string', 'sessionId');
  }
  return native.currentUserRequestText(text, sessionId ?? undefined);
}

/** The system prompt's rule, which every request body carries. */
const SYSTEM_RULE = native.SYSTEM_RULE;

module.exports = {
  replayWorkingMemoryLog,
  buildRequestBody,
  LiveReplay,
  append,
  records,
  search,
  SearchIndex,
  buildCurrentUserRequestMessage,
  SYSTEM_RULE,
};
