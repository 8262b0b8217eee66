//! The Markdown side of `doc_blocks`: the fenced blocks of a document,
//! their markers, and what each language's block is run as.

/// One fenced block of a document.
#[derive(Debug)]
pub(super) struct Block {
    /// `docs/cli.md:66`: the file and the line of the opening fence.
    pub(super) place: String,
    pub(super) lang: String,
    pub(super) text: String,
    pub(super) skip: Option<String>,
}

/// The fenced blocks of `text`, with the marker on the line before each.
pub(super) fn blocks_in(file: &str, text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let lang = info.split([',', ' ']).next().unwrap_or("").to_string();
        let start = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push(lines[i]);
            i += 1;
        }
        if i == lines.len() {
            return Err(format!("{file}:{}: the fence is never closed", start + 1));
        }
        i += 1;
        let place = format!("{file}:{}", start + 1);
        let before = if start > 0 {
            lines[start - 1].trim()
        } else {
            ""
        };
        let skip = match before.strip_prefix("<!-- doc-test:") {
            None => None,
            Some(m) => {
                let m = m.trim_end_matches("-->").trim();
                let reason = m
                    .strip_prefix("skip")
                    .map(str::trim)
                    .and_then(|r| r.strip_prefix('(')?.strip_suffix(')'))
                    .map(str::trim)
                    .filter(|r| !r.is_empty());
                match reason {
                    Some(r) => Some(r.to_string()),
                    None => {
                        return Err(format!(
                            "{place}: `{before}`: the marker is `<!-- doc-test: skip (reason) -->`"
                        ));
                    }
                }
            }
        };
        out.push(Block {
            place,
            lang,
            text: body.join("\n") + "\n",
            skip,
        });
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Kind {
    Shell,
    Python,
    Node,
    Json,
    Toml,
    /// Pictures and output.
    Prose,
}

pub(super) fn kind_of(lang: &str) -> Option<Kind> {
    Some(match lang {
        "sh" | "bash" | "shell" | "console" => Kind::Shell,
        "python" | "py" => Kind::Python,
        "js" | "javascript" | "mjs" | "cjs" | "ts" | "typescript" => Kind::Node,
        "json" => Kind::Json,
        "toml" => Kind::Toml,
        "" | "text" => Kind::Prose,
        _ => return None,
    })
}

/// A terminal session's commands (lines starting `$ `, with their `\`
/// continuations); any other shell block whole.
pub(super) fn shell_script(text: &str) -> String {
    if !text.lines().any(|l| l.starts_with("$ ")) {
        return text.to_string();
    }
    let mut out = String::new();
    let mut continued = false;
    for line in text.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            out.push_str(cmd);
        } else if continued {
            out.push_str(line);
        } else {
            continue;
        }
        out.push('\n');
        continued = line.trim_end().ends_with('\\');
    }
    out
}

/// A terminal session's output as shown: the lines that are not its
/// commands, each cut at the `…` that stand for what varies, without
/// whitespace (a long line may be shown wrapped).
pub(super) fn shown_output(text: &str) -> Vec<String> {
    if !text.lines().any(|l| l.starts_with("$ ")) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut continued = false;
    for line in text.lines() {
        if line.starts_with("$ ") || continued {
            continued = line.trim_end().ends_with('\\');
            continue;
        }
        out.extend(
            line.split('…')
                .map(squeeze)
                .filter(|piece| !piece.is_empty()),
        );
    }
    out
}

/// `text` without its whitespace.
pub(super) fn squeeze(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// A Node.js block's file name: an ES module or CommonJS.
pub(super) fn node_file(lang: &str, text: &str) -> &'static str {
    let module = text
        .lines()
        .any(|l| l.starts_with("import ") || l.starts_with("export "));
    if module || matches!(lang, "mjs" | "ts" | "typescript") {
        "block.mjs"
    } else {
        "block.cjs"
    }
}

#[test]
fn blocks_are_found_with_their_place_and_marker() {
    let md = "a\n```sh\necho 1\n```\n<!-- doc-test: skip (needs a GPU) -->\n```python\nx\n```\n";
    let b = blocks_in("f.md", md).unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].place.as_str(), b[0].lang.as_str()), ("f.md:2", "sh"));
    assert_eq!(b[0].text, "echo 1\n");
    assert_eq!(b[1].skip.as_deref(), Some("needs a GPU"));
    assert!(blocks_in("f.md", "<!-- doc-test: skip -->\n```sh\nx\n```\n").is_err());
    assert_eq!(
        shown_output("$ a \\\n  b\nout put\n$ c\n{\"x\":…, \"y\": 2}\n"),
        ["output", "{\"x\":", ",\"y\":2}"]
    );
    assert_eq!(
        shell_script("$ a \\\n  b\nout\n$ c\n"),
        "a \\\n  b\nc\n",
        "a session's commands, not its output"
    );
}
