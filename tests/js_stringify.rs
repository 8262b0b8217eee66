//! `wmreplay::__internals::js` against Node.js: thousands of generated lines, each one
//! exercising some of the rules (lossy UTF-8, JavaScript trim, key order and
//! duplicates, number and string output, invalid JSON), go through
//! `tests/oracle/js_stringify.js` and must come out byte for byte as
//! `JsStringifier` writes them. Also here: no allocation per line once the
//! buffers have grown, and a throughput measurement (ignored by default; run
//! it with `cargo test --release --test js_stringify -- --ignored --nocapture`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::process::Command;

mod common;

use common::jsgen::lines;
use wmreplay::__internals::js::JsStringifier;

/// Lines generated for the differential test.
const LINES: usize = 30_000;

/// What the oracle prints for a line: `B`, `E` or `V<json>`.
fn ours(js: &mut JsStringifier, line: &[u8]) -> Vec<u8> {
    let mut out = b"V".to_vec();
    match js.stringify(line, &mut out) {
        Ok(true) => out,
        Ok(false) => b"B".to_vec(),
        Err(_) => b"E".to_vec(),
    }
}

fn node_available() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn js_stringify_matches_node_byte_for_byte() {
    assert!(
        node_available(),
        "the differential tests need Node.js (`node` on PATH) to run the oracle"
    );
    let lines = lines(0x5EED_0007, LINES);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("lines.txt");
    let output = dir.path().join("node.txt");
    std::fs::write(&input, lines.join(&b'\n')).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/js_stringify.js");
    let status = Command::new("node")
        .arg(&script)
        .arg(&input)
        .arg(&output)
        .status()
        .expect("run node");
    assert!(status.success(), "the oracle failed: {status}");
    let node = std::fs::read(&output).unwrap();
    let node: Vec<&[u8]> = node.split(|&b| b == b'\n').collect();
    assert_eq!(node.len(), lines.len(), "one oracle line per input line");

    let mut js = JsStringifier::new(wmreplay::DEFAULT_MAX_DEPTH);
    let (mut blank, mut invalid, mut same, mut rewritten) = (0, 0, 0, 0);
    let mut mismatches = Vec::new();
    for (i, (line, want)) in lines.iter().zip(&node).enumerate() {
        let got = ours(&mut js, line);
        if got != *want {
            mismatches.push(format!(
                "line {i}: {:?}\n  node: {:?}\n  ours: {:?}",
                String::from_utf8_lossy(line),
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(&got),
            ));
            continue;
        }
        match got[0] {
            b'B' => blank += 1,
            b'E' => invalid += 1,
            _ if got[1..] == line[wmreplay::__internals::js::js_trim(line)] => same += 1,
            _ => rewritten += 1,
        }
    }
    println!(
        "compared {} lines with Node: {blank} blank, {invalid} invalid (JSON.parse throws), \
         {} values ({same} written as they came, {rewritten} rewritten), {} mismatches",
        lines.len(),
        same + rewritten,
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} lines differ from Node; the first ones:\n{}",
        mismatches.len(),
        lines.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    // The generator exercises every outcome, not just one.
    assert!(blank > 100 && invalid > 1000 && same > 1000 && rewritten > 1000);
}

// Allocations counted per thread, so tests running in parallel in this
// binary do not count each other's.
thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

fn count() {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards every call to the system allocator unchanged; the counter
// has no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which
        // is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as for `dealloc`; `new_size` is the caller's, per the trait.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn no_allocation_per_line_after_warm_up() {
    let lines = lines(42, 5000);
    let mut js = JsStringifier::new(wmreplay::DEFAULT_MAX_DEPTH);
    let mut out = Vec::new();
    let run = |js: &mut JsStringifier, out: &mut Vec<u8>| {
        let mut written = 0;
        for l in &lines {
            out.clear();
            written += js.stringify(l, out).is_ok_and(|w| w) as usize;
        }
        written
    };
    let warm = run(&mut js, &mut out);
    let before = ALLOCS.with(Cell::get);
    let again = run(&mut js, &mut out);
    let allocations = ALLOCS.with(Cell::get) - before;
    assert_eq!(warm, again);
    assert!(warm > 2000, "{warm} lines written");
    assert_eq!(
        allocations, 0,
        "allocations while writing {warm} warm lines"
    );
}

/// Throughput over generated records (`wmreplay::__internals::corpus`, about 400-byte
/// lines); prints MB/s, asserts nothing about time.
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn throughput() {
    let mut log = Vec::new();
    let options = wmreplay::__internals::corpus::GenOptions {
        size: 50 << 20,
        ..Default::default()
    };
    wmreplay::__internals::corpus::generate(&options, &mut log, &|_| {}).unwrap();
    let lines: Vec<&[u8]> = log.split(|&b| b == b'\n').collect();
    let mut js = JsStringifier::new(wmreplay::DEFAULT_MAX_DEPTH);
    let mut out = Vec::with_capacity(log.len() + (log.len() >> 4));
    for round in 0..3 {
        out.clear();
        let t = std::time::Instant::now();
        let mut written = 0;
        for l in &lines {
            if let Ok(true) = js.stringify(l, &mut out) {
                out.push(b'\n');
                written += 1;
            }
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {written} of {} lines, {:.1} MB in, {:.1} MB out, {:.3} s: {:.0} MB/s",
            lines.len(),
            log.len() as f64 / 1e6,
            out.len() as f64 / 1e6,
            s,
            log.len() as f64 / 1e6 / s
        );
    }
}
