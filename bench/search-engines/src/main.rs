//! Full-text search engine comparison for wmreplay logs: tantivy vs SQLite FTS5.
//! See README.md for the commands. Every subcommand prints `key=value` lines.

use rayon::prelude::*;
use rusqlite::{Connection, params};
use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{Index, IndexReader, ReloadPolicy, TantivyDocument, Term};

// ---------------------------------------------------------------- tokenizing

fn push_tokens(s: &str, out: &mut String) {
    let mut in_tok = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if !in_tok && !out.is_empty() {
                out.push(' ');
            }
            in_tok = true;
            for l in c.to_lowercase() {
                out.push(l);
            }
        } else {
            in_tok = false;
        }
    }
}

/// Streaming collector: writes the tokens of every string value into `out`
/// without building a `serde_json::Value`. At the top level (`top`), the values
/// of the keys "type" and "session_id" are skipped.
struct Collect<'a> {
    out: &'a mut String,
    top: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for Collect<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

struct KeyIsSkipped;
impl<'de> serde::de::DeserializeSeed<'de> for KeyIsSkipped {
    type Value = bool;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}
impl<'de> serde::de::Visitor<'de> for KeyIsSkipped {
    type Value = bool;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == "type" || v == "session_id")
    }
}

impl<'de> serde::de::Visitor<'de> for Collect<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        push_tokens(v, self.out);
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Collect { out: &mut *self.out, top: false })?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(skip) = map.next_key_seed(KeyIsSkipped)? {
            if skip && self.top {
                map.next_value::<serde::de::IgnoredAny>()?;
            } else {
                map.next_value_seed(Collect { out: &mut *self.out, top: false })?;
            }
        }
        Ok(())
    }
}

/// Space-joined lowercased tokens of one line, or None if the line is not valid JSON.
fn doc_text(line: &[u8]) -> Option<String> {
    use serde::de::DeserializeSeed;
    let mut out = String::with_capacity(line.len());
    let mut de = serde_json::Deserializer::from_slice(line);
    Collect { out: &mut out, top: true }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(out)
}

/// The reference implementation (serde_json::Value); used by `check-tokenizer`.
fn doc_text_value(line: &[u8]) -> Option<String> {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => push_tokens(s, out),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let v: Value = serde_json::from_slice(line).ok()?;
    let mut out = String::new();
    match &v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "type" || k == "session_id" {
                    continue;
                }
                walk(x, &mut out);
            }
        }
        other => walk(other, &mut out),
    }
    Some(out)
}

/// check-tokenizer <log>: streaming tokenizer == Value tokenizer (as token multisets).
fn check_tokenizer(log: &str) {
    let mut bad = 0usize;
    let mut n = 0usize;
    let mut invalid = 0usize;
    for_each_block(log, |base, block| {
        for (_, l) in lines_of(base, block) {
            n += 1;
            let a = doc_text(l);
            let b = doc_text_value(l);
            let norm = |x: Option<String>| {
                x.map(|s| {
                    let mut v: Vec<String> = s.split(' ').filter(|t| !t.is_empty()).map(str::to_owned).collect();
                    v.sort();
                    v
                })
            };
            if b.is_none() {
                invalid += 1;
            }
            if norm(a) != norm(b) {
                bad += 1;
            }
        }
    });
    println!("check_tokenizer lines={n} invalid_lines={invalid} mismatches={bad}");
}

fn query_tokens(q: &str) -> Vec<String> {
    let mut s = String::new();
    push_tokens(q, &mut s);
    s.split(' ').filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

// ---------------------------------------------------------------- reading

const BLOCK: usize = 32 << 20;

/// Reads the log in blocks of whole lines; calls `f(base_offset, block)`.
fn for_each_block(path: &str, mut f: impl FnMut(u64, &[u8])) {
    let mut file = File::open(path).unwrap();
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK * 2);
    let mut base = 0u64;
    let mut eof = false;
    while !eof {
        let start = buf.len();
        buf.resize(start + BLOCK, 0);
        let mut filled = start;
        while filled < buf.len() {
            let n = file.read(&mut buf[filled..]).unwrap();
            if n == 0 {
                eof = true;
                break;
            }
            filled += n;
        }
        buf.truncate(filled);
        let cut = if eof {
            buf.len()
        } else {
            match memchr::memrchr(b'\n', &buf) {
                Some(p) => p + 1,
                None => continue, // line longer than the block: read more
            }
        };
        f(base, &buf[..cut]);
        base += cut as u64;
        buf.drain(..cut);
    }
}

