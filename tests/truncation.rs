//! Truncation under a reader: another process keeps truncating and rewriting
//! the log while this one replays it through a memory map, thousands of
//! times. No replay may crash (a SIGBUS on a truncated page would kill the
//! test); each either returns a consistent result or `Error::Changed`, and
//! rendering the request body from the changed map never panics.
//!
//! The other process is this test binary, re-run as the ignored test
//! `truncating_child` (it does nothing unless the parent sets its variable).

#![cfg(unix)]

use std::collections::HashSet;
use std::io::{Seek, SeekFrom, Write};
use std::process::{Command, Stdio};

use wmreplay::{CurrentRequest, Error, Format, LogBytes, ReadMode, ReplayOptions, replay};

const VAR: &str = "WMREPLAY_TRUNCATE_LOG";

/// Version `v` of the log: 8,000 records (about 600 KB).
fn content(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..8_000u64 {
        out.extend_from_slice(
            format!(
                "{{\"type\":\"k\",\"ts_ms\":{i},\"v\":{v},\"pad\":\"{}\"}}\n",
                "z".repeat((i % 40) as usize)
            )
            .as_bytes(),
        );
    }
    out
}

#[test]
#[ignore = "run by replays_survive_truncation_under_them as the truncating process"]
fn truncating_child() {
    let Ok(path) = std::env::var(VAR) else {
        return;
    };
    let versions = [content(0), content(1)];
    let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    // Never outlive a parent that died without killing this process.
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(60) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = &versions[(x & 1) as usize];
        match (x >> 8) % 3 {
            // Truncate to a random length (often a page boundary or zero).
            0 => f
                .set_len(if x & 16 == 0 {
                    0
                } else {
                    (x >> 20) % v.len() as u64
                })
                .unwrap(),
            // Rewrite from the start: truncate, then write a whole version.
            1 => {
                f.set_len(0).unwrap();
                f.seek(SeekFrom::Start(0)).unwrap();
                f.write_all(v).unwrap();
            }
            // Grow back to a whole version without truncating.
            _ => {
                f.seek(SeekFrom::Start(0)).unwrap();
                f.write_all(v).unwrap();
            }
        }
    }
}

#[test]
fn replays_survive_truncation_under_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.log");
    std::fs::write(&path, content(0)).unwrap();
    let mut lines: HashSet<Vec<u8>> = HashSet::new();
    for v in 0..2 {
        for l in content(v).split(|&b| b == b'\n') {
            lines.insert(l.to_vec());
        }
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "truncating_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env(VAR, &path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed however this test ends, a failed assertion included.
    let _child = KillOnDrop(child);
    // Outcomes: consistent, hit a truncated page, otherwise found changed.
    let (mut ok, mut truncated, mut shorter) = (0, 0, 0);
    for round in 0..3000 {
        let log = match LogBytes::open(&path, ReadMode::Auto) {
            Ok(l) => l,
            Err(e) => panic!("round {round}: open failed: {e}"),
        };
        let r = replay(log.bytes(), &ReplayOptions::default());
        let s = r.stats().clone();
        assert_eq!(
            s.total_lines,
            s.parsed_entries + s.skipped_invalid_json + s.skipped_invalid_shape
        );
        // Records whose bytes are not a line of any version (read once, now).
        let strays: Vec<Vec<u8>> = r
            .records()
            .iter()
            .map(|rec| rec.line(log.bytes()).to_vec())
            .filter(|l| !lines.contains(l))
            .collect();
        // Rendering reads the lines again, after they were measured: a change
        // in between must not panic either.
        let body = r.render_request(
            Format::Anthropic,
            "system",
            &CurrentRequest {
                text: "now",
                session_id: None,
            },
        );
        match log.verify() {
            Ok(()) => {
                ok += 1;
                let v: serde_json::Value = serde_json::from_slice(&body)
                    .unwrap_or_else(|e| panic!("round {round}: body is not JSON: {e}"));
                assert_eq!(
                    v["messages"].as_array().unwrap().len(),
                    r.records().len() + 1
                );
                assert!(
                    strays.is_empty(),
                    "round {round}: records no version had: {:?}",
                    strays
                        .iter()
                        .map(|l| String::from_utf8_lossy(l))
                        .collect::<Vec<_>>()
                );
            }
            Err(Error::Changed { what, .. }) => {
                if what.contains("truncated") {
                    truncated += 1;
                } else {
                    shorter += 1;
                }
            }
            Err(e) => panic!("round {round}: unexpected error {e}"),
        }
    }
    eprintln!(
        "{ok} consistent, {truncated} hit a truncated page, {shorter} found changed otherwise"
    );
    assert!(
        ok > 0 && truncated + shorter > 0,
        "both outcomes happen: {ok} / {truncated} / {shorter}"
    );
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
