//! The index held to a plain scan-and-score of the log as it is now,
//! through appends, torn lines, truncations, rewrites, replacement and
//! deletion.

use std::io::Write;

use proptest::prelude::*;

use super::{SearchIndex, SearchOptions, naive};

/// Words the analysis changes: stems (`hiking`, `hikes`), stop words,
/// a possessive, diacritics, and an identifier (`D1:3`: whole in a query,
/// two words in prose); and words naming a day (`friday`, `12th`) for
/// questions about time.
const WORDS: [&str; 14] = [
    "lisbon", "invoice", "paid", "friday", "Café", "tea", "the", "x9", "hiking", "hikes", "what",
    "Maya’s", "D1:3", "12th",
];

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (
            prop::sample::select(vec!["text_input", "text_output", "wm_event"]),
            0u64..50,
            prop::collection::vec(prop::sample::select(WORDS.to_vec()), 0..6),
            prop::option::of(prop::sample::select(vec!["a", "b"])),
            prop::option::of(0u8..4),
        )
            .prop_map(|(kind, ts, words, session, id)| {
                let session = session.map_or(String::new(), |s| format!(r#","session_id":"{s}""#));
                let id = id.map_or(String::new(), |k| format!(r#","dia_id":"D1:{k}""#));
                format!(
                    r#"{{"type":"{kind}","ts_ms":{ts}{session}{id},"text":"{}","n":{ts}}}"#,
                    words.join(" ")
                )
            }),
        1 => Just("not json at all lisbon".to_string()),
        1 => Just(r#"{"type":"wm_event","text":"no ts lisbon"}"#.to_string()),
        1 => Just("   ".to_string()),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    Append(Vec<String>),
    /// A line written in two steps: its start now.
    Torn(String),
    Truncate(u8),
    Rewrite(Vec<String>),
    /// Rewritten in place to the same length, then grown.
    Edit(String),
    Delete,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(line(), 1..8).prop_map(Op::Append),
        1 => line().prop_map(Op::Torn),
        1 => any::<u8>().prop_map(Op::Truncate),
        1 => prop::collection::vec(line(), 0..8).prop_map(Op::Rewrite),
        1 => line().prop_map(Op::Edit),
        1 => Just(Op::Delete),
    ]
}

fn query() -> impl Strategy<Value = (String, SearchOptions)> {
    (
        prop::collection::vec(prop::sample::select(WORDS.to_vec()), 1..4),
        1usize..6,
        prop::option::of(prop::sample::select(vec!["text_input", "wm_event"])),
        prop::option::of(prop::sample::select(vec!["a", "b"])),
        prop::option::of(0f64..50.0),
        any::<bool>(),
    )
        .prop_map(|(words, limit, kind, session, since, when)| {
            let mut o = SearchOptions::with_limit(limit);
            o.kinds = kind.map(|k| vec![k.to_string()]);
            o.session = session.map(str::to_string);
            o.since = since;
            // A question about time, sometimes.
            let ask = if when { "when did " } else { "" };
            (format!("{ask}{}", words.join(" ")), o)
        })
}

/// The same hits in the same order, scores equal up to f32 rounding (the
/// index sums its terms' scores in its own order); among hits whose scores
/// are that close, any order, and at the cut any of them.
fn same_ranking(got: &[(u64, f64)], want: &[(u64, f64)]) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1e-3);
    if got.len() != want.len() || got.iter().zip(want).any(|(g, w)| !close(g.1, w.1)) {
        return false;
    }
    let mut i = 0;
    while i < want.len() {
        let mut j = i + 1;
        while j < want.len() && close(want[j].1, want[i].1) {
            j += 1;
        }
        let cut = j == want.len();
        let mut g: Vec<u64> = got[i..j].iter().map(|h| h.0).collect();
        let mut w: Vec<u64> = want[i..j].iter().map(|h| h.0).collect();
        g.sort_unstable();
        w.sort_unstable();
        if !cut && g != w {
            return false;
        }
        i = j;
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn search_equals_a_scan_of_the_log_as_it_is_now(
        ops in prop::collection::vec(op(), 1..10),
        queries in prop::collection::vec(query(), 1..4),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        let mut index = SearchIndex::new(&log);
        let mut torn = String::new();
        for op in ops {
            match op {
                Op::Append(lines) => {
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
                    for l in lines {
                        writeln!(f, "{}{l}", std::mem::take(&mut torn)).unwrap();
                    }
                }
                Op::Torn(l) => {
                    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
                    let half = &l[..l.len() / 2];
                    write!(f, "{half}").unwrap();
                    torn = String::new();
                }
                Op::Truncate(k) => {
                    let len = std::fs::metadata(&log).map_or(0, |m| m.len());
                    let f = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
                    f.set_len(len * u64::from(k) / 256).unwrap();
                }
                Op::Rewrite(lines) => {
                    // Replaced in place: same file, other bytes.
                    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
                    std::fs::write(&log, body).unwrap();
                }
                Op::Edit(l) => {
                    let old = std::fs::read_to_string(&log).unwrap_or_default();
                    std::fs::write(&log, format!("{}{l}\n", old.replace("lisbon", "oporto"))).unwrap();
                }
                Op::Delete => {
                    let _ = std::fs::remove_file(&log);
                }
            }
            let bytes = std::fs::read(&log).unwrap_or_default();
            for (q, o) in &queries {
                let got: Vec<(u64, f64)> = index
                    .search(q, o)
                    .unwrap()
                    .iter()
                    .map(|h| (h.offset, h.score))
                    .collect();
                let want = naive::search(&bytes, q, o, super::Language::ENGLISH);
                prop_assert!(same_ranking(&got, &want), "{} {:?}: {:?} vs {:?}", q, o, got, want);
            }
        }
    }
}

/// Hits carry the record's fields and line, a torn last line waits for its
/// end, and a corrupt or foreign index file is made again, never trusted.
#[test]
fn hits_torn_lines_and_a_corrupt_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(
        &log,
        "{\"type\":\"text_input\",\"ts_ms\":5,\"text\":\"Lisbon invoice\"}\n{\"type\":\"wm_event\",\"ts_ms\":6,\"text\":\"lisbon",
    )
    .unwrap();
    let mut index = SearchIndex::new(&log);
    let hits = index.search("lisbon", &SearchOptions::default()).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (hits[0].offset, hits[0].ts_ms, hits[0].kind.as_str()),
        (0, 5.0, "text_input")
    );
    let json: serde_json::Value = serde_json::from_str(&hits[0].to_json()).unwrap();
    assert_eq!(json["record"]["text"], "Lisbon invoice");
    assert_eq!(
        (json["offset"].as_u64(), json["ts_ms"].as_f64()),
        (Some(0), Some(5.0))
    );
    assert_eq!(json["score"].as_f64(), Some(hits[0].score));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b" tram\"}\n").unwrap();
    let hits = index.search("tram", &SearchOptions::default()).unwrap();
    assert_eq!(hits.len(), 1);
    // Garbage in the index, or a file in its place: built again.
    let path = index.path().to_path_buf();
    drop(index);
    std::fs::write(path.join("meta.json"), vec![7u8; 9000]).unwrap();
    let lisbon = |index: &mut SearchIndex| {
        index
            .search("lisbon", &SearchOptions::default())
            .unwrap()
            .len()
    };
    let mut index = SearchIndex::new(&log);
    assert!(index.refresh().unwrap().rebuilt);
    assert_eq!(lisbon(&mut index), 2);
    drop(index);
    std::fs::remove_dir_all(&path).unwrap();
    std::fs::write(&path, vec![7u8; 9000]).unwrap();
    let mut index = SearchIndex::new(&log);
    assert!(index.refresh().unwrap().rebuilt);
    assert_eq!(lisbon(&mut index), 2);
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "nothing left aside: {names:?}");
    // An index of another log at that path: built again.
    let other = dir.path().join("other.log");
    std::fs::write(&other, "{\"type\":\"a\",\"ts_ms\":1,\"text\":\"porto\"}\n").unwrap();
    let mut o = SearchIndex::at(&other, &path, &crate::ReplayOptions::default());
    assert!(o.refresh().unwrap().rebuilt);
    assert!(index.refresh().unwrap().rebuilt);
    assert!(
        index
            .search("porto", &SearchOptions::default())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn queries_without_words_or_too_long_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "").unwrap();
    let mut index = SearchIndex::new(&log);
    for q in ["", "  ?! ", &"a ".repeat(3000)] {
        let e = index.search(q, &SearchOptions::default()).unwrap_err();
        assert!(matches!(e, crate::Error::Query(_)), "{q:?}: {e}");
    }
    let many: String = (0..70).map(|i| format!("w{i} ")).collect();
    assert!(index.search(&many, &SearchOptions::default()).is_err());
    assert!(index.search("ok", &SearchOptions::with_limit(0)).is_err());
    assert!(
        index
            .search("ok", &SearchOptions::default())
            .unwrap()
            .is_empty()
    );
}