/// (offset, line without newline) for every line of a block.
fn lines_of(base: u64, block: &[u8]) -> Vec<(u64, &[u8])> {
    let mut v = Vec::with_capacity(block.len() / 200);
    let mut s = 0usize;
    for p in memchr::memchr_iter(b'\n', block) {
        v.push((base + s as u64, &block[s..p]));
        s = p + 1;
    }
    if s < block.len() {
        v.push((base + s as u64, &block[s..]));
    }
    v
}

fn tokenize_block(base: u64, block: &[u8]) -> Vec<(u64, String)> {
    lines_of(base, block)
        .par_iter()
        .with_min_len(256)
        .filter_map(|&(off, l)| {
            if l.iter().all(|b| b.is_ascii_whitespace()) {
                return None;
            }
            doc_text(l).map(|t| (off, t))
        })
        .collect()
}

fn read_line_at(log: &mut File, off: u64) -> String {
    use std::io::{Seek, SeekFrom};
    log.seek(SeekFrom::Start(off)).unwrap();
    let mut r = BufReader::new(log);
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    s
}

fn log_size(path: &str) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

fn dir_size(p: &Path) -> u64 {
    if p.is_file() {
        return p.metadata().unwrap().len();
    }
    let mut n = 0;
    for e in std::fs::read_dir(p).unwrap() {
        n += dir_size(&e.unwrap().path());
    }
    n
}

// ---------------------------------------------------------------- rng / stats

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

fn report(label: &str, mut d: Vec<Duration>) {
    d.sort();
    let mean = d.iter().map(|x| x.as_secs_f64()).sum::<f64>() / d.len().max(1) as f64 * 1e3;
    println!(
        "{label}: n={} p50_ms={:.3} p99_ms={:.3} max_ms={:.3} mean_ms={:.3}",
        d.len(),
        pct(&d, 50.0),
        pct(&d, 99.0),
        d.last().map_or(f64::NAN, |x| x.as_secs_f64() * 1e3),
        mean
    );
}

// ---------------------------------------------------------------- test data

const COMMON: &[&str] = &[
    "the Lisbon invoice",
    "the replay module",
    "the benchmark table again",
    "prompt caching and the prefix",
    "a summary of the last session",
    "the laptop and the screen",
    "tests for CRLF handling",
    "keep answers short",
];

/// plant <in> <out> <planted.tsv>: inserts 1,000 wm_insight records at spread positions.
fn plant(input: &str, output: &str, tsv: &str) {
    let data = std::fs::read(input).unwrap();
    let lines = lines_of(0, &data);
    let n = lines.len();
    let k = 1000usize;
    let mut w = BufWriter::with_capacity(1 << 20, File::create(output).unwrap());
    let mut t = BufWriter::new(File::create(tsv).unwrap());
    let mut off = 0u64;
    let mut next_plant = 0usize;
    let mut last_ts: u64 = 1763700000000;
    for (li, &(_, l)) in lines.iter().enumerate() {
        w.write_all(l).unwrap();
        w.write_all(b"\n").unwrap();
        off += l.len() as u64 + 1;
        if let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(l) {
            if let Some(ts) = m.get("ts_ms").and_then(Value::as_u64) {
                last_ts = ts;
            }
        }
        // plant i after line (i * n / k + n / (2k))
        while next_plant < k && li == next_plant * n / k + n / (2 * k) {
            let i = next_plant;
            let phrase = format!("vorlaxi{i} quendrit{i} zentharo{i} {}", COMMON[i % COMMON.len()]);
            let text = serde_json::to_string(&format!("note about {phrase}, remember to check it tomorrow")).unwrap();
            let s = format!("{{\"type\":\"wm_insight\",\"ts_ms\":{},\"text\":{text}}}", last_ts + 1);
            writeln!(t, "{off}\t{phrase}").unwrap();
            w.write_all(s.as_bytes()).unwrap();
            w.write_all(b"\n").unwrap();
            off += s.len() as u64 + 1;
            next_plant += 1;
        }
    }
    println!("lines={n} planted={next_plant} out_bytes={off}");
}

