//! Replays every committed fuzz input (the minimised corpus of each target in
//! `fuzz/corpus/<target>/`, and crash reproducers in `fuzz/regressions/<target>/`)
//! through the same checks the fuzz targets run, so every change is checked
//! against everything the fuzzers found. See `fuzz/checks.rs`.

#[path = "../fuzz/checks.rs"]
mod checks;

use std::path::Path;

fn replay_dir(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for sub in ["corpus", "regressions"] {
        let dir = root.join(sub).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let result = std::panic::catch_unwind(|| check(&data));
            assert!(result.is_ok(), "{} failed its check", f.display());
            n += 1;
        }
    }
    n
}

#[test]
fn fuzz_corpus_line() {
    assert!(
        replay_dir("line", checks::check_line) > 0,
        "the line corpus is committed"
    );
}

#[test]
fn fuzz_corpus_buffer() {
    assert!(
        replay_dir("buffer", checks::check_buffer) > 0,
        "the buffer corpus is committed"
    );
}

#[test]
fn fuzz_corpus_split() {
    assert!(
        replay_dir("split", checks::check_split) > 0,
        "the split corpus is committed"
    );
}

#[test]
fn fuzz_corpus_live() {
    assert!(
        replay_dir("live", checks::check_live) > 0,
        "the live corpus is committed"
    );
}

#[test]
fn fuzz_corpus_js() {
    assert!(
        replay_dir("js", checks::check_js) > 0,
        "the js corpus is committed"
    );
}

#[test]
fn fuzz_corpus_select() {
    assert!(
        replay_dir("select", checks::check_select) > 0,
        "the select corpus is committed"
    );
}

#[test]
fn fuzz_corpus_settings() {
    assert!(
        replay_dir("settings", checks::check_settings) > 0,
        "the settings corpus is committed"
    );
}
