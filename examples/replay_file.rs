//! Replays a working-memory log and prints its stats and first messages.
//!
//! ```text
//! cargo run --example replay_file -- examples/working_memory.log 3
//! ```
//!
//! The log is mapped (or read), every line parsed in parallel, the records
//! put in `ts_ms` order; lines that are not records are counted and located,
//! never fatal.

use std::fmt::Write as _;
use std::path::Path;

use wmreplay::{Format, LogBytes, ReadMode, ReplayOptions, replay};

/// The report this example prints: the stats, the first skipped lines, and
/// the first `n` messages as one JSON object per line.
pub fn summary(path: &Path, n: usize) -> Result<String, wmreplay::Error> {
    let log = LogBytes::open(path, ReadMode::Auto)?;
    let replayed = replay(log.bytes(), &ReplayOptions::default());
    let stats = replayed.stats();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} lines, {} records, {} invalid JSON, {} invalid shape",
        path.display(),
        stats.total_lines,
        stats.parsed_entries,
        stats.skipped_invalid_json,
        stats.skipped_invalid_shape,
    );
    for skip in &stats.skips {
        let _ = writeln!(out, "  skipped line {}: {}", skip.line, skip.reason);
    }
    // NDJSON: one `{"role":…,"content":…}` message per line.
    let messages = replayed.render_messages(Format::Ndjson);
    for line in String::from_utf8_lossy(&messages).lines().take(n) {
        let _ = writeln!(out, "{line}");
    }
    // A mapped log can be changed under the replay by another process:
    // check that what was read is still the file.
    log.verify()?;
    Ok(out)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .unwrap_or_else(|| "examples/working_memory.log".to_string());
    let n = match args.next().map(|s| s.parse::<usize>()) {
        None => 3,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("replay_file: the message count: {e}");
            std::process::exit(2);
        }
    };
    match summary(Path::new(&path), n) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("replay_file: {e}");
            std::process::exit(1);
        }
    }
}
