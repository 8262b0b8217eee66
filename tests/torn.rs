//! Torn writes: a writer process appending records (each line in one to three
//! `write` calls) is killed with SIGKILL at a random moment, 1,000 times. After
//! each kill, a replay returns exactly the records whose lines were written
//! completely, in order, and reports a torn last line as an unterminated tail
//! (skipped unless the JSON happened to be complete); the live state commits
//! exactly the complete lines.
//!
//! The writer is this test binary itself, re-run as the ignored test
//! `torn_writer_child` (it does nothing unless the parent sets its variable).

#![cfg(unix)]

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use wmreplay::{Format, LiveReplay, ReplayOptions, replay};

const LOG_VAR: &str = "WMREPLAY_TORN_LOG";
const SEED_VAR: &str = "WMREPLAY_TORN_SEED";

fn line(id: u64) -> String {
    format!(
        "{{\"type\":\"k\",\"ts_ms\":{},\"id\":{id},\"pad\":\"{}\"}}\n",
        1000 + id,
        "x\\\"y".repeat((id % 13) as usize)
    )
}

/// The writer: appends records 0, 1, 2, ... until killed (or 400 records).
#[test]
#[ignore = "run by torn_writes_lose_nothing_complete as its writer process"]
fn torn_writer_child() {
    let (Ok(path), Ok(seed)) = (std::env::var(LOG_VAR), std::env::var(SEED_VAR)) else {
        return;
    };
    let mut x: u64 = seed.parse::<u64>().unwrap() | 1;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    for id in 0..400 {
        let l = line(id);
        let b = l.as_bytes();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // One, two or three writes per line.
        let cut1 = (x % b.len() as u64) as usize;
        let cut2 = cut1 + ((x >> 20) % (b.len() - cut1) as u64) as usize;
        for piece in [&b[..cut1], &b[cut1..cut2], &b[cut2..]] {
            if !piece.is_empty() {
                f.write_all(piece).unwrap();
                std::thread::yield_now();
            }
        }
    }
}

#[test]
fn torn_writes_lose_nothing_complete() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut torn_seen = 0;
    let mut rounds_with_records = 0;
    for round in 0..1000u64 {
        let path = dir.path().join(format!("wm-{}.log", round % 4));
        std::fs::write(&path, b"").unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "torn_writer_child",
                "--ignored",
                "--test-threads=1",
            ])
            .env(LOG_VAR, &path)
            .env(SEED_VAR, round.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        // Kill at a random moment once writing has started (process start-up
        // time varies too much to aim from the spawn), now and then before.
        if !rng.is_multiple_of(8) {
            let t = std::time::Instant::now();
            while std::fs::metadata(&path).map_or(0, |m| m.len()) == 0
                && t.elapsed() < Duration::from_secs(5)
            {
                std::thread::yield_now();
            }
        }
        std::thread::sleep(Duration::from_micros((rng >> 8) % 5000));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let bytes = std::fs::read(&path).unwrap();
        let complete = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let tail_start = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let tail = &bytes[tail_start..];
        // What was written is a prefix of the writer's output.
        let mut expect = Vec::new();
        for id in 0..=complete {
            expect.extend_from_slice(line(id).as_bytes());
        }
        assert!(
            expect.starts_with(&bytes),
            "round {round}: the file is a prefix of what was written"
        );

        let r = replay(&bytes, &ReplayOptions::default());
        let s = r.stats();
        // A torn tail that is already complete JSON (only its \n missing)
        // is a record, as in any one-shot replay.
        let tail_is_record = !tail.is_empty() && tail == line(complete).trim_end().as_bytes();
        let want = complete + u64::from(tail_is_record);
        assert_eq!(s.parsed_entries, want, "round {round}");
        let ids: Vec<u64> = r
            .records()
            .iter()
            .map(|rec| {
                let v: serde_json::Value = serde_json::from_slice(rec.line(&bytes)).unwrap();
                v["id"].as_u64().unwrap()
            })
            .collect();
        assert_eq!(ids, (0..want).collect::<Vec<_>>(), "round {round}");
        assert_eq!(s.unterminated_tail, !tail.is_empty(), "round {round}");
        if !tail.is_empty() && !tail_is_record {
            torn_seen += 1;
            assert_eq!(
                s.skipped_invalid_json, 1,
                "round {round}: the torn line is skipped"
            );
            assert_eq!(s.skips[0].line, complete + 1);
        } else {
            assert_eq!(s.skipped_invalid_json + s.skipped_invalid_shape, 0);
        }
        // The live state commits exactly the complete lines.
        let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default());
        live.refresh().unwrap();
        assert_eq!(live.info().records, complete, "round {round}");
        assert_eq!(live.info().pending_bytes, tail.len() as u64);
        if complete > 0 {
            rounds_with_records += 1;
        }
    }
    // The harness really tears lines and really lets records through.
    assert!(
        torn_seen > 50,
        "only {torn_seen} torn lines in 1,000 rounds"
    );
    eprintln!("{torn_seen} torn, {rounds_with_records} rounds with records");
    assert!(rounds_with_records > 300, "{rounds_with_records}");
}
