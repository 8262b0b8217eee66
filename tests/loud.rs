//! The command line fails loudly and loses nothing: a missing log is a
//! warning (or with `--require-log` an error naming it), a file whose lines
//! are mostly not records is a warning naming the first bad line, `ack`
//! never makes a state store, and a healthy log prints nothing on stderr.

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

fn example() -> String {
    format!("{}/examples/working_memory.log", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `wmreplay <command> <log> <rest…>`.
fn run(command: &str, log: &Path, rest: &[&str]) -> Output {
    bin().arg(command).arg(log).args(rest).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The commands that replay a log, each with what else it needs.
const REPLAYING: [(&str, &[&str]); 4] = [
    ("respond", &["--text", "x"]),
    ("replay", &[]),
    ("stats", &[]),
    ("prepare", &["--session-key", "k"]),
];

/// The files in `dir`.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_missing_log_is_replayed_empty_with_one_warning_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.lgo");
    for (command, rest) in REPLAYING {
        let out = run(command, &log, rest);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{command}: {err}");
        assert_eq!(err.lines().count(), 1, "{command}: {err}");
        assert!(
            err.starts_with("wmreplay: warning: ")
                && err.contains(&format!("{} does not exist", log.display()))
                && err.contains("--require-log"),
            "{command}: {err}"
        );
        // What it prints is still the empty replay's.
        assert!(!out.stdout.is_empty(), "{command}");
        if command == "respond" {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["messages"].as_array().unwrap().len(), 1, "{command}");
        }
    }
}

#[test]
fn require_log_makes_a_missing_log_exit_1_naming_it_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.lgo");
    for (command, rest) in REPLAYING {
        let mut args = rest.to_vec();
        args.push("--require-log");
        let out = run(command, &log, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{command}: {err}");
        assert_eq!(err.lines().count(), 1, "{command}: {err}");
        assert!(
            err.starts_with(&format!("wmreplay: {}: ", log.display()))
                && err.contains("does not exist")
                && err.contains("--require-log"),
            "{command}: {err}"
        );
        assert!(out.stdout.is_empty(), "{command} printed something");
        // prepare included: no state store beside the missing log.
        assert!(
            files(dir.path()).is_empty(),
            "{command}: {:?}",
            files(dir.path())
        );
    }
    // A log that is there replays as ever, silently.
    std::fs::write(&log, "{\"type\":\"text_input\",\"ts_ms\":1}\n").unwrap();
    for (command, rest) in REPLAYING {
        let mut args = rest.to_vec();
        args.push("--require-log");
        let out = run(command, &log, &args);
        assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{command}: {}", stderr(&out));
    }
}

#[test]
fn a_file_of_no_records_warns_with_the_count_and_the_first_reason_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("notes.md");
    // A blank first line: the first skipped line is line 2, at byte 1.
    std::fs::write(&log, "\n# Notes\n{\"type\":\"a\"}\nplain text\n").unwrap();
    for command in ["respond", "replay"] {
        let rest: &[&str] = if command == "respond" {
            &["--text", "x"]
        } else {
            &[]
        };
        let out = run(command, &log, rest);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{command}: {err}");
        assert_eq!(err.lines().count(), 1, "{command}: {err}");
        assert!(err.starts_with("wmreplay: warning: "), "{command}: {err}");
        assert!(err.contains(&log.display().to_string()), "{command}: {err}");
        assert!(err.contains("none of its 3 lines"), "{command}: {err}");
        assert!(
            err.contains("line 2 (byte 1): invalid JSON: unexpected character at column 1"),
            "{command}: {err}"
        );
        // The (empty) replay is printed all the same.
        assert!(!out.stdout.is_empty(), "{command}");
    }
}

#[test]
fn a_log_of_mostly_bad_lines_warns_and_a_few_bad_lines_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let good = "{\"type\":\"text_input\",\"ts_ms\":1}\n";
    std::fs::write(&log, format!("{good}{{\"type\":\"a\"}}\n[1,2]\n")).unwrap();
    let out = run("respond", &log, &["--text", "x"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("2 of its 3 lines are not valid records")
            && err.contains("line 2 (byte 32): no \"ts_ms\" member"),
        "{err}"
    );
    // Half or fewer: silent.
    std::fs::write(&log, format!("{good}{good}[1,2]\n")).unwrap();
    let out = run("respond", &log, &["--text", "x"]);
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn a_healthy_log_prints_nothing_on_stderr() {
    // The example has 2 bad lines of 11, as a real log may.
    let log = Path::new(&example()).to_path_buf();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.db");
    for (command, rest) in REPLAYING {
        let mut args = rest.to_vec();
        args.extend(["--state", state.to_str().unwrap()]);
        let out = run(command, &log, &args);
        assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{command}: {}", stderr(&out));
    }
}

#[test]
fn ack_on_a_missing_log_is_an_unknown_prepare_and_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.lgo");
    let out = run("ack", &log, &["0123", "--status", "success"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown prepare_id \"0123\""), "{err}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
    // Nor with --state, nor beside a log that exists but was never prepared.
    let state = dir.path().join("state.db");
    let out = run(
        "ack",
        &log,
        &[
            "0123",
            "--status",
            "failed",
            "--state",
            state.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    std::fs::write(&log, "").unwrap();
    let out = run("ack", &log, &["0123", "--status", "success"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(files(dir.path()), ["wm.lgo"]);
}

#[test]
fn prepare_on_a_missing_log_warns_makes_its_store_and_can_be_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    let out = run("prepare", &log, &["--session-key", "k"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (p["mode"].as_str(), p["records"].as_u64()),
        (Some("full"), Some(0))
    );
    assert_eq!(files(dir.path())[0], "wm.log.wmreplay.db");
    let id = p["prepare_id"].as_str().unwrap();
    let out = run("ack", &log, &[id, "--status", "success"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn a_trimmed_window_on_a_missing_log_makes_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.lgo");
    let window = ["--tail", "5", "--trim-to", "0.5"];
    for command in ["respond", "replay", "stats"] {
        let mut args: Vec<&str> = if command == "respond" {
            vec!["--text", "x"]
        } else {
            vec![]
        };
        args.extend(window);
        let out = run(command, &log, &args);
        assert_eq!(out.status.code(), Some(0), "{command}: {}", stderr(&out));
        assert!(
            files(dir.path()).is_empty(),
            "{command}: {:?}",
            files(dir.path())
        );
    }
}

#[test]
fn help_says_what_a_missing_log_does_with_an_example() {
    for command in ["respond", "replay", "stats", "prepare"] {
        let out = bin().args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--require-log"), "{command}: {help}");
        assert!(help.contains("does not exist"), "{command}: {help}");
        assert!(
            help.contains(&format!("Example: wmreplay {command} ")),
            "{command}: {help}"
        );
    }
    let out = bin().args(["ack", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("never creates a state store"), "{help}");
}
