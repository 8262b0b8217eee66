//! I/O faults in the read path, in the spirit of SQLite's I/O-error tests:
//! the Nth read fails, once (transient) or from then on (persistent), for
//! every N. Each run ends in the complete log or a typed error naming the
//! file; none panics. Interrupted reads are retried and change nothing.

use std::io::{self, Read};

use wmreplay::{Error, LogBytes, ReplayOptions, replay};

struct Faulty<'a> {
    data: &'a [u8],
    at: usize,
    reads: usize,
    fail_at: usize,
    persistent: bool,
    kind: io::ErrorKind,
}

impl Read for Faulty<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reads;
        self.reads += 1;
        if n == self.fail_at || (self.persistent && n > self.fail_at) {
            return Err(io::Error::new(self.kind, "injected fault"));
        }
        // Short reads, to have many of them.
        let k = buf.len().min(4096).min(self.data.len() - self.at);
        buf[..k].copy_from_slice(&self.data[self.at..self.at + k]);
        self.at += k;
        Ok(k)
    }
}

#[test]
fn every_failing_read_is_a_typed_error_naming_the_file() {
    let mut log = Vec::new();
    for i in 0..2000 {
        log.extend_from_slice(
            format!(
                "{{\"type\":\"k\",\"ts_ms\":{i},\"x\":\"{}\"}}\n",
                "y".repeat(i % 30)
            )
            .as_bytes(),
        );
    }
    let reads = log.len() / 4096 + 2;
    let (mut ok, mut failed) = (0, 0);
    for persistent in [false, true] {
        for kind in [
            io::ErrorKind::Other,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::TimedOut,
            io::ErrorKind::Interrupted,
        ] {
            for fail_at in 0..reads + 2 {
                let r = Faulty {
                    data: &log,
                    at: 0,
                    reads: 0,
                    fail_at,
                    persistent: persistent && kind != io::ErrorKind::Interrupted,
                    kind,
                };
                match LogBytes::from_reader("/logs/wm.log", r) {
                    Ok(bytes) => {
                        // Only when the fault came after the end, or was an
                        // interruption (retried): then the log is whole.
                        assert!(
                            kind == io::ErrorKind::Interrupted || fail_at >= reads - 1,
                            "{kind:?} at {fail_at}"
                        );
                        assert_eq!(bytes.bytes(), &log[..]);
                        assert_eq!(
                            replay(bytes.bytes(), &ReplayOptions::default())
                                .stats()
                                .parsed_entries,
                            2000
                        );
                        ok += 1;
                    }
                    Err(e) => {
                        assert_ne!(
                            kind,
                            io::ErrorKind::Interrupted,
                            "interrupted reads are retried"
                        );
                        assert!(matches!(e, Error::Io { .. }), "{e:?}");
                        let msg = e.to_string();
                        assert!(
                            msg.contains("/logs/wm.log") && msg.contains("injected fault"),
                            "{msg}"
                        );
                        failed += 1;
                    }
                }
            }
        }
    }
    assert!(ok > 0 && failed > 0);
}
