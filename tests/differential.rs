//! wmreplay against the Node.js oracle (tests/oracle/replay.js, the original
//! TypeScript replay algorithm): on generated hostile logs the request body must be
//! byte-identical and the stats identical. Needs `node` on PATH; without it
//! these tests fail with a message saying so.

mod common;

use std::process::Command;

use common::{assert_same_body, contract_stats, hostile_log, oracle};
use wmreplay::{CurrentRequest, Format, ReplayOptions, replay, system_prompt};

const TEXT: &str = "What did I say about \"caching\"?\n(naïve 🙂 \\ \u{1})";

fn check_seed(seed: u64, lines: usize, format: Format, session: Option<&str>) {
    let log = hostile_log(seed, lines);
    check_log(&format!("seed {seed}"), &log, format, session);
}

/// The body and stats of `log` against the oracle's.
fn check_log(what: &str, log: &[u8], format: Format, session: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working_memory.log");
    std::fs::write(&path, log).unwrap();

    let mut args = vec![
        "respond",
        path.to_str().unwrap(),
        "--text",
        TEXT,
        "--format",
        format.name(),
    ];
    if let Some(s) = session {
        args.extend(["--session", s]);
    }
    let want = oracle(&args);

    let replayed = replay(log, &ReplayOptions::default());
    let got = replayed.render_request(
        format,
        &system_prompt(None),
        &CurrentRequest {
            text: TEXT,
            session_id: session,
        },
    );
    assert_same_body(&format!("{what} ({})", format.name()), &got, &want.body);
    assert_eq!(contract_stats(replayed.stats()), want.stats, "{what}");
}

#[test]
fn members_far_into_long_lines_match_the_oracle() {
    // A record keeps its `type`'s place in 16 + 16 bits and a copied
    // `ts_ms` text's start in 19: these lines put the members past both
    // limits (found again by a rescan, or the number formatted), beside
    // lines that stay within them.
    let pad = "x".repeat(70_000);
    let far = "y".repeat(600_000);
    let long_kind = format!("k{}", "z".repeat(70_000));
    let lines = [
        format!(r#"{{"p":"{pad}","type":"te\u0078t_output","ts_ms":3,"session_id":"s"}}"#),
        format!(r#"{{"type":"{long_kind}","ts_ms":1}}"#),
        format!(r#"{{"type":"text_input","p":"{far}","ts_ms":2}}"#),
        format!(r#"{{"p":"{pad}","type":"text_input","ts_ms":1763700001492}}"#),
        format!(r#"{{"p":"{far}","type":"wm_\"q\"","ts_ms":-7}}"#),
        r#"{"type":"wm_event","ts_ms":0}"#.to_string(),
    ];
    let log = lines.join("\n").into_bytes();
    for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
        check_log("far members", &log, format, Some("s"));
    }
}

#[test]
fn respond_body_is_byte_identical_to_the_node_oracle() {
    for seed in 0..60 {
        check_seed(seed, 150, Format::Anthropic, Some("s-1"));
    }
    // An empty session id is written as it is (`sessionId ?? "none"`).
    check_seed(60, 50, Format::Anthropic, Some(""));
}

#[test]
fn openai_and_ndjson_bodies_are_byte_identical_to_the_node_oracle() {
    for seed in 100..120 {
        check_seed(seed, 120, Format::OpenAi, None);
        check_seed(seed, 120, Format::Ndjson, Some("sess"));
    }
}

#[test]
fn large_generated_log_matches_the_oracle() {
    // Enough lines that the log spans many parallel chunks.
    check_seed(7777, 20_000, Format::Anthropic, None);
}

#[test]
fn cli_respond_and_replay_match_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wm.log");
    std::fs::write(&path, hostile_log(4242, 300)).unwrap();
    let p = path.to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_wmreplay");

    // The same arguments for both programs.
    let args = [
        "respond",
        p,
        "--text",
        TEXT,
        "--session",
        "abc",
        "--system",
        "Be brief.",
    ];
    let ours = Command::new(bin).args(args).output().unwrap();
    assert!(ours.status.success());
    let want = oracle(&args);
    assert!(ours.stdout == want.body, "respond via the CLI differs");

    for format in ["anthropic", "openai", "ndjson"] {
        let ours = Command::new(bin)
            .args(["replay", p, "--format", format])
            .output()
            .unwrap();
        assert!(ours.status.success());
        let want = oracle(&["replay", p, "--format", format]);
        assert!(ours.stdout == want.body, "replay --format {format} differs");
    }

    let ours = Command::new(bin).args(["stats", p]).output().unwrap();
    let ours: serde_json::Value = serde_json::from_slice(&ours.stdout).unwrap();
    let want: serde_json::Value = serde_json::from_str(
        &oracle(&["stats", p])
            .body
            .iter()
            .map(|&b| b as char)
            .collect::<String>(),
    )
    .unwrap();
    for key in [
        "total_lines",
        "parsed_entries",
        "skipped_invalid_json",
        "skipped_invalid_shape",
    ] {
        assert_eq!(ours[key], want[key], "{key}");
    }
}
