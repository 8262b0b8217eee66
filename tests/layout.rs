//! The house rules of `src/`, checked so they stay true as the code grows:
//! - no file above 600 lines unless its module doc (`//!`) says it is one
//!   indivisible algorithm;
//! - the scanner's internals (`parse::scan`) are used only inside
//!   `src/parse/` (and by the crate root's `__internals` bridge for the
//!   fuzz targets and benches): everything else goes through `parse`'s root;
//! - the top-level modules import each other without cycles, so the
//!   pipeline reads in one direction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 600;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn all_files() -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let files: Vec<_> = files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    assert!(files.len() > 20, "src/ was found");
    files
}

/// The leading `//!` lines of a file.
fn module_doc(text: &str) -> String {
    text.lines()
        .take_while(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_file_grows_past_the_limit_without_saying_why() {
    let mut long = Vec::new();
    for (rel, text) in all_files() {
        let n = text.lines().count();
        if n > MAX_LINES && !module_doc(&text).contains("indivisible") {
            long.push(format!("src/{rel}: {n} lines"));
        }
    }
    assert!(
        long.is_empty(),
        "files above {MAX_LINES} lines: split them by job, or say in the module doc \
         (`//!`) why each is one indivisible algorithm:\n{}",
        long.join("\n")
    );
}

#[test]
fn only_the_parse_folder_reaches_into_the_scanner() {
    let mut found = Vec::new();
    for (rel, text) in all_files() {
        if rel.starts_with("parse/") || rel == "lib.rs" {
            continue;
        }
        for (i, line) in text.lines().enumerate() {
            if line.contains("parse::scan") {
                found.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the scanner's internals are used outside src/parse/; use what `parse` \
         exports at its root:\n{}",
        found.join("\n")
    );
}

/// The top-level module a file belongs to (`parse/json/mod.rs` → `parse`).
fn top_module(rel: &str) -> &str {
    let first = rel.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first)
}

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let files = all_files();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|(rel, _)| top_module(rel).to_string())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &files {
        let from = top_module(rel);
        if !modules.contains(from) {
            continue;
        }
        for piece in text.split("crate::").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                deps.entry(from.to_string()).or_default().insert(name);
            }
        }
    }
    assert!(
        deps.get("live").is_some_and(|d| d.contains("parse")),
        "the import scan sees `crate::` paths: {deps:?}"
    );
    // Depth-first search for a back edge, reporting the cycle's path.
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in deps.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        if let Some(cycle) = visit(m, &deps, &mut Vec::new(), &mut done) {
            panic!("import cycle between modules: {}", cycle.join(" → "));
        }
    }
}

/// `docs/contract.md` names the tests behind each item: every name must be a
/// test function in the file it names, so the document cannot drift.
#[test]
fn every_test_the_contract_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/contract.md")).unwrap();
    let mut checked = 0;
    let mut missing = Vec::new();
    for piece in doc.split('`').skip(1).step_by(2) {
        let Some((file, name)) = piece.rsplit_once("::") else {
            continue;
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        let path = if let Some(src) = file.strip_suffix("::tests") {
            root.join(src)
        } else if file.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            root.join("tests").join(format!("{file}.rs"))
        } else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if !text.contains(&format!("fn {name}(")) {
            missing.push(format!("{piece} (in {})", path.display()));
        }
        checked += 1;
    }
    assert!(
        checked > 50,
        "the contract names its tests ({checked} found)"
    );
    assert!(
        missing.is_empty(),
        "docs/contract.md names tests that do not exist:\n{}",
        missing.join("\n")
    );
}
