//! No allocation per line: after warm-up, parsing lines allocates nothing,
//! and a whole replay allocates per chunk, not per line. Counted with a
//! counting global allocator (this file is its own test binary).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

/// Allocations by every thread.
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Allocations by this thread. The test harness's main thread may still
    /// be allocating its own bookkeeping after it has started the test's
    /// thread: on a loaded machine that overlapped the measured window (4
    /// allocations in 7 of 150 runs), so single-threaded work is counted on
    /// its own thread. (A `const` `Cell` needs no destructor and no
    /// allocation, so the allocator may use it.)
    static MINE: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    let _ = MINE.try_with(|n| n.set(n.get() + 1));
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

fn lines() -> Vec<Vec<u8>> {
    (0..5000)
        .map(|i| {
            match i % 5 {
                0 => format!(r#"{{"type":"text_input","ts_ms":{i},"text":"hé \"q\" {i}","a":[1,2,{{"b":null}}]}}"#),
                1 => format!(r#"{{"type":"x\u0041","ts_ms":1e{},"n":123456789012345678901234567890}}"#, i % 30),
                2 => format!(r#"{{"type":"s","ts_ms":{i},"s":"\ud800"}}"#),
                3 => "not json at all".to_string(),
                _ => format!(r#"{{"ts_ms":{i}}}"#),
            }
            .into_bytes()
        })
        .collect()
}

// One test function: the counter is global, and tests in one binary run in
// parallel, so separate tests would count each other's allocations.
#[test]
fn no_allocation_per_line() {
    parsing_lines_allocates_nothing_after_warm_up();
    a_replay_allocates_per_chunk_not_per_line();
}

fn parsing_lines_allocates_nothing_after_warm_up() {
    let lines = lines();
    let mut parser = wmreplay::__internals::parse::LineParser::new(wmreplay::DEFAULT_MAX_DEPTH);
    for l in &lines {
        let _ = parser.parse(l, 0);
    }
    let before = MINE.with(Cell::get);
    let mut parsed = 0;
    for l in &lines {
        parsed += parser.parse(l, 0).is_ok() as usize;
    }
    let after = MINE.with(Cell::get);
    assert_eq!(parsed, 3000);
    assert_eq!(
        after - before,
        0,
        "allocations while parsing 5000 warm lines"
    );
}

fn a_replay_allocates_per_chunk_not_per_line() {
    let mut log = Vec::new();
    for l in lines() {
        log.extend_from_slice(&l);
        log.push(b'\n');
    }
    let log = log.repeat(40); // 200,000 lines, ~12 MB
    let opts = {
        let mut o = wmreplay::ReplayOptions::default();
        o.threads = 1;
        o
    };
    let before = ALLOCS.load(Ordering::Relaxed);
    let r = wmreplay::replay(&log, &opts);
    let body = r.render_messages(wmreplay::Format::Anthropic);
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(r.stats().parsed_entries, 120_000);
    assert!(!body.is_empty());
    let lines = r.stats().total_lines as usize;
    assert!(
        after - before < lines / 100,
        "{} allocations for {lines} lines",
        after - before
    );
}
