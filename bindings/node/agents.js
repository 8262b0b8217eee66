'use strict';
// `wmreplay/agents`: an OpenAI Agents SDK (`@openai/agents`) session kept in a
// working-memory log. Nothing of the SDK is loaded here: its `Session` is an
// interface, which `WmreplaySession` implements. See agents.d.ts for the API
// and docs/packages.md for the records it writes.
const { randomUUID } = require('crypto');
const path = require('path');
const { append, records } = require('./index.js');

const SESSION_ITEM = 'session_item';
const SESSION_POP = 'session_pop';
const SESSION_CLEAR = 'session_clear';
const SESSION_RECORD_TYPES = Object.freeze([SESSION_ITEM, SESSION_POP, SESSION_CLEAR]);

function invalidArg(message, field) {
  const err = new TypeError(message);
  err.code = 'EINVALIDARG';
  if (field) err.field = field;
  return err;
}

// The pops of this process on one log take turns (each reads the session,
// then appends a record naming the item it pops), so no two of them name the
// same item.
const popQueues = new Map();

function inTurn(key, job) {
  const before = popQueues.get(key) ?? Promise.resolve();
  const run = before.then(job, job);
  const settled = run.then(
    () => {},
    () => {},
  );
  popQueues.set(key, settled);
  settled.then(() => {
    if (popQueues.get(key) === settled) popQueues.delete(key);
  });
  return run;
}

/**
 * An `@openai/agents` session (the SDK's `Session` interface) whose history is
 * the `session_item`, `session_pop` and `session_clear` records of one
 * `session_id` in a working-memory log. Every call reads the log again, so
 * sessions in several processes see each other's writes; nothing is ever
 * deleted from the log.
 */
class WmreplaySession {
  #logPath;
  #sessionId;

  /**
   * @param {{ logPath: string, sessionId?: string }} options `sessionId`
   *   defaults to a random UUID (as the SDK's `MemorySession` does).
   */
  constructor(options) {
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw invalidArg('WmreplaySession: pass { logPath: string, sessionId?: string }', 'logPath');
    }
    const { logPath, sessionId, ...rest } = options;
    const unknown = Object.keys(rest)[0];
    if (unknown !== undefined) throw invalidArg(`WmreplaySession: unknown option \`${unknown}\``, unknown);
    if (typeof logPath !== 'string' || logPath === '') {
      throw invalidArg('WmreplaySession: `logPath` must be a non-empty string', 'logPath');
    }
    if (sessionId !== undefined && typeof sessionId !== 'string') {
      throw invalidArg('WmreplaySession: `sessionId` must be a string', 'sessionId');
    }
    this.#logPath = logPath;
    this.#sessionId = sessionId ?? randomUUID();
  }

  /** The log's path. */
  get logPath() {
    return this.#logPath;
  }

  /** The session's id: the `session_id` of its records. */
  get sessionId() {
    return this.#sessionId;
  }

  async getSessionId() {
    return this.#sessionId;
  }

  /**
   * The session's items and their records (`{ offset, ts_ms, type, record }`,
   * as `records()` gives them), in the order the items were added.
   */
  async liveItems() {
    const found = await records(this.#logPath, {
      kinds: [...SESSION_RECORD_TYPES],
      session: this.#sessionId,
      order: 'log',
    });
    const live = new Map();
    for (const entry of found) {
      const { record } = entry;
      // The engine's filter keeps records without a session_id too.
      if (record.session_id !== this.#sessionId) continue;
      if (entry.type === SESSION_ITEM) {
        if (!Object.prototype.hasOwnProperty.call(record, 'item')) {
          this.#skip(entry, 'a session_item record without `item`');
          continue;
        }
        live.set(entry.offset, { entry, item: record.item });
      } else if (entry.type === SESSION_POP) {
        const offset = record.popped?.offset;
        if (!Number.isSafeInteger(offset)) {
          this.#skip(entry, 'a session_pop record without an integer `popped.offset`');
          continue;
        }
        // An item popped already (two processes popped at once) is popped once.
        live.delete(offset);
      } else if (entry.type === SESSION_CLEAR) {
        live.clear();
      }
    }
    return [...live.values()];
  }

  #skip(entry, what) {
    process.emitWarning(
      `${this.#logPath}: byte ${entry.offset}: ${what} is left out of session ${JSON.stringify(this.#sessionId)}`,
      { code: 'WMREPLAY_SESSION_RECORD' },
    );
  }

  /**
   * The session's items, oldest first; with `limit`, the latest `limit` of them
   * (`0` or less: none), as the SDK's `MemorySession` gives them.
   */
  async getItems(limit) {
    if (limit !== undefined && limit !== null && (typeof limit !== 'number' || Number.isNaN(limit))) {
      throw invalidArg('getItems: `limit` must be a number', 'limit');
    }
    if (typeof limit === 'number' && limit <= 0) return [];
    const items = (await this.liveItems()).map((l) => l.item);
    return typeof limit === 'number' ? items.slice(Math.max(items.length - Math.floor(limit), 0)) : items;
  }

  /**
   * Adds items at the end of the session: one `session_item` record each, in
   * one append (one write under the log's lock, synced before it resolves).
   */
  async addItems(items) {
    if (!Array.isArray(items)) throw invalidArg('addItems: `items` must be an array', 'items');
    const batch = items.map((item, i) => {
      if (item === null || typeof item !== 'object' || Array.isArray(item)) {
        throw invalidArg(`addItems: item ${i} must be an object`, 'items');
      }
      let text;
      try {
        text = JSON.stringify({ type: SESSION_ITEM, session_id: this.#sessionId, item });
      } catch (e) {
        throw invalidArg(`${this.#logPath}: addItems: item ${i} cannot be written as JSON (${e.message}); nothing was added`, 'items');
      }
      return text;
    });
    if (batch.length > 0) await append(this.#logPath, batch);
  }

  /**
   * Removes the most recent item and returns it (`undefined`, and nothing
   * written, when the session is empty): a `session_pop` record naming the
   * item's record by its byte offset.
   */
  async popItem() {
    return inTurn(path.resolve(this.#logPath), async () => {
      const live = await this.liveItems();
      const last = live[live.length - 1];
      if (last === undefined) return undefined;
      await append(this.#logPath, {
        type: SESSION_POP,
        session_id: this.#sessionId,
        popped: { offset: last.entry.offset, ts_ms: last.entry.ts_ms },
      });
      return last.item;
    });
  }

  /** Removes every item of the session: a `session_clear` record. */
  async clearSession() {
    await append(this.#logPath, { type: SESSION_CLEAR, session_id: this.#sessionId });
  }
}

module.exports = { WmreplaySession, SESSION_ITEM, SESSION_POP, SESSION_CLEAR, SESSION_RECORD_TYPES };