/// common <log> <out.tsv> <n>: n queries of 1-3 tokens taken from random lines.
fn common(log: &str, out: &str, nq: usize) {
    let data = std::fs::read(log).unwrap();
    let lines = lines_of(0, &data);
    let mut rng = Rng(0x9E3779B97F4A7C15);
    let mut w = BufWriter::new(File::create(out).unwrap());
    let mut made = 0;
    while made < nq {
        let (_, l) = lines[rng.below(lines.len() as u64) as usize];
        let Some(text) = doc_text(l) else { continue };
        let toks: Vec<&str> = text.split(' ').filter(|t| !t.is_empty()).collect();
        if toks.is_empty() {
            continue;
        }
        let nt = 1 + rng.below(3) as usize;
        let q: Vec<&str> = (0..nt).map(|_| toks[rng.below(toks.len() as u64) as usize]).collect();
        writeln!(w, "-\t{}", q.join(" ")).unwrap();
        made += 1;
    }
}

/// Query file: `<expected offset or ->\t<query text>` per line.
fn read_queries(path: &str) -> Vec<(Option<u64>, Vec<String>)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (a, b) = l.split_once('\t').unwrap();
            (a.parse().ok(), query_tokens(b))
        })
        .collect()
}

// ---------------------------------------------------------------- engines

trait Engine {
    fn search(&mut self, toks: &[String], k: usize) -> Vec<u64>;
}

struct Tantivy {
    reader: IndexReader,
    body: tantivy::schema::Field,
}

impl Tantivy {
    fn open(dir: &str) -> (Index, Tantivy) {
        let index = Index::open_in_dir(dir).unwrap();
        register(&index);
        let body = index.schema().get_field("body").unwrap();
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().unwrap();
        (index, Tantivy { reader, body })
    }
    fn query(&self, toks: &[String]) -> BooleanQuery {
        let qs: Vec<(Occur, Box<dyn Query>)> = toks
            .iter()
            .map(|t| {
                let q: Box<dyn Query> = Box::new(TermQuery::new(
                    Term::from_field_text(self.body, t),
                    IndexRecordOption::WithFreqs,
                ));
                (Occur::Should, q)
            })
            .collect();
        BooleanQuery::new(qs)
    }
    fn search_scored(&self, toks: &[String], k: usize) -> Vec<(f32, u64)> {
        let searcher = self.reader.searcher();
        let q = self.query(toks);
        let top = searcher.search(&q, &TopDocs::with_limit(k).order_by_score()).unwrap();
        top.into_iter()
            .map(|(s, a)| {
                let col = searcher.segment_reader(a.segment_ord).fast_fields().u64("offset").unwrap();
                (s, col.first(a.doc_id).unwrap())
            })
            .collect()
    }
}

impl Engine for Tantivy {
    fn search(&mut self, toks: &[String], k: usize) -> Vec<u64> {
        self.search_scored(toks, k).into_iter().map(|x| x.1).collect()
    }
}

fn register(index: &Index) {
    index
        .tokenizers()
        .register("ws", TextAnalyzer::builder(WhitespaceTokenizer::default()).build());
}

