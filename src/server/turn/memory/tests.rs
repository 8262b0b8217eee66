use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::*;

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

/// Runs `cmd` on `files` and applies its writes, as the server does.
fn apply(files: &mut BTreeMap<String, String>, cmd: Value) -> ToolResult {
    let a = run(files, &args(cmd), 1000);
    for (k, v) in a.writes {
        match v {
            Some(v) => files.insert(k, v),
            None => files.remove(&k),
        };
    }
    a.result
}

#[test]
fn the_six_commands_on_one_file() {
    let mut f = BTreeMap::new();
    let r = apply(
        &mut f,
        json!({"command": "create", "path": "/memories/notes.md", "file_text": "one\ntwo\n"}),
    );
    assert_eq!(
        r.content,
        "File created successfully at: /memories/notes.md"
    );
    let r = apply(
        &mut f,
        json!({"command": "str_replace", "path": "/memories/notes.md", "old_str": "two", "new_str": "2"}),
    );
    assert!(!r.is_error, "{}", r.content);
    assert!(r.content.contains("     2\t2"), "{}", r.content);
    let r = apply(
        &mut f,
        json!({"command": "insert", "path": "/memories/notes.md", "insert_line": 1, "insert_text": "one and a half"}),
    );
    assert_eq!(r.content, "The file /memories/notes.md has been edited.");
    assert_eq!(f["/memories/notes.md"], "one\none and a half\n2\n");
    let r = apply(
        &mut f,
        json!({"command": "view", "path": "/memories/notes.md", "view_range": [2, -1]}),
    );
    assert_eq!(
        r.content,
        "Here's the content of /memories/notes.md with line numbers:\n     2\tone and a half\n     3\t2"
    );
    let r = apply(
        &mut f,
        json!({"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/a/b.md"}),
    );
    assert_eq!(
        r.content,
        "Successfully renamed /memories/notes.md to /memories/a/b.md"
    );
    assert_eq!(f.keys().collect::<Vec<_>>(), ["/memories/a/b.md"]);
    let r = apply(&mut f, json!({"command": "view", "path": "/memories"}));
    assert!(
        r.content
            .ends_with("21B\t/memories\n21B\t/memories/a/\n21B\t/memories/a/b.md"),
        "{}",
        r.content
    );
    let r = apply(&mut f, json!({"command": "delete", "path": "/memories/a"}));
    assert_eq!(r.content, "Successfully deleted /memories/a");
    assert!(f.is_empty());
}

