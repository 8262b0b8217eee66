//! Criterion benchmarks: each stage on its own (split, parse, sort, render)
//! and end to end, on generated logs of 1 MiB, 64 MiB and 1 GiB, reported in
//! bytes of log per second, each asserting its answer. The naive replay
//! (serde_json line by line, one thread, `sort_by`) runs beside the engine.
//!
//! Sizes: `WMREPLAY_BENCH_SIZES=1MiB,64MiB` (default `1MiB,64MiB,1GiB`).
//! The corpus is generated once into `target/bench-data/` (seed 1).
//!
//! Run: `cargo bench --bench replay` (add `-- parse` to run one group).

use std::path::PathBuf;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use wmreplay::__internals::corpus::{GenOptions, generate, parse_size};
use wmreplay::__internals::lines::{Lines, content_start, trim};
use wmreplay::__internals::order;
use wmreplay::__internals::replay::parse_range;
use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, Validator, replay};

#[path = "../tests/naive/mod.rs"]
mod naive;

fn sizes() -> Vec<(String, u64)> {
    let spec = std::env::var("WMREPLAY_BENCH_SIZES").unwrap_or_else(|_| "1MiB,64MiB,1GiB".into());
    spec.split(',')
        .map(|s| {
            (
                s.trim().to_string(),
                parse_size(s).expect("a size like 64MiB"),
            )
        })
        .collect()
}

/// The benchmark corpus of `size` bytes, generated once and kept in target/.
fn corpus(name: &str, size: u64) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("bench-{name}-seed1.log"));
    if let Ok(bytes) = std::fs::read(&path)
        && bytes.len() as u64 >= size
    {
        return bytes;
    }
    let mut out = Vec::with_capacity(size as usize + (1 << 20));
    let options = GenOptions {
        size,
        seed: 1,
        ..GenOptions::default()
    };
    generate(&options, &mut out, &|_| {}).unwrap();
    std::fs::write(&path, &out).unwrap();
    out
}

fn options(threads: usize, validator: Validator) -> ReplayOptions {
    {
        let mut o = ReplayOptions::default();
        o.threads = threads;
        o.validator = validator;
        o
    }
}

fn benches(c: &mut Criterion) {
    let current = CurrentRequest {
        text: "What should I do next?",
        session_id: Some("s-42"),
    };
    for (name, size) in sizes() {
        let log = corpus(&name, size);
        // The expected answers, from one reference replay.
        let reference = replay(&log, &ReplayOptions::default());
        let records = reference.stats().parsed_entries as usize;
        let nonempty = reference.stats().total_lines;
        let body_len = reference
            .render_request(Format::Anthropic, SYSTEM_RULE, &current)
            .len();
        let start = content_start(&log);
        // The records in file order: the parse's in-order ones and its
        // late arrivals, put back where the file has them.
        let file_order = {
            let p = parse_range(
                &log,
                start..log.len(),
                1,
                &ReplayOptions::default(),
                &|_| {},
            );
            let mut v = [p.records, p.late].concat();
            v.sort_unstable_by_key(|r| r.offset());
            v
        };

        let mut g = c.benchmark_group(format!("replay/{name}"));
        g.throughput(Throughput::Bytes(log.len() as u64));
        if size >= 64 << 20 {
            g.sample_size(10);
            g.warm_up_time(Duration::from_secs(1));
            g.measurement_time(Duration::from_secs(if size >= 1 << 30 { 20 } else { 5 }));
        }

        g.bench_function("split", |b| {
            b.iter(|| {
                let n = Lines::new(&log, start..log.len())
                    .filter(|l| !trim(&log[l.range.clone()]).is_empty())
                    .count() as u64;
                assert_eq!(n, nonempty);
                n
            })
        });

        for (label, threads, validator) in [
            ("scan/1-thread", 1, Validator::Scan),
            ("scan/2-threads", 2, Validator::Scan),
            ("simd-json/1-thread", 1, Validator::SimdJson),
            ("simd-json/2-threads", 2, Validator::SimdJson),
        ] {
            g.bench_with_input(BenchmarkId::new("parse", label), &threads, |b, _| {
                let o = options(threads, validator);
                b.iter(|| {
                    let p = parse_range(&log, start..log.len(), 1, &o, &|_| {});
                    assert_eq!(p.records.len() + p.late.len(), records);
                    p.records.len()
                })
            });
        }

        g.bench_function("sort", |b| {
            b.iter_batched(
                || file_order.clone(),
                |mut v| {
                    order::sort_records(&mut v, true);
                    assert!(order::is_ordered(&v) && v.len() == records);
                    v
                },
                BatchSize::LargeInput,
            )
        });

        g.bench_function("render", |b| {
            b.iter(|| {
                let body = reference.render_request(Format::Anthropic, SYSTEM_RULE, &current);
                assert_eq!(body.len(), body_len);
                body
            })
        });

        g.bench_function("end-to-end", |b| {
            b.iter(|| {
                let r = replay(&log, &ReplayOptions::default());
                let body = r.render_request(Format::Anthropic, SYSTEM_RULE, &current);
                assert_eq!(body.len(), body_len);
                body.len()
            })
        });

        g.bench_function("naive-serde_json/end-to-end", |b| {
            b.iter(|| {
                let (body, stats) =
                    naive::respond(&log, SYSTEM_RULE, current.text, current.session_id);
                assert_eq!(stats.parsed_entries as usize, records);
                assert_eq!(body.len(), body_len);
                body.len()
            })
        });
        g.finish();
    }
}

criterion_group!(replay_benches, benches);
criterion_main!(replay_benches);
