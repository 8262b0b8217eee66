//! Hybrid search with a deterministic model in process: found by meaning,
//! lexical when the model fails, embedded once it recovers, incremental on
//! appends, and started over for another model, a damaged file or a
//! rewritten log.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{EmbedError, Embedder, HybridOptions};
use crate::search::{SearchIndex, SearchOptions};

/// Words hashed into dimensions 8 to 63; a few synonyms (which the
/// lexical search cannot match) each have a dimension of their own below.
struct Mock {
    model: String,
    fail: AtomicBool,
    texts: AtomicUsize,
}

impl Mock {
    fn new(model: &str) -> Arc<Mock> {
        Arc::new(Mock {
            model: model.into(),
            fail: AtomicBool::new(false),
            texts: AtomicUsize::new(0),
        })
    }
}

pub(crate) fn mock_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; 64];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let w = w.to_lowercase();
        let dim = match w.as_str() {
            "car" | "automobile" | "vehicle" => 0,
            "doctor" | "physician" => 1,
            other => 8 + (xxhash_rust::xxh3::xxh3_64(other.as_bytes()) % 56) as usize,
        };
        v[dim] += 1.0;
    }
    v
}

impl Embedder for Mock {
    fn model(&self) -> &str {
        &self.model
    }
    fn embed(&self, texts: &[String], _: Instant) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(EmbedError::failed("the mock is down"));
        }
        if texts.len() > 1 && texts.iter().any(|t| t.contains("REFUSE")) {
            return Err(EmbedError::refused("too much"));
        }
        if texts.len() == 1 && texts[0].contains("REFUSE") {
            return Err(EmbedError::refused("not this one"));
        }
        self.texts.fetch_add(texts.len(), Ordering::Relaxed);
        Ok(texts.iter().map(|t| mock_vector(t)).collect())
    }
}

fn options() -> HybridOptions {
    HybridOptions {
        batch: 3,
        concurrency: 2,
        retry_pause: Duration::ZERO,
        ..HybridOptions::default()
    }
}

fn write_log(path: &Path, texts: &[&str]) {
    let mut f = std::fs::File::create(path).unwrap();
    for (i, t) in texts.iter().enumerate() {
        writeln!(f, r#"{{"type":"wm_event","ts_ms":{i},"text":"{t}"}}"#).unwrap();
    }
}

fn append(path: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(f, "{line}").unwrap();
}

const TEXTS: [&str; 6] = [
    "the invoice for Lisbon was paid",
    "my automobile broke down on the bridge",
    "meeting notes about the deploy",
    "the physician said to rest",
    "groceries: apples and bread",
    "REFUSE this text please",
];

fn offsets(hits: &[crate::search::Hit]) -> Vec<u64> {
    hits.iter().map(|h| h.offset).collect()
}

fn offset_of(path: &Path, needle: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text[..text.find(needle).unwrap()]
        .rfind('\n')
        .map_or(0, |i| i as u64 + 1)
}

#[test]
fn hybrid_finds_by_meaning_what_no_word_of_the_query_matches() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, &TEXTS);
    let car = offset_of(&log, "automobile");
    // Lexically, "car" and "bridge" share nothing with that record but
    // "bridge"; "vehicle" and "car" nothing at all.
    let lexical = SearchIndex::new(&log)
        .search("vehicle car", &SearchOptions::default())
        .unwrap();
    assert!(lexical.is_empty());
    let model = Mock::new("mock-64");
    let mut index = SearchIndex::new(&log).with_embedder(model.clone(), options());
    let hits = index
        .search("vehicle car", &SearchOptions::with_limit(2))
        .unwrap();
    assert_eq!(hits[0].offset, car, "{hits:?}");
    // The fused score: the vectors' nearest (its weight times 1), absent
    // lexically.
    assert!(
        (hits[0].score - options().vector_weight).abs() < 1e-9,
        "{}",
        hits[0].score
    );
    let status = index.vectors().unwrap();
    assert_eq!(
        (status.records, status.refused, status.dimensions),
        (5, 1, 64)
    );
    assert_eq!(status.covered, std::fs::metadata(&log).unwrap().len());
    assert!(status.path.exists());
    // Filters and `skip` hold for the vector ranking too.
    let mut o = SearchOptions::with_limit(5);
    o.since = Some(2.0);
    let hits = index.search("vehicle car", &o).unwrap();
    assert!(!offsets(&hits).contains(&car));
    let hits = index.recall_hits("automobile", 3, &|o| o == car).unwrap();
    assert!(!offsets(&hits).contains(&car));
    // A record in both rankings beats one in only one.
    let both = index
        .search("physician doctor", &SearchOptions::with_limit(3))
        .unwrap();
    assert_eq!(both[0].offset, offset_of(&log, "physician"));
    assert!(both[0].score > 1.0 / 61.0);
}

