//! The search index on a generated log with planted records: build speed,
//! index size, query latency (planted phrases and common words), recall@5,
//! the cost of one appended record, and a brute-force scan of the log on
//! the same queries.
//!
//! `cargo bench --bench search -- [SIZE] [LOG]`: SIZE as `wmreplay gen`
//! takes it (default 64MiB); LOG reuses a generated log (1000 records are
//! planted into a copy of it).

use std::io::Write;
use std::time::Instant;

use wmreplay::__internals::corpus;
use wmreplay::__internals::search_scan;
use wmreplay::search::{SearchIndex, SearchOptions};

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let size = args.first().map_or("64MiB", String::as_str);
    let dir = tempfile::tempdir().unwrap();
    let base = match args.get(1) {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let p = dir.path().join("gen.log");
            let o = corpus::GenOptions {
                size: corpus::parse_size(size).expect("a size"),
                ..corpus::GenOptions::default()
            };
            let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
            corpus::generate(&o, &mut f, &|_| {}).unwrap();
            f.flush().unwrap();
            p
        }
    };
    // 1,000 planted records, spread through a copy of the log.
    let log = dir.path().join("wm.log");
    let bytes = std::fs::read(&base).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    let every = (lines.len() / 1000).max(1);
    let mut out = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    let mut at = 0u64;
    let mut planted: Vec<(String, u64)> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        out.write_all(l).unwrap();
        at += l.len() as u64;
        if i % every == every / 2 && planted.len() < 1000 && l.ends_with(b"\n") {
            let k = planted.len();
            let phrase = format!("vorlaxi{k} quendrit{k} the Lisbon invoice");
            let line = format!(
                "{{\"type\":\"wm_insight\",\"ts_ms\":{},\"text\":\"a note about {phrase} for the user\"}}\n",
                1_763_700_000_000u64 + i as u64
            );
            out.write_all(line.as_bytes()).unwrap();
            planted.push((phrase, at));
            at += line.len() as u64;
        }
    }
    out.flush().unwrap();
    drop(out);
    let log_len = std::fs::metadata(&log).unwrap().len();
    println!(
        "log: {:.1} MiB, {} planted",
        log_len as f64 / (1 << 20) as f64,
        planted.len()
    );

    let mut index = SearchIndex::new(&log);
    let t = Instant::now();
    index.refresh().unwrap();
    let build = t.elapsed().as_secs_f64();
    let idx_len: u64 = std::fs::read_dir(index.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    println!(
        "build: {build:.2} s, {:.0} MB/s; index {:.1} MiB = {:.2}x the log",
        log_len as f64 / 1e6 / build,
        idx_len as f64 / (1 << 20) as f64,
        idx_len as f64 / log_len as f64
    );

    // Planted phrases: latency and recall@5.
    let o5 = SearchOptions::with_limit(5);
    for (p, _) in planted.iter().take(50) {
        index.search(p, &o5).unwrap();
    }
    let mut times = Vec::new();
    let mut found = 0;
    for (p, offset) in &planted {
        let t = Instant::now();
        let hits = index.search(p, &o5).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        found += usize::from(hits.iter().any(|h| h.offset == *offset));
    }
    println!(
        "planted phrases: p50 {:.2} ms, p99 {:.2} ms; recall@5 {:.1}%",
        percentile(&mut times, 0.5),
        percentile(&mut times, 0.99),
        100.0 * found as f64 / planted.len() as f64
    );
    // Common words: 1 to 3 words of ordinary lines, 200 queries.
    let mut common: Vec<String> = Vec::new();
    for (i, l) in lines
        .iter()
        .step_by((lines.len() / 200).max(1))
        .enumerate()
        .take(200)
    {
        let words: Vec<String> = String::from_utf8_lossy(l)
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() >= 3 && !w.chars().all(|c| c.is_ascii_digit()))
            .map(str::to_lowercase)
            .collect();
        if !words.is_empty() {
            let n = 1 + i % 3;
            common.push(
                words
                    .iter()
                    .rev()
                    .take(n)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    let mut times = Vec::new();
    for q in &common {
        let t = Instant::now();
        index.search(q, &SearchOptions::with_limit(10)).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "common words: p50 {:.1} ms, p99 {:.1} ms",
        percentile(&mut times, 0.5),
        percentile(&mut times, 0.99)
    );
    // One appended record, searchable.
    let mut times = Vec::new();
    for k in 0..100 {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(
            f,
            "{{\"type\":\"wm_event\",\"ts_ms\":1,\"text\":\"zzappended{k}\"}}"
        )
        .unwrap();
        drop(f);
        let t = Instant::now();
        let hits = index.search(&format!("zzappended{k}"), &o5).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(hits.len(), 1);
    }
    println!(
        "append one record, then find it: p50 {:.2} ms",
        percentile(&mut times, 0.5)
    );
    // Brute force: the log scanned and scored per query.
    if std::env::var_os("NO_SCAN").is_some() {
        return;
    }
    let data = std::fs::read(&log).unwrap();
    let mut times = Vec::new();
    for (p, _) in planted.iter().take(5) {
        let t = Instant::now();
        search_scan::search(&data, p, &o5, wmreplay::search::Language::ENGLISH);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "brute-force scan per query: p50 {:.0} ms",
        percentile(&mut times, 0.5)
    );
}
