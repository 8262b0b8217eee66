//! The memory tool's commands (`view`, `create`, `str_replace`, `insert`,
//! `delete`, `rename`) over files under `/memories`, where a file is the
//! latest value of its path among the log's keyed-memory records
//! (`wm_fact` with the path as its key; a `null` value deletes it).
//! Directories are not stored: a directory is any path some file is under.
//!
//! [`run`] is pure: it reads the files as they stand and says what the
//! model is answered and which keys to write. A path outside `/memories`, a
//! `.` or `..` component, an empty component, a backslash or a control
//! character, or a file over the size limit is refused with an error
//! result, and nothing is written.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::server::upstream::tools::ToolResult;

pub(crate) use crate::server::app::memory_edit::ROOT;
use crate::server::app::memory_edit::{MAX_PATH, checked};

/// What a command does: the answer, and the keys to write (`None`: delete).
#[derive(Debug, PartialEq)]
pub(crate) struct Applied {
    pub(crate) result: ToolResult,
    pub(crate) writes: Vec<(String, Option<String>)>,
}

fn ok(content: String, writes: Vec<(String, Option<String>)>) -> Applied {
    Applied {
        result: ToolResult {
            content,
            is_error: false,
        },
        writes,
    }
}

fn error(content: String) -> Applied {
    Applied {
        result: ToolResult {
            content,
            is_error: true,
        },
        writes: Vec::new(),
    }
}

/// The files under `/memories` among the current facts (`facts`: the
/// `{"key": value, …}` object); a value that is not a string is its JSON.
pub(crate) fn files_of(facts: &Map<String, Value>) -> BTreeMap<String, String> {
    facts
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{ROOT}/")))
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

fn is_dir(files: &BTreeMap<String, String>, path: &str) -> bool {
    path == ROOT || {
        let prefix = format!("{path}/");
        files
            .range(prefix.clone()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(&prefix))
    }
}

/// The files under directory `path`, with their paths.
fn under<'f>(
    files: &'f BTreeMap<String, String>,
    path: &str,
) -> impl Iterator<Item = (&'f String, &'f String)> {
    let prefix = format!("{path}/");
    files
        .range(prefix.clone()..)
        .take_while(move |(k, _)| k.starts_with(&prefix))
}

/// The first existing file among `path`'s parents, if any: nothing can be
/// created under a file.
fn file_parent(files: &BTreeMap<String, String>, path: &str) -> Option<String> {
    let mut at = path;
    while let Some((parent, _)) = at.rsplit_once('/') {
        if parent.len() <= ROOT.len() {
            return None;
        }
        if files.contains_key(parent) {
            return Some(parent.to_string());
        }
        at = parent;
    }
    None
}

fn size(n: usize) -> String {
    match n {
        n if n < 1024 => format!("{n}B"),
        n if n < 1 << 20 => format!("{:.1}K", n as f64 / 1024.0),
        n => format!("{:.1}M", n as f64 / (1 << 20) as f64),
    }
}

/// A file's lines (a final newline ends the last line, it does not start
/// another).
fn lines_of(text: &str) -> Vec<&str> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if text.is_empty() {
        return Vec::new();
    }
    body.split('\n').collect()
}

fn numbered(lines: &[&str], first: usize) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>6}\t{l}", first + i))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs one command (`args`: the call's input) on `files`; a new file may
/// be at most `max_file` bytes.
pub(crate) fn run(
    files: &BTreeMap<String, String>,
    args: &Map<String, Value>,
    max_file: usize,
) -> Applied {
    let command = match args.get("command").and_then(Value::as_str) {
        Some(c) => c,
        None => return error("Error: `command` is required (a string).".into()),
    };
    let text = |k: &str| -> Result<&str, Applied> {
        args.get(k).and_then(Value::as_str).ok_or_else(|| {
            error(format!(
                "Error: `{k}` is required for {command} (a string)."
            ))
        })
    };
    let path = |k: &str| -> Result<String, Applied> { checked(text(k)?).map_err(error) };
    let run = || -> Result<Applied, Applied> {
        Ok(match command {
            "view" => view(files, &path("path")?, args.get("view_range")),
            "create" => create(files, &path("path")?, text("file_text")?, max_file),
            "str_replace" => {
                let p = path("path")?;
                str_replace(files, &p, text("old_str")?, text("new_str")?, max_file)
            }
            "insert" => {
                let p = path("path")?;
                let line = args
                    .get("insert_line")
                    .and_then(Value::as_i64)
                    .ok_or_else(|| {
                        error("Error: `insert_line` is required for insert (an integer).".into())
                    })?;
                insert(files, &p, line, text("insert_text")?, max_file)
            }
            "delete" => delete(files, &path("path")?),
            "rename" => rename(files, &path("old_path")?, &path("new_path")?),
            other => error(format!(
                "Error: Unknown command `{other}`: the commands are view, create, str_replace, \
                 insert, delete and rename."
            )),
        })
    };
    run().unwrap_or_else(|e| e)
}