#[test]
fn a_failing_model_leaves_search_lexical_until_it_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, &TEXTS);
    let model = Mock::new("mock-64");
    model.fail.store(true, Ordering::Relaxed);
    let mut index = SearchIndex::new(&log).with_embedder(model.clone(), options());
    let plain = SearchIndex::new(&log)
        .search("invoice", &SearchOptions::default())
        .unwrap();
    let hits = index.search("invoice", &SearchOptions::default()).unwrap();
    // Exactly the lexical answer, its BM25 scores included.
    assert_eq!(hits, plain);
    let status = index.vectors().unwrap();
    assert_eq!(status.records, 0);
    assert!(status.last_error.unwrap().contains("down"));
    assert!(
        index
            .search("vehicle car", &SearchOptions::default())
            .unwrap()
            .is_empty()
    );
    // Back up: the next search embeds what waited.
    model.fail.store(false, Ordering::Relaxed);
    let hits = index
        .search("vehicle car", &SearchOptions::default())
        .unwrap();
    assert_eq!(hits[0].offset, offset_of(&log, "automobile"));
    assert_eq!(index.vectors().unwrap().last_error, None);
}

#[test]
fn appends_are_embedded_alone_and_a_new_process_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, &TEXTS);
    let model = Mock::new("mock-64");
    let mut index = SearchIndex::new(&log).with_embedder(model.clone(), options());
    let done = index.embed_pending(&mut |_, _| {}).unwrap();
    assert!(done.rebuilt);
    assert_eq!((done.records, done.failed), (6, None));
    assert_eq!(model.texts.load(Ordering::Relaxed), 5);
    append(
        &log,
        r#"{"type":"wm_event","ts_ms":9,"text":"the vehicle is fixed"}"#,
    );
    // A line still being written waits for its newline.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(br#"{"type":"wm_event","ts_ms":10,"text":"half"#)
        .unwrap();
    let hits = index.search("car", &SearchOptions::with_limit(3)).unwrap();
    assert_eq!(
        model.texts.load(Ordering::Relaxed),
        7,
        "the append and the query"
    );
    assert!(offsets(&hits).contains(&offset_of(&log, "vehicle is fixed")));
    // Another index (another process) reads the vectors, embeds nothing.
    let again = Mock::new("mock-64");
    let mut other = SearchIndex::new(&log).with_embedder(again.clone(), options());
    let done = other.embed_pending(&mut |_, _| {}).unwrap();
    assert_eq!((done.rebuilt, done.records), (false, 0));
    assert_eq!(again.texts.load(Ordering::Relaxed), 0);
    let hits2 = other.search("car", &SearchOptions::with_limit(3)).unwrap();
    assert_eq!(hits2, hits);
}

#[test]
fn another_model_a_damaged_file_or_a_rewritten_log_embed_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    write_log(&log, &TEXTS);
    let embed = |model: &str| {
        let mut index = SearchIndex::new(&log).with_embedder(Mock::new(model), options());
        index.embed_pending(&mut |_, _| {}).unwrap()
    };
    assert!(embed("mock-64").rebuilt);
    assert!(!embed("mock-64").rebuilt);
    assert!(embed("other-model").rebuilt, "another model");
    assert!(!embed("other-model").rebuilt);
    let vec = SearchIndex::vectors_path_for(&SearchIndex::path_for(&log));
    for at in [300u64, 20] {
        // An entry's byte, then the header's, changed in place.
        let mut bytes = std::fs::read(&vec).unwrap();
        bytes[at as usize] ^= 0x10;
        std::fs::write(&vec, &bytes).unwrap();
        let d = embed("other-model");
        assert!(d.rebuilt, "byte {at}");
        assert_eq!(d.records, 6);
    }
    // Cut short, then gone.
    let len = std::fs::metadata(&vec).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&vec)
        .unwrap()
        .set_len(len - 5)
        .unwrap();
    assert!(embed("other-model").rebuilt);
    std::fs::remove_file(&vec).unwrap();
    assert!(embed("other-model").rebuilt);
    // The log rewritten in place (same inode, other bytes before the end).
    let text = std::fs::read_to_string(&log)
        .unwrap()
        .replace("Lisbon", "Porto!");
    std::fs::write(&log, text).unwrap();
    assert!(embed("other-model").rebuilt, "a rewritten log");
    // Entries written past the header's count by a crash are cut.
    let mut f = std::fs::OpenOptions::new().append(true).open(&vec).unwrap();
    f.write_all(&[7u8; 100]).unwrap();
    append(&log, r#"{"type":"wm_event","ts_ms":9,"text":"one more"}"#);
    let d = embed("other-model");
    assert_eq!((d.rebuilt, d.records), (false, 1));
    assert!(!embed("other-model").rebuilt);
}

