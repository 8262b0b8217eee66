'use strict';
// Search (`search`, `SearchIndex`) against the CLI's `wmreplay search`.
// Which package is tested (WMREPLAY_PACKAGE, WMREPLAY_REPO, WMREPLAY_BIN):
// support.js.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('fs');
const path = require('path');
const { execFileSync, spawnSync } = require('child_process');

const { PACKAGE, EXAMPLE, cli, scratch } = require('./support');
const { search, SearchIndex } = require(PACKAGE);
const { tmp, write } = scratch('wmreplay-node-search-');

const LINES = [
  { type: 'text_input', ts_ms: 100, session_id: 's-1', text: 'Pay the Lisbon invoice on Friday' },
  { type: 'wm_event', ts_ms: 200, session_id: 's-2', event: 'calendar synced' },
  { type: 'text_output', ts_ms: 300, text: 'The invoice for Lisbon is paid', n: { deep: ['lisbon'] } },
  { type: 'wm_insight', ts_ms: 400, session_id: 's-2', text: 'Invoices pile up; one invoice is late' },
];
const LOG = LINES.map((l) => JSON.stringify(l)).join('\n') + '\nnot json, an invoice\n';

// Byte offset of line `i` of LOG.
function offsetOf(i) {
  return LINES.slice(0, i).reduce((n, l) => n + Buffer.byteLength(JSON.stringify(l)) + 1, 0);
}