fn missing(path: &str) -> Applied {
    error(format!(
        "The path {path} does not exist. Please provide a valid path."
    ))
}

fn view(files: &BTreeMap<String, String>, path: &str, range: Option<&Value>) -> Applied {
    if is_dir(files, path) {
        let mut sizes: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for (k, v) in under(files, path) {
            total += v.len();
            let rel = &k[path.len() + 1..];
            if rel
                .split('/')
                .any(|p| p.starts_with('.') || p == "node_modules")
            {
                continue;
            }
            let parts: Vec<&str> = rel.split('/').collect();
            for depth in 1..=parts.len().min(2) {
                let dir = depth < parts.len();
                let mut entry = format!("{path}/{}", parts[..depth].join("/"));
                if dir {
                    entry.push('/');
                }
                *sizes.entry(entry).or_default() += v.len();
            }
        }
        let mut out = format!(
            "Here're the files and directories up to 2 levels deep in {path}, excluding hidden \
             items and node_modules:\n{}\t{path}",
            size(total)
        );
        for (entry, n) in &sizes {
            out.push_str(&format!("\n{}\t{entry}", size(*n)));
        }
        return ok(out, Vec::new());
    }
    let Some(text) = files.get(path) else {
        return missing(path);
    };
    let lines = lines_of(text);
    // `view_range` [first, last] as the reference implementation reads it:
    // first below 1 is 1, last -1 is the end, and the range is cut to the
    // file's lines (a range past them shows nothing).
    let n = lines.len();
    let (first, last) = match range {
        None | Some(Value::Null) => (1, n),
        Some(r) => {
            let pair = r
                .as_array()
                .filter(|a| a.len() == 2)
                .and_then(|a| Some((a[0].as_i64()?, a[1].as_i64()?)));
            let Some((a, b)) = pair else {
                return error(format!(
                    "Error: Invalid `view_range` parameter: {r}. It should be [first, last], two \
                     integers (last -1 for the end)."
                ));
            };
            let first = a.max(1).min(n as i64 + 1) as usize;
            let last = match b {
                -1 => n,
                b if b < 0 => (n as i64 + b).max(0) as usize,
                b => (b as usize).min(n),
            };
            (first, last.max(first - 1))
        }
    };
    let shown = &lines[first - 1..last];
    ok(
        format!(
            "Here's the content of {path} with line numbers:\n{}",
            numbered(shown, first)
        ),
        Vec::new(),
    )
}

fn too_big(path: &str, n: usize, max: usize) -> Applied {
    error(format!(
        "Error: File {path} would be {n} bytes, more than the limit of {max} bytes."
    ))
}

fn create(files: &BTreeMap<String, String>, path: &str, text: &str, max: usize) -> Applied {
    if is_dir(files, path) {
        return error(format!("Error: {path} is a directory."));
    }
    if let Some(f) = file_parent(files, path) {
        return error(format!("Error: {f} is a file, not a directory."));
    }
    if text.len() > max {
        return too_big(path, text.len(), max);
    }
    let message = if files.contains_key(path) {
        format!("File overwritten: {path}")
    } else {
        format!("File created successfully at: {path}")
    };
    ok(message, vec![(path.to_string(), Some(text.to_string()))])
}

fn file<'f>(files: &'f BTreeMap<String, String>, path: &str) -> Result<&'f String, Applied> {
    if let Some(t) = files.get(path) {
        return Ok(t);
    }
    if is_dir(files, path) {
        return Err(error(format!("Error: {path} is a directory, not a file.")));
    }
    Err(missing(path))
}