fn tantivy_schema() -> Schema {
    let mut sb = Schema::builder();
    let idx = TextFieldIndexing::default()
        .set_tokenizer("ws")
        .set_index_option(IndexRecordOption::WithFreqs);
    sb.add_text_field("body", TextOptions::default().set_indexing_options(idx));
    sb.add_u64_field("offset", FAST);
    sb.build()
}

fn build_tantivy(log: &str, dir: &str, mem_mb: usize, threads: usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let schema = tantivy_schema();
    let body = schema.get_field("body").unwrap();
    let offset = schema.get_field("offset").unwrap();
    let t0 = Instant::now();
    let index = Index::create_in_dir(dir, schema).unwrap();
    register(&index);
    let mut writer = index.writer_with_num_threads::<TantivyDocument>(threads, mem_mb << 20).unwrap();
    let mut docs = 0usize;
    for_each_block(log, |base, block| {
        let ls = lines_of(base, block);
        let w = &writer;
        docs += ls
            .par_iter()
            .with_min_len(256)
            .map(|&(off, l)| {
                if l.iter().all(|b| b.is_ascii_whitespace()) {
                    return 0;
                }
                let Some(text) = doc_text(l) else { return 0 };
                let mut d = TantivyDocument::new();
                d.add_text(body, &text);
                d.add_u64(offset, off);
                w.add_document(d).unwrap();
                1
            })
            .sum::<usize>();
    });
    let t_added = t0.elapsed();
    writer.commit().unwrap();
    let t_commit = t0.elapsed();
    writer.wait_merging_threads().unwrap();
    let t_all = t0.elapsed();
    let segs = index.searchable_segment_metas().unwrap().len();
    let size = log_size(log);
    println!(
        "engine=tantivy docs={docs} added_s={:.2} commit_s={:.2} total_s={:.2} MBps={:.1} segments={segs} index_bytes={} ratio={:.3}",
        t_added.as_secs_f64(),
        t_commit.as_secs_f64(),
        t_all.as_secs_f64(),
        size as f64 / 1e6 / t_all.as_secs_f64(),
        dir_size(Path::new(dir)),
        dir_size(Path::new(dir)) as f64 / size as f64
    );
}

struct Fts5 {
    conn: Connection,
}

fn match_expr(toks: &[String]) -> String {
    toks.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ")
}

impl Fts5 {
    fn open(db: &str) -> Fts5 {
        let conn = Connection::open(db).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA cache_size=-262144;").unwrap();
        Fts5 { conn }
    }
}

impl Engine for Fts5 {
    fn search(&mut self, toks: &[String], k: usize) -> Vec<u64> {
        let mut st = self
            .conn
            .prepare_cached("SELECT rowid FROM t WHERE t MATCH ?1 ORDER BY rank LIMIT ?2")
            .unwrap();
        st.query_map(params![match_expr(toks), k as i64], |r| r.get::<_, i64>(0))
            .unwrap()
            .map(|r| r.unwrap() as u64)
            .collect()
    }
}