// What `wmreplay search` prints for the same search, one hit per line.
function cliHits(log, query, args = []) {
  const out = execFileSync(cli(), ['search', log, query, '--format', 'ndjson', ...args], { encoding: 'utf8' });
  return out.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test('search finds a planted record, with its offset, ts_ms, type, score and record', async () => {
  const p = write(LOG);
  const hits = await search(p, 'Friday');
  assert.equal(hits.length, 1);
  const [hit] = hits;
  assert.deepStrictEqual(Object.keys(hit), ['offset', 'ts_ms', 'type', 'score', 'record']);
  assert.equal(hit.offset, 0);
  assert.equal(hit.ts_ms, 100);
  assert.equal(hit.type, 'text_input');
  assert.ok(typeof hit.score === 'number' && hit.score > 0, String(hit.score));
  assert.deepStrictEqual(hit.record, LINES[0]);
  // The index was made next to the log.
  assert.ok(fs.existsSync(`${p}.wmreplay.idx`));
  // A word anywhere in a record's string values, nested ones too.
  const both = await search(p, 'LISBON');
  assert.deepStrictEqual(both.map((h) => h.offset).sort((a, b) => a - b), [0, offsetOf(2)]);
  assert.ok(both[0].score >= both[1].score);
  // Records with any of the words, best first.
  const any = await search(p, 'friday synced');
  assert.deepStrictEqual(any.map((h) => h.offset).sort((a, b) => a - b), [0, offsetOf(1)]);
});

test("search gives the CLI's hits, in its order, for each option", async () => {
  const p = write(LOG);
  const cases = [
    ['invoice', {}, []],
    ['invoice', { limit: 2 }, ['--limit', '2']],
    ['invoice lisbon', { kinds: ['text_output', 'wm_insight'] }, ['--kinds', 'text_output,wm_insight']],
    ['invoice', { session: 's-2' }, ['--session', 's-2']],
    ['invoice', { since: 200, until: 300 }, ['--since', '200', '--until', '300']],
    ['synced calendar', {}, []],
  ];
  for (const [query, options, args] of cases) {
    assert.deepStrictEqual(await search(p, query, options), cliHits(p, query, args), `${query} ${args}`);
  }
  // The example log, a real one.
  const example = write(fs.readFileSync(EXAMPLE));
  for (const query of ['scene', 'user request', 'the']) {
    assert.deepStrictEqual(await search(example, query, { limit: 1000 }), cliHits(example, query, ['--limit', '1000']));
  }
});

test('the options keep what they say: limit, kinds, session, since, until', async () => {
  const p = write(LOG);
  assert.equal((await search(p, 'invoice')).length, 3);
  assert.equal((await search(p, 'invoice', { limit: 1 })).length, 1);
  const kinds = await search(p, 'invoice', { kinds: ['wm_insight'] });
  assert.deepStrictEqual(kinds.map((h) => h.type), ['wm_insight']);
  const since = await search(p, 'invoice', { since: 300 });
  assert.deepStrictEqual(since.map((h) => h.ts_ms).sort(), [300, 400]);
  const until = await search(p, 'invoice', { until: 100 });
  assert.deepStrictEqual(until.map((h) => h.ts_ms), [100]);
  // A session keeps its records and those without one.
  const session = await search(p, 'invoice', { session: 's-1' });
  assert.deepStrictEqual(session.map((h) => h.ts_ms).sort(), [100, 300]);
  // null and undefined are "not given".
  assert.equal((await search(p, 'invoice', { limit: undefined, kinds: null })).length, 3);
});

test('indexPath puts the index elsewhere', async () => {
  const p = write(LOG);
  const idx = path.join(tmp, 'elsewhere.idx');
  assert.equal((await search(p, 'friday', { indexPath: idx })).length, 1);
  assert.ok(fs.existsSync(idx));
  assert.ok(!fs.existsSync(`${p}.wmreplay.idx`));
  const index = new SearchIndex(p, { indexPath: idx });
  assert.equal(index.indexPath, idx);
  assert.equal(index.logPath, p);
  assert.equal(new SearchIndex(p).indexPath, `${p}.wmreplay.idx`);
});

test('a SearchIndex finds a line appended since its last search', async () => {
  const p = write(LOG);
  const index = new SearchIndex(p);
  assert.deepStrictEqual(await index.search('zanzibar'), []);
  const line = { type: 'text_input', ts_ms: 500, text: 'Book the Zanzibar ferry' };
  fs.appendFileSync(p, `${JSON.stringify(line)}\n`);
  const hits = await index.search('zanzibar ferry');
  assert.equal(hits.length, 1);
  assert.equal(hits[0].offset, Buffer.byteLength(LOG));
  assert.deepStrictEqual(hits[0].record, line);
  // refresh() says what it read: nothing now; the next line after an append.
  assert.deepStrictEqual(await index.refresh(), { rebuilt: false, bytes: 0, records: 0 });
  const more = `${JSON.stringify({ type: 'wm_event', ts_ms: 600, e: 'ferry booked' })}\n`;
  fs.appendFileSync(p, more);
  assert.deepStrictEqual(await index.refresh(), { rebuilt: false, bytes: Buffer.byteLength(more), records: 1 });
  assert.equal((await index.search('ferry')).length, 2);
  // Searches at once on one index each get their answer.
  const all = await Promise.all([index.search('ferry'), index.search('invoice'), index.search('friday')]);
  assert.deepStrictEqual(all.map((h) => h.length), [2, 3, 1]);
  // A log rewritten under it is indexed again from the start.
  fs.writeFileSync(p, `${JSON.stringify(line)}\n`);
  const r = await index.refresh();
  assert.equal(r.rebuilt, true);
  assert.equal(r.records, 1);
  assert.deepStrictEqual((await index.search('ferry')).map((h) => h.offset), [0]);
});

test('a bad query or limit rejects with a TypeError carrying the engine message, before anything is made', async () => {
  const p = write(LOG);
  const cases = [
    ['?!', {}, 'query', /^the query has no word to search for/],
    ['x'.repeat(4097), {}, 'query', /^the query is 4097 bytes long; at most 4096 are searched$/],
    [Array.from({ length: 65 }, (_, i) => `w${i}`).join(' '), {}, 'query', /at most 64 are searched$/],
    ['invoice', { limit: 0 }, 'limit', /^limit must be 1 to 1000, not 0$/],
    ['invoice', { limit: 1001 }, 'limit', /^limit must be 1 to 1000, not 1001$/],
    ['invoice', { limit: 2.5 }, 'limit', /whole number/],
  ];
  const index = new SearchIndex(p);
  for (const [query, options, field, message] of cases) {
    for (const call of [() => search(p, query, options), () => index.search(query, options)]) {
      await assert.rejects(call(), (e) => {
        assert.ok(e instanceof TypeError, String(e));
        assert.equal(e.code, 'EINVALIDARG');
        assert.equal(e.field, field);
        assert.match(e.message, message);
        return true;
      });
    }
  }
  assert.ok(!fs.existsSync(`${p}.wmreplay.idx`), 'a refused search makes no index');
  // The CLI refuses the same query with the same words.
  const r = spawnSync(cli(), ['search', p, '?!'], { encoding: 'utf8' });
  assert.equal(r.status, 2);
  assert.ok(r.stderr.includes('the query has no word to search for'), r.stderr);
  // Wrong types and unknown options are TypeErrors naming them.
  for (const [call, field] of [
    [() => search(p, 42), 'query'],
    [() => search(42, 'x'), 'logPath'],
    [() => search(p, 'x', { kinds: 'text_input' }), 'kinds'],
    [() => search(p, 'x', { limit: '5' }), 'limit'],
    [() => search(p, 'x', { tail: 5 }), 'tail'],
    [() => index.search('x', { indexPath: 'y' }), 'indexPath'],
  ]) {
    await assert.rejects(call(), (e) => e instanceof TypeError && e.code === 'EINVALIDARG' && e.field === field);
  }
  assert.throws(() => new SearchIndex(p, { index: 'y' }), TypeError);
});

test('a missing log finds nothing, and no index is made for it', async () => {
  const missing = path.join(tmp, 'nowhere.log');
  assert.deepStrictEqual(await search(missing, 'invoice'), []);
  const index = new SearchIndex(missing);
  assert.deepStrictEqual(await index.search('invoice'), []);
  assert.deepStrictEqual(await index.refresh(), { rebuilt: false, bytes: 0, records: 0 });
  assert.ok(!fs.existsSync(`${missing}.wmreplay.idx`));
  // Once it exists, the same index finds what it holds.
  fs.writeFileSync(missing, LOG);
  assert.equal((await index.search('invoice')).length, 3);
});

test('trouble with the log or the index rejects with an Error naming the file', async () => {
  // The log is a directory.
  await assert.rejects(search(tmp, 'invoice'), (e) => {
    assert.ok(!(e instanceof TypeError));
    assert.equal(e.code, 'EISDIR');
    assert.equal(e.path, tmp);
    assert.ok(e.message.includes(tmp), e.message);
    return true;
  });
  // The index cannot be made: where its folder should be is the log, a file.
  const p = write(LOG);
  const nowhere = path.join(p, 'wm.idx');
  for (const call of [() => search(p, 'invoice', { indexPath: nowhere }), () => new SearchIndex(p, { indexPath: nowhere }).refresh()]) {
    await assert.rejects(call(), (e) => {
      assert.ok(e instanceof Error && !(e instanceof TypeError), String(e));
      assert.ok(['ESEARCH', 'EIO'].includes(e.code), e.code);
      assert.ok(e.path.startsWith(`${p}${path.sep}`), e.path);
      assert.ok(e.message.includes(p), e.message);
      return true;
    });
  }
});

test('language stems or not, and identifiers are found whole, as the CLI', async () => {
  const first = JSON.stringify({ type: 'text_input', ts_ms: 1, text: 'We went hiking with the pets' });
  const p = write(`${first}\n${JSON.stringify({ type: 'wm_event', ts_ms: 2, dia_id: 'D1:13', text: 'what did they do' })}\n`);
  // English by default: a stem finds its inflections.
  assert.deepStrictEqual((await search(p, 'hike pet')).map((h) => h.offset), [0]);
  // Without stemming the words differ; the index is built again for it.
  assert.deepStrictEqual(await search(p, 'hike pet', { language: 'none' }), []);
  assert.deepStrictEqual(await search(p, 'hiking', { language: 'none' }), cliHits(p, 'hiking', ['--language', 'none']));
  // An identifier is found whole, and the query's stop words do not count.
  const hits = await search(p, 'What did D1:13 do?');
  assert.deepStrictEqual(hits.map((h) => h.offset), [Buffer.byteLength(first) + 1]);
  assert.deepStrictEqual(hits, cliHits(p, 'What did D1:13 do?'));
  const index = new SearchIndex(p, { language: 'en' });
  assert.deepStrictEqual((await index.search('pets')).map((h) => h.offset), [0]);
  await assert.rejects(search(p, 'x', { language: 'klingon' }), (e) => e instanceof TypeError && e.code === 'EINVALIDARG' && /unknown language/.test(e.message));
  assert.throws(() => new SearchIndex(p, { language: 'klingon' }), (e) => e instanceof TypeError && e.code === 'EINVALIDARG');
});

// A deterministic stand-in for an OpenAI-compatible embeddings API (the
// engine's HTTP client is what is tested): each word, a few synonyms folded
// together, adds to one of 64 dimensions.
function embeddingsApi() {
  const http = require('http');
  const zlib = require('zlib');
  const synonyms = { canine: 'dog', puppy: 'dog', automobile: 'car' };
  const vector = (text) => {
    const v = new Array(64).fill(0);
    for (let w of text.toLowerCase().match(/[a-z]+/g) ?? []) {
      w = synonyms[w] ?? w;
      v[zlib.crc32(Buffer.from(w)) % 64] += 1;
    }
    return v;
  };
  const api = { calls: 0 };
  api.server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      api.calls += 1;
      const { input, model } = JSON.parse(body);
      const out = JSON.stringify({
        object: 'list',
        data: input.map((t, index) => ({ object: 'embedding', index, embedding: vector(t) })),
        model,
        usage: { prompt_tokens: 1, total_tokens: 1 },
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(out);
    });
  });
  return new Promise((resolve) => api.server.listen(0, '127.0.0.1', () => {
    api.url = `http://127.0.0.1:${api.server.address().port}`;
    resolve(api);
  }));
}

