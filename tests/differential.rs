//! wmreplay against the Node.js oracle (tests/oracle/replay.js, the seed's
//! algorithm): on generated hostile logs the request body must be
//! byte-identical and the stats identical. Needs `node` on PATH; without it
//! these tests fail with a message saying so.

mod common;

use std::process::Command;

use common::{assert_same_body, contract_stats, hostile_log, oracle};
use wmreplay::{CurrentRequest, Format, ReplayOptions, replay, system_prompt};

const TEXT: &str = "What did I say about \"caching\"?\n(naïve 🙂 \\ \u{1})";

fn check_seed(seed: u64, lines: usize, format: Format, session: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("working_memory.log");
    let log = hostile_log(seed, lines);
    std::fs::write(&path, &log).unwrap();

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

    let replayed = replay(&log, &ReplayOptions::default());
    let got = replayed.render_request(
        format,
        &system_prompt(None),
        &CurrentRequest {
            text: TEXT,
            session_id: session,
        },
    );
    assert_same_body(
        &format!("seed {seed} ({})", format.name()),
        &got,
        &want.body,
    );
    assert_eq!(contract_stats(replayed.stats()), want.stats, "seed {seed}");
}

#[test]
fn respond_body_is_byte_identical_to_the_node_oracle() {
    for seed in 0..60 {
        check_seed(seed, 150, Format::Anthropic, Some("s-1"));
    }
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
