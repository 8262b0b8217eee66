//! The model names the examples use live in one place,
//! `examples/models.json`: every model id that README.md, docs/, the
//! packages' READMEs and docstrings, and the commands' `--help` name is one
//! of them (or one named on purpose, listed here with its reason), so that
//! a retired model is found everywhere by changing that one file.

use std::path::{Path, PathBuf};

/// Model ids named on purpose, not as the model to use.
const ON_PURPOSE: &[(&str, &str)] = &[
    // A header Claude Code sends, not a model.
    ("claude-code-session-id", "a header's name"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn current() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("examples/models.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    ["anthropic", "openai"]
        .iter()
        .map(|p| v[p].as_str().expect("a model per provider").to_string())
        .collect()
}

/// The model ids in `text` (`claude-…`, `gpt-<digit>…`), with their lines.
fn model_ids(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        for start in 0..bytes.len() {
            if !line.is_char_boundary(start) {
                continue;
            }
            let rest = &line[start..];
            let boundary = start == 0
                || !matches!(bytes[start - 1], b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/');
            let is_model = rest.starts_with("claude-")
                || (rest.starts_with("gpt-")
                    && rest.as_bytes().get(4).is_some_and(u8::is_ascii_digit));
            if !boundary || !is_model {
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
                .unwrap_or(rest.len());
            let id = rest[..end].trim_end_matches(['.', '-']);
            // A family (`claude-…`, `gpt-5*`) names no model.
            let family = rest[end..].starts_with('*')
                || (id.starts_with("claude") && id.matches('-').count() < 2);
            if family {
                continue;
            }
            out.push((n + 1, id.to_string()));
        }
    }
    out
}

fn files() -> Vec<PathBuf> {
    let r = root();
    let mut out = vec![
        r.join("README.md"),
        r.join("bindings/node/README.md"),
        r.join("bindings/python/README.md"),
        r.join("bindings/python/python/wmreplay/__init__.py"),
        r.join("src/server/settings.rs"),
    ];
    for dir in ["docs", "src/cli"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(r.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "rs"))
            .collect();
        names.sort();
        out.extend(names);
    }
    out
}

#[test]
fn the_examples_name_the_current_models() {
    let current = current();
    let mut stale = Vec::new();
    for file in files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, id) in model_ids(&text) {
            let known = current.contains(&id) || ON_PURPOSE.iter().any(|(m, _)| *m == id);
            if !known {
                let shown = file.strip_prefix(root()).unwrap_or(Path::new(&file));
                stale.push(format!("{}:{line}: {id}", shown.display()));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "these examples name a model other than examples/models.json's ({}):\n{}",
        current.join(", "),
        stale.join("\n")
    );
}

#[test]
fn model_ids_are_found_whole() {
    assert_eq!(
        model_ids("use `claude-sonnet-5-5`, or gpt-5.5. Not my-claude-x or gpt-x"),
        [
            (1, "claude-sonnet-5-5".to_string()),
            (1, "gpt-5.5".to_string())
        ]
    );
}
