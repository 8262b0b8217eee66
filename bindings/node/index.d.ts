/** The one content block of a replayed message. */
export interface TextBlock {
  type: 'text';
  /** `WM_KIND=<type>\nts_ms: <ts_ms>\nWM_JSON: <record>` */
  text: string;
}

/**
 * One replayed record, as the original respond path's function returns it: the
 * Anthropic Messages-API shape, `{ role, content: [{ type: "text", text }] }`
 * (`assistant` for `text_output` records, `user` for every other kind).
 */
export interface Message {
  role: 'user' | 'assistant';
  content: [TextBlock];
}

export interface Stats {
  total_lines: number;
  parsed_entries: number;
  skipped_invalid_json: number;
  skipped_invalid_shape: number;
}

export type Format = 'anthropic' | 'openai' | 'ndjson' | 'xml';
/** `js`: WM_JSON is `JSON.stringify(JSON.parse(line))`; `raw`: the line as written (byte-stable). */
export type RecordMode = 'js' | 'raw';
/** How `maxTokens` counts tokens: tiktoken's (built in) or bytes/4. */
export type Tokenizer = 'o200k_base' | 'cl100k_base' | 'bytes';

/**
 * An error of the engine: `code` (`ENOENT`, `EACCES`, `EISDIR`, `EINVAL`, `EIO`, `ECHANGED`,
 * `ENOMEM`, `ESTATE`, `ESEARCH`, `EWMREPLAY`) and the file's `path` (the log's; the state
 * store's for `ESTATE`; the search index's for `ESEARCH`). Invalid arguments are `TypeError`s
 * with `code` `EINVALIDARG` and the option's name in `field`.
 */
export interface WmreplayError extends Error {
  code: string;
  path?: string;
  field?: string;
}

/** Options every call that reads a log takes. */
export interface LogOptions {
  /** A log that does not exist rejects with `ENOENT` instead of replaying as an empty log. */
  requireLog?: boolean;
  /**
   * `false`: no process warnings: `WMREPLAY_MISSING_LOG` when the log does not exist (a
   * `LiveReplay` warns once while it stays missing), `WMREPLAY_SKIPPED_LINES` when more than
   * half of its lines are not records.
   */
  warn?: boolean;
}

/**
 * Replays the log (a missing file is an empty replay, unless `requireLog`) into
 * `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`, off the
 * JavaScript thread: a drop-in for the original TypeScript function. `record`
 * defaults to `"js"`, the original's `WM_JSON`.
 */
export function replayWorkingMemoryLog(
  options: ({ logPath: string; record?: RecordMode } & LogOptions) | string,
): Promise<{ messages: Message[]; stats: Stats }>;

/**
 * What a request body is made of besides the log: everything `wmreplay respond` takes,
 * with its defaults.
 */
export interface RequestOptions extends LogOptions {
  /** The user's request: the `CURRENT_USER_REQUEST` message's `user_text`. */
  text: string;
  /** Its `session_id` (`none` when null or absent; an empty string is written empty). */
  sessionId?: string | null;
  /** Text placed before the system rule. */
  system?: string;
  /**
   * The model: the body then starts with the provider's leading fields (`model`, the
   * answer's token limit, `params`). Without it the body has none (the contract's body):
   * there is no built-in model.
   */
  model?: string;
  /** The answer's token limit (`max_tokens` / `max_completion_tokens`); default 1024, with `model` only. */
  maxOutputTokens?: number;
  /** Extra request members (e.g. `{ temperature: 0.2 }`), checked against the provider's API; with `model` only. */
  params?: Record<string, unknown>;
  /** Parameter names to let through although the provider's table does not know them. */
  allowParams?: string[];
  /** Replay only the records of `sessionId` (and those without a session). */
  sessionOnly?: boolean;
  /** Keep only records of these types. */
  kinds?: string[];
  /** Keep only records with `ts_ms` at least this. */
  since?: number;
  /** Keep only records with `ts_ms` at most this. */
  until?: number;
  /** Keep the last N records (after the filters). */
  tail?: number;
  /** Keep the newest records whose message texts fit this many tokens. */
  maxTokens?: number;
  /** How `maxTokens` counts (default `o200k_base`). */
  tokenizer?: Tokenizer;
  /**
   * Cache-stable trimming, in (0, 1]: when the window overflows, its start moves so it holds
   * this share of the budget, and stays there on later turns (remembered in the state store).
   */
  trimTo?: number;
  /** Start a cut window on a record of this type (e.g. `text_input`). */
  startOn?: string;
  /** Mark the latest unanswered `text_input` with a first line `PENDING_USER_INPUT`. */
  markPending?: boolean;
  /** Replay the newest `wm_summary` record first, in place of the records it covers. */
  summaries?: boolean;
  /** Replay the `wm_fact` records as one `WM_KIND=wm_facts` message just before the request. */
  facts?: boolean;
  /** `"auto"`: Anthropic prompt-cache breakpoints (format `anthropic` only). Default `"none"`. */
  cache?: 'auto' | 'none';
  /** Lifetime of the cache entries the breakpoints write. Default `"5m"`. */
  cacheTtl?: '5m' | '1h';
  /** The state store that remembers `trimTo` window starts (default: `<logPath>.wmreplay.db`). */
  state?: string;
  /**
   * Recall (`wmreplay respond --recall K`): the K records (1 to 1000) best matching `text`
   * that the body does not replay, as one `WM_KIND=recall` message just before the request,
   * found by the search index next to the log (made on first use). A `LiveReplay` renders
   * such a body from a one-shot replay.
   */
  recall?: number;
  /** The recall index's language: `'english'` (the default), `'none'`, or another Snowball language. */
  language?: string;
}