#[test]
fn escapes_and_bad_input_are_errors_that_write_nothing() {
    let mut f = BTreeMap::new();
    f.insert("/memories/x".to_string(), "x".to_string());
    for cmd in [
        json!({"command": "create", "path": "/memories/../etc/passwd", "file_text": "x"}),
        json!({"command": "create", "path": "/etc/passwd", "file_text": "x"}),
        json!({"command": "create", "path": "/memoriesX/a", "file_text": "x"}),
        json!({"command": "create", "path": "/memories//a", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/%2e%2e/a", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/a\\b", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/big", "file_text": "y".repeat(1001)}),
        json!({"command": "create", "path": "/memories/x/under-a-file", "file_text": "x"}),
        json!({"command": "rename", "old_path": "/memories/x", "new_path": "/tmp/x"}),
        json!({"command": "delete", "path": "/memories"}),
        json!({"command": "delete", "path": "/memories/nothing"}),
        json!({"command": "str_replace", "path": "/memories/x", "old_str": "zz", "new_str": "y"}),
        json!({"command": "insert", "path": "/memories/x", "insert_line": 5, "insert_text": "y"}),
        json!({"command": "view", "path": "/memories/x", "view_range": "1-3"}),
        json!({"command": "format", "path": "/memories/x"}),
        // Names that print nothing or reorder text, and edges of spaces.
        json!({"command": "create", "path": "/memories/a\u{200b}b", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/a\u{2028}b", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/evil\u{202e}txt.md", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/trailing ", "file_text": "x"}),
        json!({"command": "create", "path": "/memories/ leading/a", "file_text": "x"}),
        json!({"command": "rename", "old_path": "/memories/x", "new_path": "/memories/x\u{feff}"}),
        json!({"path": "/memories/x"}),
        json!({"command": "create", "path": "/memories/y"}),
    ] {
        let a = run(&f, &args(cmd.clone()), 1000);
        assert!(a.result.is_error, "{cmd}: {}", a.result.content);
        assert!(a.writes.is_empty(), "{cmd}");
    }
    let a = run(
        &f,
        &args(json!({"command": "view", "path": "/memories/../x"})),
        1000,
    );
    assert!(a.result.content.contains("restricted") || a.result.content.contains("`..`"));
}

#[test]
fn a_repeated_old_str_names_its_lines() {
    let mut f = BTreeMap::new();
    f.insert("/memories/x".to_string(), "a\nb\na\n".to_string());
    let a = run(
        &f,
        &args(
            json!({"command": "str_replace", "path": "/memories/x", "old_str": "a", "new_str": "c"}),
        ),
        1000,
    );
    assert!(
        a.result.content.contains("in lines: 1, 3"),
        "{}",
        a.result.content
    );
}

#[test]
fn insert_at_the_start_and_after_a_last_line_without_newline() {
    let mut f = BTreeMap::new();
    f.insert("/memories/x".to_string(), "a\nb".to_string());
    apply(
        &mut f,
        json!({"command": "insert", "path": "/memories/x", "insert_line": 0, "insert_text": "0"}),
    );
    assert_eq!(f["/memories/x"], "0\na\nb");
    apply(
        &mut f,
        json!({"command": "insert", "path": "/memories/x", "insert_line": 3, "insert_text": "c"}),
    );
    assert_eq!(f["/memories/x"], "0\na\nb\nc");
}

#[test]
fn only_paths_under_memories_are_files() {
    let facts = json!({"user.name": "Ada", "/memories/a": "x", "/memories/b": {"n": 1}});
    let files = files_of(facts.as_object().unwrap());
    assert_eq!(files.len(), 2);
    assert_eq!(files["/memories/b"], r#"{"n":1}"#);
}

/// `view_range` as the reference implementation reads it: a first line
/// below 1 is 1, -1 is the end, and a range past the file is cut to it (it
/// was an error).
#[test]
fn view_range_is_cut_to_the_file_as_the_reference_does() {
    let mut f = BTreeMap::new();
    f.insert("/memories/x".to_string(), "one\ntwo\nthree\n".to_string());
    let view = |range: serde_json::Value| {
        let a = run(
            &f,
            &args(json!({"command": "view", "path": "/memories/x", "view_range": range})),
            1000,
        );
        assert!(!a.result.is_error, "{}", a.result.content);
        a.result
            .content
            .lines()
            .skip(1)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(view(json!([2, -1])), ["     2\ttwo", "     3\tthree"]);
    assert_eq!(view(json!([0, 1])), ["     1\tone"]);
    assert_eq!(view(json!([2, 99])), ["     2\ttwo", "     3\tthree"]);
    assert!(view(json!([3, 1])).is_empty());
    assert!(view(json!([7, 9])).is_empty());
}

/// A rename that would make a key longer than a key may be (256 bytes) is
/// refused and writes nothing: before, renaming a directory to a 250-byte
/// name left a 454-byte key no command (nor the facts routes) could name.
#[test]
fn a_rename_that_would_make_a_key_too_long_is_refused() {
    let mut f = BTreeMap::new();
    f.insert(
        "/memories/d/a-rather-long-file-name.md".to_string(),
        "x".to_string(),
    );
    let long = format!("/memories/{}", "n".repeat(240));
    let a = run(
        &f,
        &args(json!({"command": "rename", "old_path": "/memories/d", "new_path": long})),
        1000,
    );
    assert!(a.result.is_error, "{}", a.result.content);
    assert!(
        a.result.content.contains("longer than 256"),
        "{}",
        a.result.content
    );
    assert!(a.writes.is_empty());
}
