//! Hybrid search at scale, with an instant in-process model (so that what
//! is timed is the engine's part, not a model's): embedding a log's
//! records (read, batched, quantised, written), the vectors file's size,
//! loading it in a new process's index, and query latency, hybrid next to
//! lexical on the same log (their difference is the brute-force int8 scan
//! of every vector and the fusion).
//!
//! `cargo bench --bench hybrid -- [RECORDS] [DIMS]` (default 1000000 768).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use wmreplay::search::{EmbedError, Embedder, HybridOptions, SearchIndex, SearchOptions};

/// Words hashed into `dims` values (a sparse random projection), with
/// `car`, `automobile` and `vehicle` on one dimension of their own.
struct Hashed(usize);

fn hash(w: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in w.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

impl Embedder for Hashed {
    fn model(&self) -> &str {
        "hashed"
    }
    fn embed(&self, texts: &[String], _: Instant) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; self.0];
                for w in t.split_whitespace() {
                    if matches!(w, "car" | "automobile" | "vehicle") {
                        v[0] += 4.0;
                        continue;
                    }
                    let h = hash(w);
                    for k in 0..4 {
                        let d = 1 + ((h >> (k * 12)) as usize % (self.0 - 1));
                        v[d] += if (h >> (48 + k)) & 1 == 0 { 1.0 } else { -1.0 };
                    }
                }
                v
            })
            .collect())
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let records: usize = args
        .first()
        .map_or(1_000_000, |a| a.parse().expect("RECORDS"));
    let dims: usize = args.get(1).map_or(768, |a| a.parse().expect("DIMS"));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let vocabulary: Vec<String> = (0..5000)
        .map(|i| format!("w{:x}", hash(&i.to_string()) % 0xfffff))
        .collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    let mut car = 0u64;
    let mut at = 0u64;
    for i in 0..records {
        let text: Vec<&str> = (0..8)
            .map(|k| vocabulary[(hash(&format!("{i}-{k}")) % 5000) as usize].as_str())
            .collect();
        let line = if i == records / 2 {
            car = at;
            format!(
                r#"{{"type":"wm_insight","ts_ms":{i},"text":"maya parked the automobile outside"}}"#
            )
        } else {
            format!(
                r#"{{"type":"wm_event","ts_ms":{i},"text":"{}"}}"#,
                text.join(" ")
            )
        };
        writeln!(f, "{line}").unwrap();
        at += line.len() as u64 + 1;
    }
    f.flush().unwrap();
    drop(f);
    let log_bytes = std::fs::metadata(&log).unwrap().len();
    println!(
        "log: {records} records, {:.1} MB; model: {dims} dimensions (instant)",
        log_bytes as f64 / 1e6
    );

    let options = HybridOptions::default();
    let mut index = SearchIndex::new(&log).with_embedder(Arc::new(Hashed(dims)), options.clone());
    let t = Instant::now();
    index.refresh().unwrap();
    println!("lexical index built: {:.2} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let done = index.embed_pending(&mut |_, _| {}).unwrap();
    let took = t.elapsed().as_secs_f64();
    assert_eq!(done.failed, None);
    assert_eq!(done.records as usize, records);
    let vectors = std::fs::metadata(SearchIndex::vectors_path_for(index.path()))
        .unwrap()
        .len();
    println!(
        "embedded: {:.2} s ({:.0} records/s, the engine's part); vectors file {:.1} MB = {:.0} bytes a record ({:.2}× the log)",
        took,
        records as f64 / took,
        vectors as f64 / 1e6,
        vectors as f64 / records as f64,
        vectors as f64 / log_bytes as f64
    );
    drop(index);

    // A new index (another process): the vectors file read and checked.
    let mut hybrid = SearchIndex::new(&log).with_embedder(Arc::new(Hashed(dims)), options);
    let t = Instant::now();
    let hits = hybrid.search("vehicle", &SearchOptions::default()).unwrap();
    println!(
        "first hybrid search (vectors file loaded and verified): {:.2} s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(hits[0].offset, car, "the automobile, by meaning");
    let mut lexical = SearchIndex::new(&log);
    let queries: Vec<String> = (0..100)
        .map(|i| {
            format!(
                "{} {}",
                vocabulary[(i * 37) % 5000],
                vocabulary[(i * 91 + 7) % 5000]
            )
        })
        .collect();
    for (name, index) in [("lexical", &mut lexical), ("hybrid", &mut hybrid)] {
        let mut ms = Vec::new();
        for q in &queries {
            let t = Instant::now();
            let hits = index.search(q, &SearchOptions::default()).unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(!hits.is_empty(), "{name}: {q}");
        }
        println!(
            "{name} query, limit 10, {} queries: p50 {:.2} ms, p99 {:.2} ms",
            queries.len(),
            percentile(&mut ms, 0.5),
            percentile(&mut ms, 0.99)
        );
    }
    println!(
        "threads: {} (the scan is split across them)",
        rayon::current_num_threads()
    );
}