fn build_fts5(log: &str, db: &str, detail: &str, hashsize: i64, optimize: bool, txn_docs: usize) {
    for suf in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db}{suf}"));
    }
    let t0 = Instant::now();
    let mut conn = Connection::open(db).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-1048576; PRAGMA temp_store=MEMORY;
         CREATE VIRTUAL TABLE t USING fts5(body, content='', detail={detail}, tokenize='ascii');"
    ))
    .unwrap();
    if hashsize > 0 {
        conn.execute("INSERT INTO t(t, rank) VALUES('hashsize', ?1)", [hashsize]).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<(u64, String)>>(3);
    let log2 = log.to_owned();
    let producer = std::thread::spawn(move || {
        for_each_block(&log2, |base, block| {
            tx.send(tokenize_block(base, block)).unwrap();
        });
    });
    let mut docs = 0usize;
    let mut in_txn = 0usize;
    let mut txn = conn.transaction().unwrap();
    for batch in rx {
        {
            let mut st = txn.prepare_cached("INSERT INTO t(rowid, body) VALUES(?1, ?2)").unwrap();
            for (off, text) in &batch {
                st.execute(params![*off as i64, text]).unwrap();
            }
        }
        docs += batch.len();
        in_txn += batch.len();
        if in_txn >= txn_docs {
            txn.commit().unwrap();
            txn = conn.transaction().unwrap();
            in_txn = 0;
        }
    }
    txn.commit().unwrap();
    producer.join().unwrap();
    let t_ins = t0.elapsed();
    if optimize {
        conn.execute("INSERT INTO t(t) VALUES('optimize')", []).unwrap();
    }
    let t_opt = t0.elapsed();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
    let t_all = t0.elapsed();
    let nseg: i64 = conn
        .query_row("SELECT count(*) FROM t_data WHERE id>=10", [], |r| r.get(0))
        .unwrap_or(-1);
    drop(conn);
    let size = log_size(log);
    let isz = dir_size(Path::new(db)) + std::fs::metadata(format!("{db}-wal")).map_or(0, |m| m.len());
    println!(
        "engine=fts5 detail={detail} hashsize={hashsize} optimize={optimize} docs={docs} insert_s={:.2} optimize_s={:.2} total_s={:.2} MBps={:.1} data_rows={nseg} index_bytes={isz} ratio={:.3}",
        t_ins.as_secs_f64(),
        (t_opt - t_ins).as_secs_f64(),
        t_all.as_secs_f64(),
        size as f64 / 1e6 / t_all.as_secs_f64(),
        isz as f64 / size as f64
    );
}

fn tokenize_only(log: &str) {
    let t0 = Instant::now();
    let mut docs = 0usize;
    let mut toks = 0usize;
    for_each_block(log, |base, block| {
        let v = tokenize_block(base, block);
        docs += v.len();
        toks += v.iter().map(|(_, t)| t.split(' ').filter(|s| !s.is_empty()).count()).sum::<usize>();
    });
    let s = t0.elapsed().as_secs_f64();
    println!(
        "tokenize_only docs={docs} tokens={toks} s={s:.2} MBps={:.1}",
        log_size(log) as f64 / 1e6 / s
    );
}

// ---------------------------------------------------------------- querying

fn run_queries(e: &mut dyn Engine, log: &str, qfile: &str, label: &str, budget_s: f64, passes: usize, drop_common: bool) {
    let mut qs = read_queries(qfile);
    if drop_common {
        // keep only the made-up words (drop the common words of the phrase)
        for (_, t) in qs.iter_mut() {
            t.retain(|w| w.chars().any(|c| c.is_ascii_digit()));
        }
    }
    let mut logf = File::open(log).unwrap();
    // warm-up: one pass (bounded by the budget)
    let tw = Instant::now();
    let mut warm = 0;
    for (_, t) in &qs {
        e.search(t, 5);
        warm += 1;
        if tw.elapsed().as_secs_f64() > budget_s {
            break;
        }
    }
    let mut lat = Vec::new();
    let mut hits = 0usize;
    let mut judged = 0usize;
    let mut verified = 0usize;
    let tb = Instant::now();
    'outer: for pass in 0..passes {
        for (exp, t) in &qs {
            let t1 = Instant::now();
            let r = e.search(t, 5);
            lat.push(t1.elapsed());
            if pass == 0 {
                if let Some(x) = exp {
                    judged += 1;
                    if r.contains(x) {
                        hits += 1;
                        let line = read_line_at(&mut logf, *x);
                        if line.contains(t[0].as_str()) {
                            verified += 1;
                        }
                    }
                }
            }
            if tb.elapsed().as_secs_f64() > budget_s {
                break 'outer;
            }
        }
    }
    println!("{label}: warmup_queries={warm}");
    report(label, lat);
    if judged > 0 {
        println!(
            "{label}: recall@5={:.4} ({hits}/{judged}) readback_verified={verified}",
            hits as f64 / judged as f64
        );
    }
}