/**
 * The request body, ready for `fetch`: the bytes `wmreplay respond` writes for the same
 * options, without a JavaScript object per message. `record` defaults to `"raw"` here (the
 * line as written: byte-stable, so a provider's prompt cache keeps hitting).
 */
export function buildRequestBody(
  options: { logPath: string; format?: Format; record?: RecordMode } & RequestOptions,
): Promise<Buffer>;

export interface Refreshed {
  rebuilt: boolean;
  bytesRead: number;
  bytesCommitted: number;
  recordsAdded: number;
  lateRecords: number;
  /** Whether the log does not exist (an empty replay). */
  logMissing: boolean;
}

/** A replay kept across calls: each parses only the bytes appended since the last. */
export class LiveReplay {
  /** `format` (default `"anthropic"`) and `record` (default `"raw"`) are the replay's, for every call. */
  constructor(logPath: string, options?: { format?: Format; record?: RecordMode });
  readonly logPath: string;
  refresh(options?: LogOptions): Promise<Refreshed>;
  /** Brings the replay up to date, then the body `buildRequestBody` gives for the log's complete lines. */
  requestBody(options: RequestOptions): Promise<Buffer>;
}

/** A record to append: an object, or the JSON text of one. */
export type AppendRecord = Record<string, unknown> | string | Uint8Array;

/** Where each appended record went: the answer of `wmreplay serve`'s `POST /v1/records`. */
export interface Appended {
  written: number;
  records: { ts_ms: number; offset: number; bytes: number }[];
}

/**
 * Appends a record or records to the log (created if needed) as `wmreplay serve` does: each a
 * JSON object with a string `type` (a `ts_ms`, when present, a number), written as one line;
 * stamped with `ts_ms` when it has none (never below the log's last record); one write under the
 * log's lock, never glued to a torn last line, cut back if it fails, synced before it resolves.
 * A record that is not valid rejects the whole batch (`TypeError`, `EINVALIDARG`), nothing written.
 */
export function append(logPath: string, records: AppendRecord | AppendRecord[]): Promise<Appended>;

/** One record of a log, as `records()` gives it (a search hit without a score). */
export interface LogRecord {
  /** Byte offset of the record's line in the log. */
  offset: number;
  /** Its `ts_ms` (`null` when it is not a finite number). */
  ts_ms: number | null;
  /** Its `type`. */
  type: string;
  /** The line's JSON, parsed. */
  record: Record<string, any>;
}

/** Which records `records()` gives, and in which order. */
export interface RecordsOptions extends LogOptions {
  /** Only records whose `type` is one of these. */
  kinds?: string[];
  /** Only records of this `session_id`, and records with none. */
  session?: string;
  /** Only records with `ts_ms` at least this. */
  since?: number;
  /** Only records with `ts_ms` at most this. */
  until?: number;
  /**
   * `"replay"` (default): the replay's order, a stable sort by `ts_ms`; `"log"`: the order the
   * lines were written in (by offset).
   */
  order?: 'replay' | 'log';
}