fn str_replace(
    files: &BTreeMap<String, String>,
    path: &str,
    old: &str,
    new: &str,
    max: usize,
) -> Applied {
    let text = match file(files, path) {
        Ok(t) => t,
        Err(e) => return e,
    };
    if old.is_empty() {
        return error("Error: `old_str` must not be empty.".into());
    }
    let at: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    let line_of = |i: usize| text[..i].matches('\n').count() + 1;
    match at.as_slice() {
        [] => error(format!(
            "No replacement was performed, old_str `{old}` did not appear verbatim in {path}."
        )),
        [i] => {
            let edited = format!("{}{new}{}", &text[..*i], &text[i + old.len()..]);
            if edited.len() > max {
                return too_big(path, edited.len(), max);
            }
            let lines = lines_of(&edited);
            let start = line_of(*i);
            let end = start + new.matches('\n').count();
            let from = start.saturating_sub(4).max(1);
            let to = (end + 4).min(lines.len());
            let snippet = if lines.is_empty() {
                String::new()
            } else {
                numbered(&lines[from - 1..to.max(from - 1)], from)
            };
            ok(
                format!(
                    "The memory file has been edited. A snippet of {path} with line numbers:\n{snippet}"
                ),
                vec![(path.to_string(), Some(edited))],
            )
        }
        many => {
            let lines: Vec<String> = many.iter().map(|i| line_of(*i).to_string()).collect();
            error(format!(
                "No replacement was performed. Multiple occurrences of old_str `{old}` in lines: \
                 {}. Please ensure it is unique.",
                lines.join(", ")
            ))
        }
    }
}

fn insert(
    files: &BTreeMap<String, String>,
    path: &str,
    line: i64,
    more: &str,
    max: usize,
) -> Applied {
    let text = match file(files, path) {
        Ok(t) => t,
        Err(e) => return e,
    };
    let n = lines_of(text).len();
    if line < 0 || line as usize > n {
        return error(format!(
            "Error: Invalid `insert_line` parameter: {line}. It should be within the range of \
             lines of the file: [0, {n}]."
        ));
    }
    // The byte offset just after line `line`.
    let mut at = 0;
    for _ in 0..line {
        at += text[at..].find('\n').map_or(text.len() - at, |i| i + 1);
    }
    let mut edited = String::with_capacity(text.len() + more.len() + 2);
    edited.push_str(&text[..at]);
    if at > 0 && !edited.ends_with('\n') {
        edited.push('\n');
    }
    edited.push_str(more);
    if at < text.len() && !more.ends_with('\n') {
        edited.push('\n');
    }
    edited.push_str(&text[at..]);
    if edited.len() > max {
        return too_big(path, edited.len(), max);
    }
    ok(
        format!("The file {path} has been edited."),
        vec![(path.to_string(), Some(edited))],
    )
}

fn delete(files: &BTreeMap<String, String>, path: &str) -> Applied {
    if path == ROOT {
        return error(format!(
            "Error: The {ROOT} directory itself cannot be deleted."
        ));
    }
    let writes: Vec<(String, Option<String>)> = if files.contains_key(path) {
        vec![(path.to_string(), None)]
    } else {
        under(files, path).map(|(k, _)| (k.clone(), None)).collect()
    };
    if writes.is_empty() {
        return missing(path);
    }
    ok(format!("Successfully deleted {path}"), writes)
}

fn rename(files: &BTreeMap<String, String>, old: &str, new: &str) -> Applied {
    if old == ROOT || new == ROOT {
        return error(format!(
            "Error: The {ROOT} directory itself cannot be renamed."
        ));
    }
    if files.contains_key(new) || is_dir(files, new) {
        return error(format!("Error: The destination {new} already exists."));
    }
    if new.starts_with(&format!("{old}/")) {
        return error(format!("Error: {old} cannot be moved into itself."));
    }
    if let Some(f) = file_parent(files, new) {
        return error(format!("Error: {f} is a file, not a directory."));
    }
    let mut writes = Vec::new();
    if let Some(t) = files.get(old) {
        writes.push((new.to_string(), Some(t.clone())));
        writes.push((old.to_string(), None));
    } else {
        for (k, t) in under(files, old) {
            writes.push((format!("{new}{}", &k[old.len()..]), Some(t.clone())));
            writes.push((k.clone(), None));
        }
    }
    if writes.is_empty() {
        return missing(old);
    }
    // Every key it would make must be one a command can name again.
    if let Some((k, _)) = writes.iter().find(|(k, _)| k.len() > MAX_PATH) {
        return error(format!(
            "Error: Renaming {old} to {new} would make the path {k} longer than {MAX_PATH} \
             bytes; nothing was renamed."
        ));
    }
    ok(format!("Successfully renamed {old} to {new}"), writes)
}

#[cfg(test)]
mod tests;
