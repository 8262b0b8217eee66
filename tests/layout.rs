//! The house rules of `src/`, checked so they stay true as the code grows:
//! - no file above 600 lines unless its module doc (`//!`) says it is one
//!   indivisible algorithm;
//! - the scanner's internals (`parse::scan`) are used only inside
//!   `src/parse/` (and by the crate root's `__internals` bridge for the
//!   fuzz targets and benches): everything else goes through `parse`'s root;
//! - the top-level modules import each other without cycles, so the
//!   pipeline reads in one direction; inside every folder the files import
//!   each other without cycles too, and under `src/server/` a folder's
//!   `mod.rs` is part of that order (it sits above its children, which
//!   never import from it).

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

/// Who imports whom: a module → the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// A cycle of `g`, if it has one (found by a depth-first search for a back
/// edge), as the path around it.
fn first_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &Graph,
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
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(m, g, &mut Vec::new(), &mut done))
}

#[test]
fn top_level_modules_import_each_other_without_cycles() {
    let files = all_files();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|(rel, _)| top_module(rel).to_string())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut deps: Graph = BTreeMap::new();
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
    if let Some(cycle) = first_cycle(&deps) {
        panic!("import cycle between modules: {}", cycle.join(" → "));
    }
}

/// A file's module path: `server/routes/mod.rs` → `[server, routes]`.
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Every module path a line names: `crate::a::b`, `super::x`, `self::x`
/// (with `{a, b}` groups opened one level), resolved from module `at`.
fn paths_named(line: &str, at: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (i, _) in line.match_indices("::") {
        // The head word just before this `::`.
        let before = &line[..i];
        let head_start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let head = &before[head_start..];
        if !matches!(head, "crate" | "super" | "self") {
            continue;
        }
        if before[..head_start].ends_with("::") {
            continue; // the middle of a path: counted from its start
        }
        let mut base: Vec<String> = match head {
            "crate" => Vec::new(),
            "self" => at.to_vec(),
            _ => at[..at.len().saturating_sub(1)].to_vec(),
        };
        let mut rest = &line[i + 2..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let firsts: Vec<String> = match rest.strip_prefix('{') {
            Some(group) => group
                .split('}')
                .next()
                .unwrap_or("")
                .split(',')
                .map(|p| ident(p.trim()))
                .filter(|p| !p.is_empty())
                .collect(),
            None => vec![ident(rest)],
        };
        for first in firsts {
            let mut p = base.clone();
            p.push(first.clone());
            if rest.starts_with(&first) {
                let mut tail = &rest[first.len()..];
                while let Some(t) = tail.strip_prefix("::") {
                    let seg = ident(t);
                    if seg.is_empty() {
                        break;
                    }
                    tail = &t[seg.len()..];
                    p.push(seg);
                }
            }
            out.push(p);
        }
    }
    out
}

#[test]
fn the_files_of_each_folder_import_each_other_without_cycles() {
    let files = all_files();
    let mut children: BTreeMap<Vec<String>, BTreeSet<String>> = BTreeMap::new();
    for (rel, _) in &files {
        let m = module_path(rel);
        for i in 0..m.len() {
            children
                .entry(m[..i].to_vec())
                .or_default()
                .insert(m[i].clone());
        }
    }
    // folder → file or sub-folder → what it imports among its siblings
    // ("mod": the folder's own mod.rs).
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for (rel, text) in &files {
        if rel == "lib.rs" || rel == "main.rs" {
            continue;
        }
        let at = module_path(rel);
        let is_folder = rel.ends_with("mod.rs");
        // Test code may reach anywhere: in-file tests after `#[cfg(test)]`,
        // and files of tests (`#![cfg(test)]`) entirely.
        let code = if text.contains("#![cfg(test)]") {
            ""
        } else {
            text.split("#[cfg(test)]").next().unwrap_or("")
        };
        for line in code.lines() {
            let t = line.trim();
            if t.starts_with("//") {
                continue;
            }
            // A folder's re-exports are its face, not something it uses.
            if is_folder && (t.starts_with("pub use ") || t.starts_with("pub(crate) use ")) {
                continue;
            }
            let mut named = paths_named(line, &at);
            if is_folder {
                // A folder's mod.rs names its children without a prefix.
                let kids = children.get(&at).cloned().unwrap_or_default();
                for (i, _) in line.match_indices("::") {
                    let before = &line[..i];
                    let start = before
                        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .map_or(0, |p| p + 1);
                    let word = &before[start..];
                    if kids.contains(word) && !before[..start].ends_with("::") {
                        let mut p = at.clone();
                        p.push(word.to_string());
                        named.push(p);
                    }
                }
            }
            for p in named {
                let common = at.iter().zip(&p).take_while(|(a, b)| a == b).count();
                let folder = at[..common].to_vec();
                let Some(kids) = children.get(&folder) else {
                    continue;
                };
                let from = at.get(common).cloned().unwrap_or_else(|| "mod".into());
                let to = p
                    .get(common)
                    .filter(|k| kids.contains(*k))
                    .cloned()
                    .unwrap_or_else(|| "mod".into());
                // The crate root's lib.rs is only re-exports; elsewhere mod.rs
                // counts where the folder is under src/server/.
                let strict = folder.first().is_some_and(|f| f == "server");
                if from == to || (!strict && (from == "mod" || to == "mod")) {
                    continue;
                }
                graphs
                    .entry(folder)
                    .or_default()
                    .entry(from)
                    .or_default()
                    .insert(to);
            }
        }
    }
    assert!(
        graphs
            .get(&vec!["server".to_string()])
            .is_some_and(|g| g.get("routes").is_some_and(|d| d.contains("app"))),
        "the import scan sees the server's folders: {graphs:?}"
    );
    let cycles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, g)| {
            first_cycle(g).map(|c| format!("src/{}: {}", folder.join("/"), c.join(" → ")))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "files of one folder import each other in a circle; give it a direction \
         (shared types in a file below both):\n{}",
        cycles.join("\n")
    );
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
            // A test binary of its own, or a module of the server's one.
            let own = root.join("tests").join(format!("{file}.rs"));
            let module = root.join("tests/service").join(format!("{file}.rs"));
            if own.exists() { own } else { module }
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

/// Where a documentation text speaks of how the project was made rather
/// than of the project: an issue number (`issue 7`, `issue #20`, `#12`), a
/// work session (`session 2`, `Session 3 (2026-11-22)`, `this session`,
/// `last session`) or an iteration (`iteration 4`). The product's own
/// sessions (`--session 42`, `session_id`, `session positions`, `sessions.rs`)
/// are not mentions. Returns each mention's line and the text around it.
fn work_log_mentions(text: &str) -> Vec<(usize, String)> {
    let lower = text.to_ascii_lowercase();
    let b = lower.as_bytes();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let at = |i: usize| b.get(i).copied().unwrap_or(b' ');
    let skip_space = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    // A word starting at `i`: not preceded by a word character, nor by `-`,
    // `/` or `.` (a flag, a path, a file name).
    let starts_word = |i: usize| i == 0 || !(is_word(b[i - 1]) || b"-/.".contains(&b[i - 1]));
    // The word before `i`, across whitespace and line breaks.
    let word_before = |i: usize| {
        let mut end = i;
        while end > 0 && b[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        let mut start = end;
        while start > 0 && b[start - 1].is_ascii_alphabetic() {
            start -= 1;
        }
        &lower[start..end]
    };
    let mut found = Vec::new();
    for (i, _) in lower.char_indices() {
        let rest = &lower[i..];
        let hit = if rest.starts_with("issue") && starts_word(i) {
            // `issue 7`, `issues 6 and 7`, `issue #20`
            let mut j = i + "issue".len();
            if at(j) == b's' {
                j += 1;
            }
            j = skip_space(j);
            if at(j) == b'#' {
                j += 1;
            }
            at(j).is_ascii_digit()
        } else if let Some(after) = rest.strip_prefix('#') {
            // `#12` as a reference: after a space or a bracket, digits, then
            // the end of the word (not `&#13;`, not a heading).
            let before = if i == 0 { b' ' } else { b[i - 1] };
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            (before.is_ascii_whitespace() || b"([,".contains(&before))
                && digits > 0
                && !is_word(at(i + 1 + digits))
        } else if rest.starts_with("session") && starts_word(i) {
            let mut j = i + "session".len();
            if at(j) == b's' {
                j += 1;
            }
            // Not `session_id`, `session-key`, `session's` (nor `session’s`).
            let word_ends = !is_word(at(j)) && !b"-'".contains(&at(j)) && at(j).is_ascii();
            let k = skip_space(j);
            // `session 2`, `session (2026-11-22)`
            let numbered = (k > j && at(k).is_ascii_digit())
                || (at(k) == b'(' && at(skip_space(k + 1)).is_ascii_digit());
            // `this session`, `last session`, `previous session`
            let ours = word_ends && matches!(word_before(i), "this" | "last" | "previous");
            numbered || ours
        } else if rest.starts_with("iteration") && starts_word(i) {
            let mut j = i + "iteration".len();
            if at(j) == b's' {
                j += 1;
            }
            let k = skip_space(j);
            k > j && at(k).is_ascii_digit()
        } else {
            false
        };
        if hit {
            let line = lower[..i].matches('\n').count() + 1;
            let from = text[..i].char_indices().rev().nth(20).map_or(0, |(p, _)| p);
            let to = text[i..]
                .char_indices()
                .nth(30)
                .map_or(text.len(), |(p, _)| i + p);
            found.push((line, text[from..to].replace('\n', " ")));
        }
    }
    found
}

/// README.md, BENCHMARKS.md and every page of `docs/` speak of the project
/// alone: no issue numbers, work sessions or iterations, which mean nothing to
/// a reader of the repository.
#[test]
fn documentation_speaks_of_the_project_not_of_how_it_was_made() {
    // The detector itself: what it must catch, and the product's own
    // "session" words it must let through.
    for bad in [
        "issue 7's re-serialiser",
        "(issue 6: three bytes",
        "see Issue #20",
        "fixed in #12.",
        "issues 6 and 7",
        "Session 2 (2026-11-22), 11 minutes per target",
        "666,028 inputs (session 3)",
        "in a session (2026-11-22)",
        "as this\nsession showed",
        "the last session measured",
        "iteration 4 brought",
    ] {
        assert!(!work_log_mentions(bad).is_empty(), "not caught: {bad:?}");
    }
    for good in [
        "`--session 42` keeps records whose session_id is 42",
        "--session s-42 --session-only",
        "session positions live in SQLite; session ids are compared unescaped",
        "`tests/sessions.rs`: 8 concurrent prepares for one session key",
        "prepare/ack (session deltas) and the sessions routes",
        "a session's records; this session's id; the last session’s start",
        "a raw CR becomes `&#13;`",
        "## Session deltas",
        "each iteration appends to the log; 1,000 rounds",
        "the issue is a lone surrogate",
    ] {
        assert_eq!(work_log_mentions(good), vec![], "caught: {good:?}");
    }

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(
        docs.len() >= 2,
        "docs/ holds the contract and the architecture"
    );
    pages.extend(docs);
    let mut found = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let rel = page.strip_prefix(root).unwrap().display().to_string();
        for (line, around) in work_log_mentions(&text) {
            found.push(format!("{rel}:{line}: …{around}…"));
        }
    }
    assert!(
        found.is_empty(),
        "documentation mentions issue numbers, work sessions or iterations; say what \
         the project does instead:\n{}",
        found.join("\n")
    );
}
