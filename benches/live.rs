//! The live state on a large log: what a server request costs after a small
//! append, against building the state (a full replay) from scratch.
//!
//! `cargo bench --bench live` (size: `WMREPLAY_LIVE_SIZE`, default 1GiB). The
//! log is generated with seed 1 into `target/bench-data/`, then copied to a
//! scratch file that the benchmark appends to.
//!
//! - `live/build`: a fresh `LiveReplay` reads, parses, orders and renders the
//!   whole log (what a server pays once at start, or after a rotation).
//! - `live/append-1-record`: append one in-order record, `refresh`, and build
//!   the request body's pieces (head, the rendered `Bytes` chunks, tail).
//! - `live/append-1-late-record`: the same with a record whose `ts_ms` lands
//!   in the middle of the log (a segment is split).
//! - `live/turn-100k-window`: a turn as the server makes it through a state
//!   that keeps its own window: a question appended, the request body of a
//!   100,000-token window made (refresh included), the answer appended.
//!   Run it at several sizes to see that it does not grow with the log:
//!   `WMREPLAY_LIVE_SIZE=1MiB cargo bench --bench live -- 'turn|append-1-record'`.

use std::io::Write;
use std::time::{Duration, Instant};

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use wmreplay::{
    CacheMemory, CachePolicy, CurrentRequest, Format, LiveReplay, ReplayOptions, RequestSpec,
    SYSTEM_RULE, Selection, request_envelope,
};

fn body_parts(live: &LiveReplay) -> Vec<bytes::Bytes> {
    let current = CurrentRequest {
        text: "what next?",
        session_id: Some("s-1"),
    };
    let fields = r#""model":"m","max_tokens":1024"#;
    let system = wmreplay::system_prompt(None);
    let (head, tail) = request_envelope(live.format(), fields, &system, &current);
    let mut parts = vec![bytes::Bytes::from(head)];
    parts.extend(live.chunks());
    parts.push(bytes::Bytes::from(tail));
    parts
}

fn benches(c: &mut Criterion) {
    let (path, size) = common::scratch_log("live");
    let mut g = c.benchmark_group("live");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(criterion::Throughput::Bytes(size));
    g.bench_function("build", |b| {
        b.iter(|| {
            let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
            live.refresh().unwrap();
            assert!(live.info().records > 0);
            live.info().records
        })
    });
    g.finish();

    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
    live.refresh().unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    let mut g = c.benchmark_group("live");
    g.sample_size(200);
    // Far past the corpus's timestamps: every append is in order.
    let mut ts = 4_000_000_000_000u64;
    g.bench_function("append-1-record", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ts += 1;
                let line = format!("{{\"type\":\"text_input\",\"ts_ms\":{ts},\"session_id\":\"s-1\",\"text\":\"one more \\\"turn\\\"\"}}\n");
                file.write_all(line.as_bytes()).unwrap();
                let t = Instant::now();
                let r = live.refresh().unwrap();
                let parts = body_parts(&live);
                total += t.elapsed();
                assert_eq!((r.records_added, r.late_records), (1, 0));
                assert!(parts.len() >= 3);
            }
            total
        })
    });
    let middle = 1_763_700_000_000u64 + 1_000_000;
    g.bench_function("append-1-late-record", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for i in 0..iters {
                let line = format!(
                    "{{\"type\":\"wm_event\",\"ts_ms\":{},\"late\":true}}\n",
                    middle + i
                );
                file.write_all(line.as_bytes()).unwrap();
                let t = Instant::now();
                let r = live.refresh().unwrap();
                let parts = body_parts(&live);
                total += t.elapsed();
                assert_eq!((r.records_added, r.late_records), (1, 1));
                assert!(parts.len() >= 3);
            }
            total
        })
    });
    g.finish();
    drop(live);

    // A turn as the server makes it, through a state that keeps its own
    // window: the question appended, the state brought up to date, the
    // request body of a 100,000-token window (starting on a question, the
    // pending one marked, cache breakpoints) made, the answer appended.
    let mut sel = Selection::default();
    sel.max_tokens = Some(100_000);
    sel.start_on = Some("text_input".into());
    sel.mark_pending = true;
    let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default())
        .with_selection(sel.clone());
    let current = CurrentRequest {
        text: "what next?",
        session_id: Some("s-1"),
    };
    let spec = RequestSpec::new(Format::Anthropic, SYSTEM_RULE, current)
        .with_fields(r#""model":"m","max_tokens":1024"#)
        .with_cache(CachePolicy::default());
    let mut memory = CacheMemory::default();
    let mut prev = None;
    // The first turn builds the state and lets go of what no window reaches.
    let (_, report) = live
        .request_body_with(&spec, &sel, prev, &mut memory)
        .unwrap();
    prev = report.window_start;
    let mut g = c.benchmark_group("live");
    g.sample_size(200);
    g.bench_function("turn-100k-window", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                ts += 1;
                let q = format!("{{\"type\":\"text_input\",\"ts_ms\":{ts},\"session_id\":\"s-1\",\"text\":\"one more turn\"}}\n");
                let t = Instant::now();
                file.write_all(q.as_bytes()).unwrap();
                let (body, report) = live
                    .request_body_with(&spec, &sel, prev, &mut memory)
                    .unwrap();
                ts += 1;
                let a = format!("{{\"type\":\"text_output\",\"ts_ms\":{ts},\"session_id\":\"s-1\",\"text\":\"done\"}}\n");
                file.write_all(a.as_bytes()).unwrap();
                total += t.elapsed();
                prev = report.window_start;
                assert!(report.tokens.is_some_and(|t| t <= 100_000) && body.len() > 1000);
            }
            total
        })
    });
    g.finish();
    drop(live);
    let _ = std::fs::remove_file(&path);
}

criterion_group!(live_benches, benches);
criterion_main!(live_benches);