/**
 * The records of the log (one replay, off the JavaScript thread), each with its line's offset,
 * `ts_ms` and `type`: every record, or those the filters keep. A log that does not exist has none
 * (`[]`; `requireLog` rejects with `ENOENT`); lines that are not records are skipped, as a replay
 * skips them.
 */
export function records(logPath: string, options?: RecordsOptions): Promise<LogRecord[]>;

/** What a search keeps besides the words, and how many: `wmreplay search`'s options. */
export interface SearchOptions {
  /** The most hits, best first: 1 to 1000 (default 10). */
  limit?: number;
  /** Only records whose `type` is one of these. */
  kinds?: string[];
  /** Only records of this `session_id`, and records with none. */
  session?: string;
  /** Only records with `ts_ms` at least this. */
  since?: number;
  /** Only records with `ts_ms` at most this. */
  until?: number;
}

/** One record found: what `wmreplay search` prints for it. */
export interface SearchHit {
  /** Byte offset of the record's line in the log. */
  offset: number;
  /** Its `ts_ms` (`null` when it is not a finite number). */
  ts_ms: number | null;
  /** Its `type`. */
  type: string;
  /** Its score, higher is better: BM25 plus its neighbours' shares, or the fused score of a hybrid search. */
  score: number;
  /** The line's JSON, parsed. */
  record: Record<string, any>;
}

/** What `SearchIndex.refresh()` read into the index. */
export interface IndexRefreshed {
  /** The index was made again from the whole log (first use, or the log was replaced, truncated or rewritten). */
  rebuilt: boolean;
  /** Log bytes read into the index by this call. */
  bytes: number;
  /** Records added to the index by this call. */
  records: number;
}

/**
 * Where a log's search index is kept and how it searches: `wmreplay search`'s
 * `--index`, `--language` and `--embed-*` options.
 */
export interface IndexOptions {
  /** Where the index is kept (default `<logPath>.wmreplay.idx`). */
  indexPath?: string;
  /** `'english'` (the default), `'none'`, or another Snowball language. */
  language?: string;
  /** Hybrid search: an OpenAI-compatible embeddings API (`POST URL/v1/embeddings`). */
  embedUpstream?: string;
  /** The embedding model's name (with `embedUpstream`). */
  embedModel?: string;
  /** The environment variable holding the API's key (default `OPENAI_API_KEY` when set; `''` none). */
  embedKeyEnv?: string;
  /** The vectors' length asked of the model. */
  embedDimensions?: number;
  /** How long a query's own embedding may take, in milliseconds (default 2000). */
  embedTimeout?: number;
  /**
   * How much the meaning's ranking counts against the words' (which counts 1) when the two are
   * fused, 0 to 100 (default 0.2): raise it for a strong embedding model, lower it for a weak one.
   */
  embedWeight?: number;
}

/**
 * The records of the log best matching `query` (its words: letters and digits, case ignored,
 * matched against the words of each record's string values), best first (BM25), off the
 * JavaScript thread: what `wmreplay search` prints. The index is kept next to the log
 * (`<logPath>.wmreplay.idx`, or `indexPath`), built on first use and brought up to date with the
 * appended lines before each search. A log that does not exist finds nothing (`[]`). A query
 * without a word, longer than 4096 bytes or 64 words, or a `limit` out of range rejects with a
 * `TypeError` (`EINVALIDARG`, `field` `query` or `limit`) before anything is read.
 */
export function search(
  logPath: string,
  query: string,
  options?: SearchOptions & IndexOptions,
): Promise<SearchHit[]>;

/** A log's search index kept open across searches, for a long-lived process. */
export class SearchIndex {
  /** Nothing is read or made until the first search or refresh. */
  constructor(logPath: string, options?: IndexOptions);
  readonly logPath: string;
  /** The index file (default `<logPath>.wmreplay.idx`). */
  readonly indexPath: string;
  /** Brings the index up to date with the lines appended since the last call, then searches it. */
  search(query: string, options?: SearchOptions): Promise<SearchHit[]>;
  /** Brings the index up to date only. */
  refresh(): Promise<IndexRefreshed>;
}

/**
 * `CURRENT_USER_REQUEST\nsession_id: <sessionId ?? "none">\nuser_text: <text>`, the current
 * request's message text, as the original function builds it.
 */
export function buildCurrentUserRequestMessage(input: { text: string; sessionId?: string | null }): string;
export function buildCurrentUserRequestMessage(text: string, sessionId?: string | null): string;

/** The system prompt's rule, which every request body carries. */
export const SYSTEM_RULE: string;