fn query_cmd(engine: &str, path: &str, log: &str, planted: &str, commonq: &str, budget_s: f64) {
    let mut boxed: Box<dyn Engine> = match engine {
        "tantivy" => Box::new(Tantivy::open(path).1),
        _ => Box::new(Fts5::open(path)),
    };
    let e = boxed.as_mut();
    run_queries(e, log, planted, "planted_full_phrase", budget_s, 3, false);
    run_queries(e, log, planted, "planted_madeup_words_only", budget_s, 3, true);
    run_queries(e, log, commonq, "common_words", budget_s, 3, false);
}

// ---------------------------------------------------------------- appends

fn new_record(i: usize) -> (String, String) {
    let tok = format!("appendtok{i}z{}", std::process::id());
    let rec = format!(
        "{{\"type\":\"wm_insight\",\"ts_ms\":1799999999000,\"text\":\"appended note {tok} about the replay module\"}}"
    );
    (rec, tok)
}

fn append_tantivy(dir: &str, base_off: u64, n: usize) {
    let (index, t) = Tantivy::open(dir);
    let schema = index.schema();
    let body = schema.get_field("body").unwrap();
    let offset = schema.get_field("offset").unwrap();
    let mut writer = index.writer_with_num_threads::<TantivyDocument>(1, 64 << 20).unwrap();
    let mut lat = Vec::new();
    let mut qlat = Vec::new();
    let mut found = 0;
    let mut off = base_off;
    for i in 0..n {
        let (rec, tok) = new_record(i);
        let t0 = Instant::now();
        let text = doc_text(rec.as_bytes()).unwrap();
        let mut d = TantivyDocument::new();
        d.add_text(body, &text);
        d.add_u64(offset, off);
        writer.add_document(d).unwrap();
        writer.commit().unwrap();
        t.reader.reload().unwrap();
        lat.push(t0.elapsed());
        let t1 = Instant::now();
        let r = t.search_scored(&[tok], 5);
        qlat.push(t1.elapsed());
        if r.first().map(|x| x.1) == Some(off) {
            found += 1;
        }
        off += rec.len() as u64 + 1;
    }
    report("tantivy_append_commit_reload", lat);
    report("tantivy_append_then_query", qlat);
    println!("tantivy_append_found={found}/{n} segments_now={}", index.searchable_segment_metas().unwrap().len());
    writer.wait_merging_threads().unwrap();
}

fn append_fts5(db: &str, base_off: u64, n: usize, sync: &str) {
    let mut e = Fts5::open(db);
    e.conn.execute_batch(&format!("PRAGMA synchronous={sync};")).unwrap();
    let mut lat = Vec::new();
    let mut qlat = Vec::new();
    let mut found = 0;
    let mut off = base_off;
    for i in 0..n {
        let (rec, tok) = new_record(i);
        let t0 = Instant::now();
        let text = doc_text(rec.as_bytes()).unwrap();
        {
            let tx = e.conn.transaction().unwrap();
            tx.prepare_cached("INSERT INTO t(rowid, body) VALUES(?1, ?2)")
                .unwrap()
                .execute(params![off as i64, text])
                .unwrap();
            tx.commit().unwrap();
        }
        lat.push(t0.elapsed());
        let t1 = Instant::now();
        let r = e.search(&[tok], 5);
        qlat.push(t1.elapsed());
        if r.first() == Some(&off) {
            found += 1;
        }
        off += rec.len() as u64 + 1;
    }
    report(&format!("fts5_append_txn_sync_{sync}"), lat);
    report(&format!("fts5_append_then_query_sync_{sync}"), qlat);
    println!("fts5_append_found={found}/{n}");
}

// ---------------------------------------------------------------- bm25 checks

