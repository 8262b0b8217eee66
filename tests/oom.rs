//! The CLI when memory runs out: under an address-space limit (what
//! `ulimit -v` sets) a log whose replay or body does not fit ends the command
//! with exit status 1 and one line naming the log, never an abort.
//!
//! `prepare` aborted (SIGABRT, "memory allocation of … bytes failed")
//! allocating the body it prints, and every command given `--record js`
//! growing the re-serialised records. Both buffers are allocated fallibly
//! now. The limits are far from the edge on both sides: the same command
//! without a limit succeeds, and the limit leaves the process what it needs
//! besides that buffer with a wide margin (the binary, its threads and the
//! map of the log take well under 100 MiB with two threads and one malloc
//! arena) while the buffer alone is larger than what is left.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MIB: u64 = 1 << 20;

fn wmreplay(args: &[&str], log: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wmreplay"));
    cmd.args(&args[..1])
        .arg(log)
        .args(&args[1..])
        .args(["--threads", "2"])
        // The pool that renders, two threads too, whatever the machine.
        .env("RAYON_NUM_THREADS", "2")
        // glibc reserves 64 MiB of address space for each thread's malloc
        // arena (128 MiB for a moment, to align it), as threads happen to
        // contend: one arena keeps what the process holds the same run to
        // run. The buffers under test are allocated the same way either way.
        .env("MALLOC_ARENA_MAX", "1");
    cmd
}

/// Runs `cmd` with an address-space limit of `bytes` (RLIMIT_AS).
fn run_limited(mut cmd: Command, bytes: u64) -> Output {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

/// A log of about `size` bytes whose records' text repeats `unit`.
fn log_of(dir: &Path, name: &str, unit: &str, size: u64) -> PathBuf {
    use std::io::Write;
    let path = dir.join(name);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let text = unit.repeat((32 << 10) / unit.len());
    let (mut written, mut i) = (0u64, 0u64);
    while written < size {
        let line = serde_json::json!({"type": "text_input", "ts_ms": i, "text": text}).to_string();
        writeln!(f, "{line}").unwrap();
        written += line.len() as u64 + 1;
        i += 1;
    }
    f.flush().unwrap();
    path
}

/// Exit status 1 and one line on stderr naming the log and the allocation.
fn assert_out_of_memory(out: &Output, log: &Path, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        None,
        "{what}: killed by a signal: {err}"
    );
    assert_eq!(out.status.code(), Some(1), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(
        err.starts_with(&format!("wmreplay: {}: cannot allocate ", log.display())),
        "{what}: {err}"
    );
    assert!(err.contains("does not fit in memory"), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: printed something");
}

/// The size of what `cmd` prints, without a limit (and that it succeeds).
fn printed(mut cmd: Command, what: &str) -> u64 {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} without a limit: {err}");
    out.stdout.len() as u64
}

#[test]
fn prepare_with_a_body_larger_than_memory_is_an_error_naming_the_log() {
    let dir = tempfile::tempdir().unwrap();
    // `&` is 5 bytes in XML (`&amp;`): the XML body is 5 times the log.
    let amps = log_of(dir.path(), "amps.log", "&", 64 * MIB);
    // `"` is 2 bytes in the log (`\"`), 4 in a JSON body (`\\\"`).
    let quotes = log_of(dir.path(), "quotes.log", "\"", 128 * MIB);
    for (log, format, record) in [
        (&amps, "xml", "raw"),
        (&amps, "xml", "js"),
        (&quotes, "anthropic", "raw"),
    ] {
        let size = std::fs::metadata(log).unwrap().len();
        let prepare = |key: &str| {
            let args = [
                "prepare",
                "--session-key",
                key,
                "--format",
                format,
                "--record",
                record,
            ];
            wmreplay(&args, log)
        };
        let what = format!("prepare --format {format} --record {record}");
        // The body a first prepare holds: the replay's messages alone.
        let body = printed(
            wmreplay(&["replay", "--format", format, "--record", record], log),
            &what,
        );
        assert!(body > 2 * size, "{what}: a body of {body} bytes");
        printed(prepare("unlimited"), &what);
        // The log's map, half the body, and 64 MiB: not the body.
        let out = run_limited(prepare("limited"), size + body / 2 + 64 * MIB);
        assert_out_of_memory(&out, log, &what);
    }
}

#[test]
fn record_js_with_records_larger_than_memory_is_an_error_naming_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), "quotes.log", "\"", 128 * MIB);
    let size = std::fs::metadata(&log).unwrap().len();
    // `--record js` keeps every record re-serialised, about the log's size
    // again: the limit has room for the map and 128 MiB more, not for both.
    for args in [
        vec!["stats", "--record", "js"],
        vec!["respond", "--text", "x", "--record", "js"],
        vec!["replay", "--record", "js"],
    ] {
        let what = args.join(" ");
        printed(wmreplay(&args, &log), &what);
        let out = run_limited(wmreplay(&args, &log), size + 128 * MIB);
        assert_out_of_memory(&out, &log, &what);
    }
}