#[test]
fn vectors_of_another_log_in_place_start_over_at_the_search() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    write_log(&a, &TEXTS);
    write_log(&b, &["alpha", "beta gamma delta epsilon zeta", "eta"]);
    for log in [&a, &b] {
        let mut index = SearchIndex::new(log).with_embedder(Mock::new("m"), options());
        index.embed_pending(&mut |_, _| {}).unwrap();
    }
    let vec = |log: &Path| SearchIndex::vectors_path_for(&SearchIndex::path_for(log));
    std::fs::copy(vec(&b), vec(&a)).unwrap();
    let mut index = SearchIndex::new(&a).with_embedder(Mock::new("m"), options());
    let hits = index
        .search("vehicle car", &SearchOptions::default())
        .unwrap();
    assert_eq!(hits[0].offset, offset_of(&a, "automobile"));
    assert_eq!(index.vectors().unwrap().records, 5);
}

#[test]
fn a_search_for_k_is_the_first_k_of_a_deeper_one() {
    // Enough records that rankings run past the fusion's depth: each holds
    // a few of a small vocabulary, so scores repeat and spread.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let words = [
        "car", "doctor", "invoice", "bridge", "apples", "deploy", "rest", "notes",
    ];
    let texts: Vec<String> = (0..400usize)
        .map(|i| {
            (0..1 + i % 4)
                .map(|j| words[(i * 7 + j * 3) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    write_log(&log, &texts.iter().map(String::as_str).collect::<Vec<_>>());
    let mut index = SearchIndex::new(&log).with_embedder(Mock::new("m"), options());
    for query in ["car invoice", "physician apples", "automobile"] {
        let deep = offsets(
            &index
                .search(query, &SearchOptions::with_limit(300))
                .unwrap(),
        );
        assert!(deep.len() > super::fuse::DEPTH, "{query}: {}", deep.len());
        for k in [1, 5, 10, 50, 100, 150] {
            let got = offsets(&index.search(query, &SearchOptions::with_limit(k)).unwrap());
            assert_eq!(got, deep[..k], "{query}, limit {k}");
        }
    }
}

/// A model that holds every batch of records (three texts, then two) until
/// the gate opens, counting the batches in flight; a query's one text
/// passes.
struct Gated {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    in_flight: AtomicUsize,
    most: AtomicUsize,
}

impl Embedder for Gated {
    fn model(&self) -> &str {
        "gated-64"
    }
    fn embed(&self, texts: &[String], _: Instant) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.len() > 1 {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            drop(open);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(texts.iter().map(|t| mock_vector(t)).collect())
    }
}

#[test]
fn background_embedding_takes_a_few_threads_however_many_indexes_wait() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Gated {
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
    });
    let opts = HybridOptions {
        concurrency: 1,
        wait: Some(Duration::ZERO),
        ..options()
    };
    let n = 3 * super::MAX_CATCH_UPS;
    let mut indexes: Vec<SearchIndex> = (0..n)
        .map(|i| {
            let log = dir.path().join(format!("{i}.log"));
            write_log(&log, &TEXTS[..5]);
            SearchIndex::new(&log).with_embedder(model.clone(), opts.clone())
        })
        .collect();
    // Each search starts its index's catch-up and returns (lexically).
    for index in &mut indexes {
        index.search("a query", &SearchOptions::default()).unwrap();
        assert!(index.vectors().unwrap().embedding);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while model.in_flight.load(Ordering::SeqCst) < super::MAX_CATCH_UPS && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert!(model.most.load(Ordering::SeqCst) <= super::MAX_CATCH_UPS);
    // A search with a bounded wait does not wait for a catch-up that waits
    // for a thread: it answers by the words at once.
    let log = dir.path().join("waiting.log");
    write_log(&log, &TEXTS[..5]);
    let mut waiting = SearchIndex::new(&log).with_embedder(
        model.clone(),
        HybridOptions {
            wait: Some(Duration::from_secs(30)),
            ..opts.clone()
        },
    );
    let asked = Instant::now();
    let hits = waiting
        .search("invoice", &SearchOptions::default())
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    assert!(waiting.vectors().unwrap().embedding);
    // An index whose catch-up waits for a thread, embedded by its caller:
    // taken over and done there, without waiting for the threads.
    let log = dir.path().join("late.log");
    write_log(&log, &TEXTS[..5]);
    let quick = Mock::new("mock-64");
    let mut late = SearchIndex::new(&log).with_embedder(quick.clone(), opts.clone());
    late.search("a query", &SearchOptions::default()).unwrap();
    assert_eq!(late.embed_pending(&mut |_, _| {}).unwrap().records, 5);
    assert_eq!(
        quick.texts.load(Ordering::Relaxed),
        6,
        "five records and the query, once"
    );
    *model.open.lock().unwrap() = true;
    model.opened.notify_all();
    // Every index is embedded in its turn.
    indexes.push(waiting);
    for index in &indexes {
        while index.vectors().unwrap().embedding {
            assert!(Instant::now() < deadline + Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(index.vectors().unwrap().records, 5);
    }
    assert!(model.most.load(Ordering::SeqCst) <= super::MAX_CATCH_UPS);
}
