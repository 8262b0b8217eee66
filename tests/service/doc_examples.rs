//! Every command-line example of the README, docs/cli.md and the commands'
//! `--help` (`respond`, `replay`, `stats`, `prepare` on `wm.log`) is run on
//! the example log and must succeed; a `respond` example that writes a
//! provider's request (`--model`) must be one that provider accepts, as
//! the strict mock upstream judges it (`tests/mock/strict.rs`).

use crate::mock;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use wmreplay::server::Provider;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

/// Splits a shell command line into words (single and double quotes, no
/// expansion), up to a pipe, a redirection, a `;` or a comment.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '|' | '>' | ';' | '#') => break,
            (None, c) if c.is_whitespace() => {
                if started || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if started || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The example command lines of `text`: lines starting with `wmreplay
/// respond|replay|stats|prepare wm.log` (after an optional `$ ` or
/// `Example: `), with `\` continuations joined.
fn examples_in(text: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(head) = t.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(t);
        joined.push(std::mem::take(&mut pending));
    }
    joined
        .into_iter()
        .filter_map(|l| {
            let l = l.trim_start_matches("$ ").trim_start_matches("Example: ");
            ["respond", "replay", "stats", "prepare", "search"]
                .iter()
                .any(|c| {
                    l.starts_with(&format!("wmreplay {c} wm.log "))
                        || l == format!("wmreplay {c} wm.log")
                })
                .then(|| l.to_string())
        })
        .collect()
}

#[test]
fn every_documented_command_line_runs_on_the_example_log() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut examples: Vec<(String, String)> = Vec::new();
    for doc in ["README.md", "docs/cli.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        examples.extend(examples_in(&text).into_iter().map(|e| (doc.to_string(), e)));
    }
    for command in ["respond", "replay", "stats", "prepare", "search"] {
        let help = bin().args([command, "--help"]).output().unwrap().stdout;
        let help = String::from_utf8(help).unwrap();
        let found = examples_in(&help);
        assert!(!found.is_empty(), "`{command} --help` shows no example");
        examples.extend(found.into_iter().map(|e| (format!("{command} --help"), e)));
    }
    assert!(examples.len() >= 15, "{} examples found", examples.len());
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("anthropic-version", "2023-06-01".parse().unwrap());
    headers.insert("authorization", "Bearer k".parse().unwrap());
    let mut requests = 0;
    for (place, example) in &examples {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            root.join("examples/working_memory.log"),
            dir.path().join("wm.log"),
        )
        .unwrap();
        let w = words(example);
        if w.iter().any(|a| a == "--embed-upstream") {
            // Needs an embedding model; tests/service/hybrid.rs runs these flags
            // against one.
            continue;
        }
        let out = bin()
            .args(&w[1..])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{place}: `{example}` failed: {err}");
        assert!(err.is_empty(), "{place}: `{example}` warned: {err}");
        if w[1] == "search" && !w.iter().any(|a| a == "--format") {
            // A documented search finds something on the example log.
            let found: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(
                found["hits"].as_array().is_some_and(|h| !h.is_empty()),
                "{place}: `{example}` finds nothing on the example log"
            );
        }
        if w[1] == "respond" && w.iter().any(|a| a == "--model") {
            let body: Value = serde_json::from_slice(&out.stdout).unwrap();
            let provider = if w.windows(2).any(|p| p[0] == "--format" && p[1] == "openai") {
                Provider::OpenAi
            } else {
                Provider::Anthropic
            };
            mock::strict::check(provider, &body, &headers).unwrap_or_else(|e| {
                panic!("{place}: `{example}`: the provider would refuse it: {e}")
            });
            requests += 1;
        }
    }
    assert!(requests >= 1, "no example writes a provider request");
}

#[test]
fn the_splitter_reads_quotes_and_stops_at_pipes() {
    assert_eq!(
        words(r#"wmreplay respond wm.log --text "What next?" --param 'stop=["END"]' | head -3"#),
        [
            "wmreplay",
            "respond",
            "wm.log",
            "--text",
            "What next?",
            "--param",
            r#"stop=["END"]"#
        ]
    );
    assert_eq!(words("a '' b # c"), ["a", "", "b"]);
}
