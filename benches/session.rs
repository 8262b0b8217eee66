//! Session deltas and token windows on a large log (issue 6).
//!
//! `cargo bench --bench session` (size: `WMREPLAY_LIVE_SIZE`, default 1GiB;
//! the log is generated with seed 1 into `target/bench-data/` and copied to a
//! scratch file the benchmark appends to).
//!
//! - `session/prepare-ack-small-delta`: append one record, prepare a turn for
//!   a session key whose position is just before it (a one-record
//!   `<memory_delta>`), and acknowledge it: the round trip an agent pays per
//!   turn once its session has had its full replay.
//! - `session/live-window-100k-tokens`: append one record, refresh the live
//!   state, and select a `--max-tokens 100000` o200k window with
//!   cache-stable trimming (token counts of older records are cached).

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use wmreplay::state::{self, Mode, PrepareRequest, Store};
use wmreplay::{Format, LiveReplay, ReplayOptions, Selection, Tokenizer};

/// Appends one in-order record (a newer `ts_ms` each time).
fn append_turn(file: &mut std::fs::File, ts: &mut u64) {
    *ts += 1;
    writeln!(
        file,
        "{{\"type\":\"text_input\",\"ts_ms\":{ts},\"text\":\"one more turn\"}}"
    )
    .unwrap();
}

fn benches(c: &mut Criterion) {
    let (path, _) = common::scratch_log("session");
    let _ = std::fs::remove_file(Store::path_for(&path));
    let store = Mutex::new(Store::open(Store::path_for(&path)).unwrap());
    let sel = Selection::default();
    let options = ReplayOptions::default();
    let req = PrepareRequest {
        log: &path,
        session_key: "bench",
        format: Format::Xml,
        selection: &sel,
        options: &options,
    };
    // The session's first turn: the full replay, acknowledged.
    let full = state::prepare(&store, &req).unwrap();
    assert_eq!(full.mode, Mode::Full);
    store.lock().unwrap().ack(&full.prepare_id, true).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let mut ts = 4_000_000_000_000u64;
    let mut g = c.benchmark_group("session");
    g.sample_size(50);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("prepare-ack-small-delta", |b| {
        b.iter(|| {
            append_turn(&mut file, &mut ts);
            let p = state::prepare(&store, &req).unwrap();
            assert_eq!((p.mode, p.records), (Mode::Delta, 1));
            store.lock().unwrap().ack(&p.prepare_id, true).unwrap();
        })
    });
    let window = {
        let mut o = Selection::default();
        o.max_tokens = Some(100_000);
        o.tokenizer = Tokenizer::O200k;
        o.trim_to = Some(0.8);
        o
    };
    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
    live.refresh().unwrap();
    let (_, first) = live.select(&window, None).unwrap();
    let mut prev = first.window_start;
    g.bench_function("live-window-100k-tokens", |b| {
        b.iter(|| {
            append_turn(&mut file, &mut ts);
            live.refresh().unwrap();
            let (chunks, report) = live.select(&window, prev).unwrap();
            assert!(report.tokens.unwrap() <= 100_000 && !chunks.is_empty());
            prev = report.window_start;
        })
    });
    g.finish();
}

criterion_group!(session, benches);
criterion_main!(session);