fn fts5_tf_check() {
    for (detail, content) in [("full", "content=''"), ("column", "content=''"), ("column", "content=NULL")] {
        let content = if content == "content=NULL" { "".to_owned() } else { format!("{content},") };
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5(body, {content} detail={detail}, tokenize='ascii');
             INSERT INTO t(rowid, body) VALUES (1, 'apple pear plum fig kiwi lime');
             INSERT INTO t(rowid, body) VALUES (2, 'apple apple apple fig kiwi lime');
             INSERT INTO t(rowid, body) VALUES (3, 'grape pear plum fig kiwi lime');
             INSERT INTO t(rowid, body) VALUES (4, 'grape pear plum fig kiwi lime');"
        ))
        .unwrap();
        for i in 5..40 {
            c.execute("INSERT INTO t(rowid, body) VALUES (?1, 'grape pear plum fig kiwi lime')", [i]).unwrap();
        }
        let mut st = c.prepare("SELECT rowid, rank FROM t WHERE t MATCH '\"apple\"' ORDER BY rank").unwrap();
        let rows: Vec<(i64, f64)> = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
        println!("fts5 detail={detail} [{content}] bm25 for 'apple' (doc1 tf=1, doc2 tf=3, same length, 39 docs): {rows:?}");
    }
    // tantivy same docs
    let index = Index::create_in_ram(tantivy_schema());
    register(&index);
    let schema = index.schema();
    let body = schema.get_field("body").unwrap();
    let offset = schema.get_field("offset").unwrap();
    let mut w = index.writer_with_num_threads::<TantivyDocument>(1, 15 << 20).unwrap();
    for (i, s) in [
        "apple pear plum fig kiwi lime",
        "apple apple apple fig kiwi lime",
        "grape pear plum fig kiwi lime",
        "grape pear plum fig kiwi lime",
    ]
    .iter()
    .enumerate()
    {
        let mut d = TantivyDocument::new();
        d.add_text(body, s);
        d.add_u64(offset, i as u64 + 1);
        w.add_document(d).unwrap();
    }
    for i in 5..40u64 {
        let mut d = TantivyDocument::new();
        d.add_text(body, "grape pear plum fig kiwi lime");
        d.add_u64(offset, i);
        w.add_document(d).unwrap();
    }
    w.commit().unwrap();
    let t = Tantivy { reader: index.reader().unwrap(), body };
    println!("tantivy WithFreqs bm25 for 'apple': {:?}", t.search_scored(&["apple".into()], 5));
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| a.get(i).map(String::as_str).unwrap_or_else(|| panic!("missing argument {i}"));
    let opt = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_owned());
    println!("rayon_threads={}", rayon::current_num_threads());
    match arg(1) {
        "plant" => plant(arg(2), arg(3), arg(4)),
        "common" => common(arg(2), arg(3), opt(4, "200").parse().unwrap()),
        "tokenize" => tokenize_only(arg(2)),
        // build-tantivy <log> <dir> [mem_mb=1024] [threads=2]
        "build-tantivy" => build_tantivy(arg(2), arg(3), opt(4, "1024").parse().unwrap(), opt(5, "2").parse().unwrap()),
        // build-fts5 <log> <db> <full|column> [hashsize=0(default 1MiB)] [optimize=0] [txn_docs=1000000000]
        "build-fts5" => build_fts5(
            arg(2),
            arg(3),
            arg(4),
            opt(5, "0").parse().unwrap(),
            opt(6, "0") == "1",
            opt(7, "1000000000").parse().unwrap(),
        ),
        // query <tantivy|fts5> <index> <log> <planted.tsv> <common.tsv> [budget_s=60]
        "query" => query_cmd(arg(2), arg(3), arg(4), arg(5), arg(6), opt(7, "60").parse().unwrap()),
        // append-tantivy <dir> <log> [n=100]
        "append-tantivy" => append_tantivy(arg(2), log_size(arg(3)), opt(4, "100").parse().unwrap()),
        // append-fts5 <db> <log> [n=100] [sync=NORMAL]
        "append-fts5" => append_fts5(arg(2), log_size(arg(3)), opt(4, "100").parse().unwrap(), &opt(5, "NORMAL")),
        "tf-check" => fts5_tf_check(),
        "check-tokenizer" => check_tokenizer(arg(2)),
        other => panic!("unknown command {other}"),
    }
}
