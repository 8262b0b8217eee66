//! `--record js` end to end against the Node.js oracle running the original TypeScript
//! code as written (`tests/oracle/replay.js --record js`): logs of generated
//! records exercising every rule of `JSON.stringify(JSON.parse(line))`
//! (random nesting, duplicate and integer-like keys, every number form,
//! escapes, surrogates, invalid UTF-8, JavaScript whitespace, broken lines)
//! give byte-identical request bodies in every format, and identical stats.

mod common;

use common::jsgen::{self, Rng};
use common::{assert_same_body, contract_stats, hostile_log, oracle};
use wmreplay::{
    CurrentRequest, Format, LiveReplay, RecordMode, ReplayOptions, replay, system_prompt,
};

const TEXT: &str = "and now? \"quoted\" \u{1} naïve";

fn js_options() -> ReplayOptions {
    {
        let mut o = ReplayOptions::default();
        o.record = RecordMode::Js;
        o
    }
}

/// A log of `n` lines: mostly records with random payloads, some other
/// values, blank and broken lines, and lines from the hostile generator.
fn js_log(seed: u64, n: usize) -> Vec<u8> {
    let mut r = Rng(seed);
    let hostile = hostile_log(seed, n / 4);
    let mut hostile_lines = hostile.split(|&b| b == b'\n');
    let mut out = Vec::new();
    if r.one_in(4) {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    for _ in 0..n {
        match r.below(10) {
            0..=5 => {
                let mut line = Vec::new();
                jsgen::around(&mut r, &mut line);
                // Late arrivals and ties: small integer timestamps.
                if r.one_in(3) {
                    line.extend_from_slice(
                        format!(
                            "{{\"type\":\"text_output\",\"ts_ms\":{},\"v\":",
                            r.below(50)
                        )
                        .as_bytes(),
                    );
                    jsgen::value(&mut r, &mut line, 1);
                    line.push(b'}');
                } else {
                    jsgen::record(&mut r, &mut line);
                }
                jsgen::around(&mut r, &mut line);
                out.extend_from_slice(&line);
            }
            6..=7 => out.extend_from_slice(&jsgen::line(&mut r)),
            _ => {
                if let Some(l) = hostile_lines.next() {
                    out.extend_from_slice(l);
                }
            }
        }
        out.push(b'\n');
    }
    out
}

fn check(seed: u64, log: &[u8], format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.log");
    std::fs::write(&path, log).unwrap();
    let want = oracle(&[
        "respond",
        path.to_str().unwrap(),
        "--text",
        TEXT,
        "--session",
        "s",
        "--format",
        format.name(),
        "--record",
        "js",
    ]);
    let r = replay(log, &js_options());
    let got = r.render_request(
        format,
        &system_prompt(None),
        &CurrentRequest {
            text: TEXT,
            session_id: Some("s"),
        },
    );
    assert_same_body(
        &format!("seed {seed} ({})", format.name()),
        &got,
        &want.body,
    );
    assert_eq!(contract_stats(r.stats()), want.stats, "seed {seed}");
}

#[test]
fn js_bodies_are_byte_identical_to_the_node_oracle() {
    let mut records = 0;
    for seed in 0..40 {
        let log = js_log(seed, 400);
        let format = [Format::Anthropic, Format::OpenAi, Format::Ndjson][seed as usize % 3];
        check(seed, &log, format);
        records += replay(&log, &js_options()).stats().parsed_entries;
    }
    assert!(records > 5_000, "the logs hold records: {records}");
}

#[test]
fn js_mode_on_the_hostile_logs_of_the_raw_differential_test() {
    for seed in 100..120 {
        check(seed, &hostile_log(seed, 200), Format::Anthropic);
    }
}

#[test]
fn js_mode_is_the_same_through_threads_chunks_and_the_live_state() {
    let log = js_log(7, 3000);
    let cut = log.iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let log = &log[..cut];
    let one = replay(log, &js_options());
    let body = one.render_messages(Format::OpenAi);
    for (threads, chunk) in [(1, 0), (2, 4096), (4, 100_000)] {
        let r = replay(log, &{
            let mut o = js_options();
            o.threads = threads;
            o.chunk_size = chunk;
            o
        });
        assert_eq!(r.render_messages(Format::OpenAi), body);
        assert_eq!(r.stats(), one.stats());
    }
    // Records know the line they came from: past its ASCII whitespace, as in
    // raw mode.
    for rec in one.records() {
        let src = one.source_offset(rec) as usize;
        let line_start = log[..src]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1);
        assert!(src < log.len());
        assert!(
            log[line_start..src]
                .iter()
                .all(|&b| wmreplay::__internals::lines::is_trim_byte(b))
        );
        assert!(!wmreplay::__internals::lines::is_trim_byte(log[src]));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.log");
    std::fs::write(&path, b"").unwrap();
    let mut live = LiveReplay::new(&path, Format::OpenAi, js_options());
    let mut at = 0;
    while at < log.len() {
        let end = (at + 7919).min(log.len());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &log[at..end]).unwrap();
        at = end;
        live.refresh().unwrap();
    }
    let joined: Vec<u8> = live
        .chunks()
        .iter()
        .flat_map(|c| c.iter().copied())
        .collect();
    assert_eq!(&joined[..joined.len() - 1], &body[1..body.len() - 1]);
    assert_eq!(contract_stats(live.stats()), contract_stats(one.stats()));
}
