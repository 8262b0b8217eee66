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

/**
 * An error of the engine: `code` (`ENOENT`, `EACCES`, `EISDIR`, `EINVAL`, `EIO`, `ECHANGED`,
 * `ENOMEM`, `EWMREPLAY`) and the log's `path`. Invalid arguments are `TypeError`s
 * (`code` `EINVALIDARG` when the engine refused them).
 */
export interface WmreplayError extends Error {
  code: string;
  path?: string;
}

/**
 * Replays the log (a missing file is an empty replay) into
 * `{ messages: [{ role, content: [{ type: "text", text }] }], stats }`, off the
 * JavaScript thread: a drop-in for the original TypeScript function. `record`
 * defaults to `"js"`.
 */
export function replayWorkingMemoryLog(
  options: { logPath: string; record?: RecordMode } | string,
): Promise<{ messages: Message[]; stats: Stats }>;

/** The request body, ready for `fetch`, without a JavaScript object per message. */
export function buildRequestBody(options: {
  logPath: string;
  text: string;
  sessionId?: string | null;
  format?: Format;
  /** Text placed before the system rule. */
  system?: string;
  record?: RecordMode;
}): Promise<Buffer>;

export interface Refreshed {
  rebuilt: boolean;
  bytesRead: number;
  bytesCommitted: number;
  recordsAdded: number;
  lateRecords: number;
}

/** A replay kept across calls: each parses only the bytes appended since the last. */
export class LiveReplay {
  constructor(logPath: string, options?: { format?: Format; record?: RecordMode });
  refresh(): Promise<Refreshed>;
  requestBody(input: { text: string; sessionId?: string | null; system?: string }): Promise<Buffer>;
}
