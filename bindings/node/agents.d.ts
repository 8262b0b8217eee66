// `wmreplay/agents`: an OpenAI Agents SDK session kept in a working-memory log.
// The types come from `@openai/agents` (an optional peer dependency of
// wmreplay: install it to use this entry point).
import type { AgentInputItem, Session } from '@openai/agents';
import type { LogRecord } from './index.js';

/** The `type` of the record of one item added to a session. */
export const SESSION_ITEM: 'session_item';
/** The `type` of the record of an item popped from a session. */
export const SESSION_POP: 'session_pop';
/** The `type` of the record of a session cleared. */
export const SESSION_CLEAR: 'session_clear';
/** The three, e.g. for the `kinds` of `records()`. */
export const SESSION_RECORD_TYPES: readonly ['session_item', 'session_pop', 'session_clear'];

export interface WmreplaySessionOptions {
  /** The working-memory log (created on the first write; a missing log is an empty session). */
  logPath: string;
  /** The session's id, the `session_id` of its records; a random UUID when absent. */
  sessionId?: string;
}

/** One live item of a session and the record that added it. */
export interface LiveItem {
  entry: LogRecord;
  item: AgentInputItem;
}

/**
 * An `@openai/agents` `Session` whose history is kept in a working-memory log, for
 * `run(agent, input, { session })`:
 *
 * - each item added is a record `{"type":"session_item","ts_ms":T,"session_id":S,"item":ITEM}`,
 *   the item exactly as the runner handed it over (JSON: what comes back is
 *   `JSON.parse(JSON.stringify(item))`);
 * - `popItem()` appends `{"type":"session_pop","ts_ms":T,"session_id":S,"popped":{"offset":O,"ts_ms":X}}`,
 *   naming the popped item's record by its byte offset;
 * - `clearSession()` appends `{"type":"session_clear","ts_ms":T,"session_id":S}`.
 *
 * Nothing is deleted from the log. Records are written with `append()` (the log's lock, whole
 * lines) and read with `records()`, off the JavaScript thread; every call reads the log again, so
 * sessions in several processes, and `wmreplay serve`, share one log. Errors are the package's
 * (`code` and `path`); an item JSON cannot hold rejects with a `TypeError` (`EINVALIDARG`), nothing
 * written.
 */
export declare class WmreplaySession implements Session {
  constructor(options: WmreplaySessionOptions);
  /** The log's path. */
  readonly logPath: string;
  /** The session's id. */
  readonly sessionId: string;
  getSessionId(): Promise<string>;
  /** The items, oldest first; with `limit`, the latest `limit` (`0` or less: none). */
  getItems(limit?: number): Promise<AgentInputItem[]>;
  /** Adds items at the end: one `session_item` record each, in one append. */
  addItems(items: AgentInputItem[]): Promise<void>;
  /** Removes the most recent item and resolves to it (`undefined` when the session is empty). */
  popItem(): Promise<AgentInputItem | undefined>;
  /** Removes every item (one `session_clear` record). */
  clearSession(): Promise<void>;
  /** The live items with the records that added them, oldest first. */
  liveItems(): Promise<LiveItem[]>;
}
