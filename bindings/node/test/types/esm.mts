// The package's types as an ES module sees them (`import`).
import wm, {
  append,
  buildCurrentUserRequestMessage,
  buildRequestBody,
  LiveReplay,
  replayWorkingMemoryLog,
  search,
  SearchIndex,
  type SearchHit,
  SYSTEM_RULE,
} from 'wmreplay';

const body: Buffer = await buildRequestBody({
  logPath: 'wm.log',
  text: 'hi',
  sessionId: null,
  model: 'claude-sonnet-4-5',
  maxOutputTokens: 512,
  params: { temperature: 0.2 },
  maxTokens: 8000,
  tokenizer: 'o200k_base',
  trimTo: 0.5,
  startOn: 'text_input',
  markPending: true,
  cache: 'auto',
  cacheTtl: '1h',
  requireLog: true,
  warn: false,
});
const appended = await append('wm.log', [{ type: 'wm_event' }, '{"type":"wm_event"}']);
const ts: number = appended.records[0].ts_ms;
const text: string = SYSTEM_RULE + buildCurrentUserRequestMessage({ text: 'hi', sessionId: '' });
const live = new LiveReplay('wm.log', { format: 'openai', record: 'js' });
const next: Buffer = await live.requestBody({ text: 'and now?', tail: 20 });
const missing: boolean = (await live.refresh({ requireLog: false })).logMissing;
const { messages, stats } = await replayWorkingMemoryLog({ logPath: 'wm.log', record: 'raw' });
const first: string = messages[0].content[0].text + stats.parsed_entries;
const rule: string = wm.SYSTEM_RULE;

const hits: SearchHit[] = await search('wm.log', 'lisbon invoice', {
  limit: 5,
  kinds: ['text_input'],
  session: 's-42',
  since: 0,
  until: 1e13,
  indexPath: 'wm.idx',
});
const found: number = hits[0].offset + (hits[0].ts_ms ?? 0) + hits[0].score;
const kind: string = hits[0].type + String(hits[0].record.text);
const index = new SearchIndex('wm.log', { indexPath: 'wm.idx' });
const again: SearchHit[] = await index.search('invoice', { limit: 1 });
const { rebuilt, bytes, records } = await index.refresh();
const where: string = index.indexPath + index.logPath + rebuilt + bytes + records + again.length;

// @ts-expect-error: a SearchIndex's path is set when it is made
await index.search('invoice', { indexPath: 'other.idx' });
// @ts-expect-error: kinds is a list
await search('wm.log', 'invoice', { kinds: 'text_input' });
// @ts-expect-error: not a format
await buildRequestBody({ logPath: 'wm.log', text: 'hi', format: 'html' });
// @ts-expect-error: a LiveReplay's format is set when it is made
await live.requestBody({ text: 'hi', format: 'openai' });
// @ts-expect-error: the text is required
await buildRequestBody({ logPath: 'wm.log' });

export { body, ts, text, next, missing, first, rule, found, kind, where };