test('hybrid search takes the CLI embed options and gives its hits', async () => {
  const api = await embeddingsApi();
  try {
    const lines = [
      { type: 'text_input', ts_ms: 1, text: 'my dog barks at the mail carrier' },
      { type: 'text_input', ts_ms: 2, text: 'the car needs new tyres' },
      { type: 'wm_event', ts_ms: 3, text: 'calendar synced' },
    ];
    const p = write(lines.map((l) => JSON.stringify(l) + '\n').join(''));
    // By words alone, nothing says "canine".
    assert.deepStrictEqual(await search(p, 'canine'), []);
    const opts = { embedUpstream: api.url, embedModel: 'mock-embed' };
    const hits = await search(p, 'canine', opts);
    assert.deepStrictEqual(hits[0].record, lines[0]);
    assert.ok(api.calls >= 2, String(api.calls));
    const env = { ...process.env };
    delete env.OPENAI_API_KEY;
    // Not execFileSync: the API answers from this process's event loop.
    const { stdout: out } = await require('util').promisify(require('child_process').execFile)(
      cli(), ['search', p, 'canine', '--format', 'ndjson', '--embed-upstream', api.url, '--embed-model', 'mock-embed'], { encoding: 'utf8', env });
    assert.deepStrictEqual(hits, out.split('\n').filter(Boolean).map((l) => JSON.parse(l)));
    // The fusion's weight, as --embed-weight: the vectors' nearest, found by no word, scores the weight.
    const weighted = await search(p, 'canine', { ...opts, embedWeight: 2 });
    const { stdout: out2 } = await require('util').promisify(require('child_process').execFile)(
      cli(), ['search', p, 'canine', '--format', 'ndjson', '--embed-upstream', api.url, '--embed-model', 'mock-embed', '--embed-weight', '2'], { encoding: 'utf8', env });
    assert.deepStrictEqual(weighted, out2.split('\n').filter(Boolean).map((l) => JSON.parse(l)));
    assert.ok(Math.abs(weighted[0].score - 2) < 1e-9, String(weighted[0].score));
    const index = new SearchIndex(p, { ...opts, embedTimeout: 5000 });
    const car = Buffer.byteLength(JSON.stringify(lines[0])) + 1;
    assert.deepStrictEqual((await index.search('automobile', { limit: 1 })).map((h) => h.offset), [car]);
    // A model that cannot be reached: the search is by words.
    const byWords = await search(p, 'car', { embedUpstream: 'http://127.0.0.1:9', embedModel: 'mock-embed', embedTimeout: 500 });
    assert.deepStrictEqual(byWords[0].record, lines[1]);
    for (const [o, field] of [[{ embedUpstream: 'http://x' }, 'embedModel'], [{ embedModel: 'm' }, 'embedUpstream'], [{ embedDimensions: 8 }, 'embedDimensions'], [{ embedWeight: 1 }, 'embedWeight'], [{ embedUpstream: 'http://x', embedModel: 'm', embedWeight: -1 }, 'embedWeight'], [{ embedUpstream: 'http://x', embedModel: 'm', embedWeight: NaN }, 'embedWeight'], [{ embedUpstream: 'ftp://x', embedModel: 'm' }, 'embedUpstream']]) {
      await assert.rejects(search(p, 'car', o), (e) => e instanceof TypeError && e.code === 'EINVALIDARG' && e.field === field);
    }
  } finally {
    api.server.close();
  }
});
