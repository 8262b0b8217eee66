//! The `wmreplay` command line: output, exit codes, error messages, closed
//! pipes and the progress bar.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

fn example() -> String {
    format!("{}/examples/working_memory.log", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn respond_prints_the_body_and_nothing_else() {
    let out = bin()
        .args(["respond", &example(), "--text", "hi", "--session", "s-42"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 10); // 9 records + the current request
    assert!(
        out.stdout.ends_with(b"}]}]}"),
        "no trailing newline or noise"
    );
}

#[test]
fn missing_log_is_an_empty_replay_not_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("missing.log");
    let out = bin()
        .args([
            "respond",
            p.to_str().unwrap(),
            "--text",
            "x",
            "--format",
            "openai",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    // Not silently: one warning line names the path (tests/loud.rs has the
    // rest, and --require-log).
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(p.to_str().unwrap()), "{err}");
    let out = bin().args(["stats", p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["total_lines"], 0);
}

#[test]
fn io_error_exits_1_with_one_line_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().to_str().unwrap().to_string();
    let out = bin().args(["stats", &p]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&p), "{err}");
    assert!(out.stdout.is_empty());
}

#[cfg(unix)]
#[test]
fn unreadable_file_exits_1_naming_the_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("secret.log");
    std::fs::write(&p, "{}\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::File::open(&p).is_ok() {
        // Running as root: permissions do not stop us. Use a path through a
        // file instead, which no user can open.
        let bad = p.join("child.log");
        let out = bin()
            .args(["stats", bad.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("child.log"));
        return;
    }
    let out = bin().args(["stats", p.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("secret.log"));
}

#[test]
fn bad_usage_exits_2() {
    for args in [
        vec!["respond", "x.log"],
        vec!["respond", "x.log", "--text", "t", "--format", "yaml"],
        vec!["replay", "x.log", "--tokenizer", "gpt2"],
        vec!["replay", "x.log", "--max-tokens", "9", "--trim-to", "1.5"],
        vec!["frobnicate"],
        vec!["stats"],
        vec!["stats", "x.log", "--skips", "-1"],
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

/// A negative number is the flag's value, refused by the flag's own
/// check: never clap's tip "to pass '-1' as a value, use '-- -1'", which
/// does not work for a flag.
#[test]
fn a_negative_value_is_refused_naming_its_flag() {
    for (args, flag) in [
        (vec!["replay", "x.log", "--tail", "-1"], "--tail"),
        (vec!["stats", "x.log", "--skips", "-1"], "--skips"),
        (vec!["search", "x.log", "q", "--limit", "-5"], "--limit"),
    ] {
        let out = bin().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains("'-"), "{args:?}: {err}");
        assert!(!err.contains("tip:"), "{args:?}: {err}");
    }
}

/// Runs `args` with stdout on a pseudo-terminal; what it printed there.
fn on_a_terminal(args: &[&str]) -> Vec<u8> {
    use std::os::fd::FromRawFd;
    let (mut leader, mut follower) = (0, 0);
    // SAFETY: openpty writes two new descriptors into the two ints; the
    // null name, termios and window size are allowed.
    let r = unsafe {
        libc::openpty(
            &mut leader,
            &mut follower,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty");
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (mut leader, follower) = unsafe {
        (
            std::fs::File::from_raw_fd(leader),
            std::fs::File::from_raw_fd(follower),
        )
    };
    let mut child = bin()
        .args(args)
        .stdout(Stdio::from(follower))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(child.wait().unwrap().success());
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // The follower is closed (the child exited, ours was moved into it):
    // reading ends with EIO once everything is read.
    while let Ok(n) = leader.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// On a terminal the output ends its line (the prompt, or a warning, then
/// starts on its own); piped, the bytes are the body's exactly.
#[test]
fn output_on_a_terminal_ends_its_line_and_piped_is_exact() {
    let ex = example();
    for args in [
        vec!["respond", ex.as_str(), "--text", "hi", "--tail", "2"],
        vec!["replay", ex.as_str(), "--tail", "2"],
        vec!["stats", ex.as_str()],
    ] {
        let piped = bin().args(&args).output().unwrap().stdout;
        let shown = on_a_terminal(&args);
        // The terminal turns "\n" into "\r\n".
        let shown = String::from_utf8(shown).unwrap().replace("\r\n", "\n");
        assert!(shown.ends_with('\n'), "{args:?}: {shown:?}");
        let piped = String::from_utf8(piped).unwrap();
        assert_eq!(shown.trim_end_matches('\n'), piped.trim_end_matches('\n'));
        if args[0] == "respond" {
            assert!(piped.ends_with('}'), "piped bytes are exact: {piped:?}");
        }
    }
}

#[test]
fn help_explains_commands_and_exit_codes() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for word in ["respond", "replay", "stats", "Exit status", "missing log"] {
        assert!(help.contains(word), "--help lacks {word:?}:\n{help}");
    }
}

#[test]
fn stats_skips_lists_the_first_skipped_lines() {
    let out = bin()
        .args(["stats", &example(), "--skips", "1"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["skipped_invalid_json"], 1);
    assert_eq!(v["skipped_invalid_shape"], 1);
    let skips = v["skips"].as_array().unwrap();
    assert_eq!(skips.len(), 1);
    assert_eq!(skips[0]["line"], 7);
    assert!(skips[0]["offset"].as_u64().unwrap() > 0);
    assert!(
        skips[0]["reason"]
            .as_str()
            .unwrap()
            .contains("invalid JSON")
    );
}

#[test]
fn closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("wm.log");
    let line = format!(
        "{{\"type\":\"k\",\"ts_ms\":1,\"t\":\"{}\"}}\n",
        "x".repeat(500)
    );
    std::fs::write(&p, line.repeat(20_000)).unwrap(); // ~10 MB of output
    let mut child = bin()
        .args(["replay", p.to_str().unwrap(), "--format", "ndjson"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    drop(child.stdout.take()); // like `| head -c 100`
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?} {err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    // Large enough (over 64 MiB) that a terminal would get a progress bar.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.log");
    let line = format!(
        "{{\"type\":\"k\",\"ts_ms\":1,\"t\":\"{}\"}}\n",
        "y".repeat(4000)
    );
    std::fs::write(&p, line.repeat(17_000)).unwrap();
    let out = bin().args(["stats", p.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "stderr: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );

    // And on a terminal (a pty made by `script`, where available) it shows.
    if Command::new("script").arg("--version").output().is_ok() {
        let cmd = format!("{} stats {}", env!("CARGO_BIN_EXE_wmreplay"), p.display());
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("total_lines"), "{text}");
        // The bar draws as soon as it is set up, naming the log.
        assert!(
            text.contains("replaying") && text.contains("big.log"),
            "{text}"
        );
    } else {
        eprintln!("note: `script` not found; the terminal half of this test did not run");
    }
}

#[test]
fn respond_cache_auto_marks_the_anthropic_body_and_none_is_the_default() {
    let run = |extra: &[&str]| {
        let mut cmd = bin();
        cmd.args(["respond", &example(), "--text", "next?"])
            .args(extra);
        cmd.output().unwrap()
    };
    let plain = run(&[]);
    assert!(plain.status.success());
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("cache_control"));
    let auto = run(&["--cache", "auto"]);
    assert!(auto.status.success());
    let body = String::from_utf8(auto.stdout).unwrap();
    let markers = body
        .matches(r#""cache_control":{"type":"ephemeral"}"#)
        .count();
    assert!((1..=4).contains(&markers), "{markers} markers");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["system"][0]["text"]
            .as_str()
            .unwrap()
            .contains("WM_KIND=")
    );
    let hour = run(&["--cache", "auto", "--cache-ttl", "1h"]);
    assert!(
        String::from_utf8(hour.stdout)
            .unwrap()
            .contains(r#""ttl":"1h""#)
    );
    // Markers are Anthropic's: another format is a usage error.
    let openai = run(&["--cache", "auto", "--format", "openai"]);
    assert_eq!(openai.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&openai.stderr).contains("--format anthropic"));
}

/// Into a pipe, `respond` widens it to 1 MiB (fewer wake-ups of the reader,
/// BENCHMARKS.md) and the bytes are the same as into a file; a pipe already
/// wider is left as it is.
#[cfg(target_os = "linux")]
#[test]
fn a_pipe_is_widened_not_narrowed_and_carries_the_same_bytes() {
    use std::os::fd::AsRawFd;
    let max: i32 = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body.json");
    let args = ["respond", &example(), "--text", "hi"];
    let status = bin()
        .args(args)
        .stdout(std::fs::File::create(&file).unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let want = std::fs::read(&file).unwrap();
    let mut child = bin().args(args).stdout(Stdio::piped()).spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut got = Vec::new();
    out.read_to_end(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got, want);
    // SAFETY: F_GETPIPE_SZ on an open pipe descriptor only reads its size.
    let size = unsafe { libc::fcntl(out.as_raw_fd(), libc::F_GETPIPE_SZ) };
    if max >= 1 << 20 {
        assert_eq!(size, 1 << 20, "the pipe was not widened");
    }
    // A pipe its reader made wider (before the writer started) stays so.
    // Checked where the kernel allows a pipe over 1 MiB to this process
    // (`pipe-max-size`, or CAP_SYS_RESOURCE); elsewhere only the bytes are.
    let (mut reader, writer) = std::io::pipe().unwrap();
    // SAFETY: F_SETPIPE_SZ on an open pipe descriptor only resizes it.
    let wide = unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_SETPIPE_SZ, 4 << 20) };
    let mut child = bin().args(args).stdout(writer).spawn().unwrap();
    let mut got = Vec::new();
    reader.read_to_end(&mut got).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(got, want);
    if wide >= 4 << 20 {
        // SAFETY: as above.
        let size = unsafe { libc::fcntl(reader.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert_eq!(size, wide, "a wider pipe was narrowed");
    }
}

/// `-` as the log reads standard input: `replay`, `stats` and `respond`
/// print what they print for the file; the commands that keep something
/// beside the log (`search`, `prepare`, `--recall`, `--trim-to`) refuse it
/// with exit status 2, saying why.
#[test]
fn a_dash_reads_the_log_from_standard_input() {
    let log = example();
    let bytes = std::fs::read(&log).unwrap();
    let piped = |args: &[&str]| {
        let mut child = bin()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feed = bytes.clone();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&feed);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    };
    for args in [
        vec!["replay", "LOG", "--format", "ndjson"],
        vec!["stats", "LOG", "--skips", "2"],
        vec!["respond", "LOG", "--text", "What next?", "--tail", "5"],
    ] {
        let with = |log: &str| -> Vec<String> {
            args.iter()
                .map(|a| {
                    if *a == "LOG" {
                        log.to_string()
                    } else {
                        a.to_string()
                    }
                })
                .collect()
        };
        let from_file = bin().args(with(&log)).output().unwrap();
        let from_stdin = piped(&with("-").iter().map(String::as_str).collect::<Vec<_>>());
        assert!(from_file.status.success() && from_stdin.status.success());
        assert!(!from_file.stdout.is_empty());
        assert_eq!(from_stdin.stdout, from_file.stdout, "{args:?}");
    }
    for args in [
        vec!["search", "-", "deploy"],
        vec!["prepare", "-", "--session-key", "k"],
        vec!["respond", "-", "--text", "x", "--recall", "2"],
        vec!["replay", "-", "--max-tokens", "100", "--trim-to", "0.5"],
    ] {
        let out = piped(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not - (standard input)"), "{args:?}: {err}");
    }
}