/// A catch-up commits without a sync and says so in its payload: after a
/// reboot (another boot id) that index is built again; a rebuilt index is
/// synced and kept across reboots, and is found up to date by another
/// process.
#[test]
fn unsynced_commits_are_rebuilt_after_a_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "{\"type\":\"a\",\"ts_ms\":1,\"text\":\"alpha\"}\n").unwrap();
    let mut index = SearchIndex::new(&log);
    assert!(index.refresh().unwrap().rebuilt);
    let meta_path = index.path().join("meta.json");
    let payload = |p: &std::path::Path| -> serde_json::Value {
        let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        serde_json::from_str(meta["payload"].as_str().unwrap()).unwrap()
    };
    assert_eq!(payload(&meta_path)["boot"], "");
    // Another process finds it up to date.
    assert!(!SearchIndex::new(&log).refresh().unwrap().rebuilt);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"{\"type\":\"a\",\"ts_ms\":2,\"text\":\"beta\"}\n")
        .unwrap();
    let r = index.refresh().unwrap();
    assert_eq!((r.rebuilt, r.records), (false, 1));
    assert_eq!(payload(&meta_path)["boot"], super::dir::boot_id().as_str());
    // The same commit, as seen after a reboot.
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let mut p = payload(&meta_path);
    p["boot"] = "another-boot".into();
    meta["payload"] = p.to_string().into();
    std::fs::write(&meta_path, meta.to_string()).unwrap();
    let mut after = SearchIndex::new(&log);
    assert!(after.refresh().unwrap().rebuilt);
    assert_eq!(
        after
            .search("beta", &SearchOptions::default())
            .unwrap()
            .len(),
        1
    );
}

