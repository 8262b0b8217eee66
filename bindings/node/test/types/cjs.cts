// The package's types as CommonJS sees them (`require`).
import wm = require('wmreplay');

export async function check(): Promise<string> {
  const body: Buffer = await wm.buildRequestBody({ logPath: 'wm.log', text: 'hi', tail: 5 });
  const appended = await wm.append('wm.log', { type: 'wm_event' });
  const live = new wm.LiveReplay('wm.log');
  const next: Buffer = await live.requestBody({ text: 'hi', cache: 'auto' });
  const hits: wm.SearchHit[] = await wm.search('wm.log', 'invoice', { limit: 3 });
  const refreshed: wm.IndexRefreshed = await new wm.SearchIndex('wm.log').refresh();
  return wm.SYSTEM_RULE + body.length + appended.written + next.length + hits.length + refreshed.records;
}
