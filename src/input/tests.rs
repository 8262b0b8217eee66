//! The input module's tests: reading, mapping and verifying a log.

use super::*;
use std::io::Write;

/// A reader of `file` in 4 KiB reads that runs `hook` before its second
/// read: a writer acting in the middle of the read, deterministically.
struct Hooked<'a> {
    file: &'a File,
    reads: usize,
    hook: Option<Box<dyn FnOnce() + 'a>>,
}

impl Read for Hooked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.reads == 1
            && let Some(hook) = self.hook.take()
        {
            hook();
        }
        self.reads += 1;
        let n = buf.len().min(4096);
        (&mut &*self.file).read(&mut buf[..n])
    }
}

/// Version `v` of a 300 KB log (every line names its version), with
/// `extra` more lines.
fn version(v: u32, extra: usize) -> Vec<u8> {
    (0..3000 + extra)
        .map(|i| {
            format!(
                "{{\"type\":\"k\",\"ts_ms\":{i},\"v\":{v},\"pad\":\"{}\"}}\n",
                "p".repeat(60)
            )
        })
        .collect::<String>()
        .into_bytes()
}

/// Reads `path` as `LogBytes::open` does with `ReadMode::Read`, with
/// `hook` run between the first and second 4 KiB.
fn read_with_hook(path: &Path, hook: impl FnOnce() + 'static) -> LogBytes {
    let (file, meta) = open_regular(path, false).unwrap().unwrap();
    let bytes = read_to_end(
        Hooked {
            file: &file,
            reads: 0,
            hook: Some(Box::new(hook)),
        },
        path,
        meta.len(),
    )
    .unwrap();
    LogBytes {
        path: path.to_path_buf(),
        bytes: Bytes::Read(ReadFile {
            bytes,
            file,
            stamp: Stamp::of(&meta),
        }),
        identity: Some(identity_of(&meta)),
    }
}

/// `stats --no-mmap` on a log rewritten in place while it was read
/// presented a replay of two versions mixed (only a read cut short, a
/// shorter file or another inode was noticed). The bytes read are now
/// held to the file's: each writer below acts between two reads.
#[test]
fn a_log_rewritten_while_it_is_read_is_reported_changed() {
    let dir = std::env::temp_dir().join(format!("wmreplay-read-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wm.log");
    let rewrite = |path: PathBuf, content: Vec<u8>, keep_mtime: bool| {
        move || {
            let before = std::fs::metadata(&path).unwrap().modified().unwrap();
            let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(0).unwrap();
            f.write_all(&content).unwrap();
            if keep_mtime {
                // Within the file system's timestamp granularity, a
                // rewrite can leave the time as it was.
                f.set_modified(before).unwrap();
            }
        }
    };
    type Case = (
        &'static str,
        Box<dyn FnOnce() + 'static>,
        Option<&'static str>,
    );
    let p = || path.clone();
    let cases: Vec<Case> = vec![
        ("untouched", Box::new(|| {}), None),
        (
            "appended to",
            Box::new({
                let p = p();
                move || {
                    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
                    f.write_all(b"{\"type\":\"k\",\"ts_ms\":1}\n").unwrap();
                }
            }),
            None,
        ),
        (
            "truncated",
            Box::new({
                let p = p();
                move || {
                    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                    f.set_len(0).unwrap();
                }
            }),
            Some("truncated while it was read"),
        ),
        (
            // Caught by its status-change time, or by its content
            // within one tick of the clock.
            "rewritten, same length and time",
            Box::new(rewrite(p(), version(1, 0), true)),
            Some("rewritten"),
        ),
        (
            "rewritten longer",
            Box::new(rewrite(p(), version(1, 10), false)),
            Some("rewritten while it was read"),
        ),
    ];
    for (what, hook, want) in cases {
        std::fs::write(&path, version(0, 0)).unwrap();
        let log = read_with_hook(&path, hook);
        match (log.verify(), want) {
            (Ok(()), None) => {}
            (Err(Error::Changed { what: got, .. }), Some(want)) => {
                assert!(got.contains(want), "{what}: {got}");
            }
            (got, _) => panic!("{what}: {got:?}"),
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Appends while logs are opened and verified: an append is never a
/// change, however the open and the verify fall between its steps.
#[test]
fn appends_under_an_open_log_are_never_a_change() {
    let dir = std::env::temp_dir().join(format!("wmreplay-append-race-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("log.jsonl");
    for mode in [ReadMode::Auto, ReadMode::Read] {
        std::fs::write(&path, "{\"type\":\"k\",\"ts_ms\":1}\n").unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // A bounded writer (4 MB at most): the readers run while it does.
        let writer = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                for _ in 0..200_000 {
                    f.write_all(b"{\"type\":\"k\",\"ts_ms\":2}\n").unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            })
        };
        let (mut opened, mut changed) = (0, Vec::new());
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let log = LogBytes::open(&path, mode).unwrap();
            opened += 1;
            if let Err(e) = log.verify() {
                changed.push(e.to_string());
            }
        }
        writer.join().unwrap();
        assert!(
            changed.is_empty(),
            "{mode:?}: {} of {opened}: {:?}",
            changed.len(),
            &changed[..changed.len().min(3)]
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