/// Records appended one at a time do not leave one segment each: the
/// writer's merges finish before it is let go.
#[test]
fn appends_one_at_a_time_are_merged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    std::fs::write(&log, "{\"type\":\"a\",\"ts_ms\":1,\"text\":\"first\"}\n").unwrap();
    let mut index = SearchIndex::new(&log);
    index.refresh().unwrap();
    for k in 0..60 {
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        writeln!(f, "{{\"type\":\"a\",\"ts_ms\":2,\"text\":\"word{k}\"}}").unwrap();
        drop(f);
        assert_eq!(
            index
                .search(&format!("word{k}"), &SearchOptions::default())
                .unwrap()
                .len(),
            1
        );
    }
    let segments = tantivy::Index::open_in_dir(index.path())
        .unwrap()
        .searchable_segment_ids()
        .unwrap()
        .len();
    assert!(segments <= 16, "{segments} segments");
}

/// The best records by BM25 are scored again: a question about time puts
/// the record that says when first, and a record holding more of the
/// question's words passes one that repeats a single rare word.
#[test]
fn a_when_question_prefers_the_dated_record_and_more_words_beat_one_rare_word() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let mut lines = vec![
        r#"{"type":"text_input","ts_ms":1,"text":"Maya moved to Lisbon, and she loves the light there"}"#.to_string(),
        r#"{"type":"text_input","ts_ms":2,"text":"Maya moved to Lisbon on Friday the 12th"}"#.to_string(),
        r#"{"type":"text_input","ts_ms":3,"text":"a zebra, zebra, zebra and zebra"}"#.to_string(),
        r#"{"type":"text_input","ts_ms":4,"text":"the invoice for the zoo tickets was paid"}"#.to_string(),
    ];
    // Filler that makes "invoice" and "paid" common, "zebra" rare.
    for i in 0..40 {
        lines.push(format!(
            r#"{{"type":"wm_event","ts_ms":{},"text":"invoice {i} paid"}}"#,
            10 + i
        ));
    }
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let offset = |needle: &str| {
        let body = std::fs::read_to_string(&log).unwrap();
        body.find(needle)
            .map(|i| body[..i].rfind('\n').map_or(0, |n| n + 1))
            .unwrap() as u64
    };
    let mut index = SearchIndex::new(&log);
    let first = |index: &mut SearchIndex, q: &str| {
        index.search(q, &SearchOptions::with_limit(5)).unwrap()[0].offset
    };
    // The same words, the same flat score: log order, unless the question
    // asks when.
    assert_eq!(
        first(&mut index, "Did Maya move to Lisbon?"),
        offset("loves the light")
    );
    assert_eq!(
        first(&mut index, "When did Maya move to Lisbon?"),
        offset("Friday the 12th")
    );
    // "zebra" four times outweighs "invoice paid zoo" by BM25 (about 5.8
    // against 3.1); holding three of the four words wins.
    let hits = index
        .search("zebra invoice paid zoo", &SearchOptions::with_limit(5))
        .unwrap();
    assert_eq!(hits[0].offset, offset("zoo tickets"));
    assert_eq!(hits[1].offset, offset("zebra and zebra"));
}
