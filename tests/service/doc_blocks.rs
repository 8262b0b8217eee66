//! Every fenced code block of README.md and docs/*.md runs as written, read
//! from the Markdown itself, so a new example is tested the day it is
//! written and a doc example that fails is a failing test.
//!
//! How a block runs, by the word after its fence:
//! - `sh`, `bash`, `shell`, `console`: `bash -euo pipefail`. A block with
//!   lines that start with `$ ` is a terminal session: only those lines
//!   (and their `\` continuations) run, and each other line is output
//!   it must print (on stdout or stderr; whitespace aside, and `…` standing
//!   for what varies).
//!   `wmreplay serve …` runs in the background (a shell function of the
//!   harness), replacing the block's previous server; the block goes on
//!   once it answers on 127.0.0.1:8787, and it is stopped when the block
//!   ends. `curl` fails on an HTTP error status (`--fail-with-body`): a
//!   documented request that is refused is a failing example.
//! - `python`, `py`: a script, run by target/sdk-clients/venv/bin/python
//!   (the `anthropic`, `openai`, `mcp` SDKs).
//! - `js`, `javascript`, `mjs`, `cjs`, `ts`, `typescript`: a Node.js
//!   script, an ES module if it has an `import`/`export` line or is `ts`
//!   or `mjs`, CommonJS otherwise, with target/sdk-clients/node's packages
//!   as its `node_modules`.
//! - `json`: an MCP client's configuration (`mcpServers` or `servers`) has
//!   each stdio server's command (by its file name, `wmreplay` or `npx`)
//!   checked, and `wmreplay`'s run with its args: it must answer an MCP
//!   `initialize`; each HTTP server's URL must answer one, posted with the
//!   configuration's headers (their `${…}` and `YOUR-TOKEN` made the
//!   token of a `wmreplay serve --mcp --auth-token-env` the harness
//!   starts). Any other `json` block must parse, as one value
//!   or as JSON Lines.
//! - `toml`: must parse (Python's `tomllib`).
//! - no word, `text`: pictures and output, not run. Any other word needs a
//!   marker.
//!
//! Each block runs in a fresh folder holding `wm.log` and
//! `examples/working_memory.log` (both copies of the example log), with
//! `HOME` set to it (so `~/…` paths land there), this build's `wmreplay`
//! first on `PATH`, `ANTHROPIC_API_KEY` and `OPENAI_API_KEY` set to a
//! placeholder, and no `WMREPLAY_*` variable. The providers' URLs in the
//! block (`https://api.anthropic.com`, `https://api.openai.com`, and
//! Ollama's `http://localhost:11434` for embeddings) are replaced by the
//! mock upstream's (tests/mock). A block other than a shell block that
//! starts its own server, which names port 8787, gets a server from the
//! harness: `wmreplay serve --log wm.log --mcp --upstream MOCK --model M`,
//! of the OpenAI provider if the block names `:8787/openai/` and not
//! `:8787/anthropic`, Anthropic's otherwise; a Python or Node.js block that talks to it must reach the
//! model. The port is fixed, so the blocks run one after the other.
//!
//! A block that cannot run has `<!-- doc-test: skip (reason) -->` on the
//! line just before its fence; the reason is required. A skipped Python or
//! Node.js block is still compiled (`compile()` allowing top-level await,
//! `node --check`). One whose reason says it is run by
//! `.ci/python-package.sh` or `.ci/node-package.sh` is run there, as
//! written, with the package the script installs
//! (`.ci/doc-package-blocks.py`).
//!
//! Ignored without the SDKs: `bash .ci/sdk-clients.sh`, then
//! `cargo test --test service -- --ignored doc_blocks::` (CI does both).

use crate::mock;

mod markdown;

use markdown::{Block, Kind, blocks_in, kind_of, node_file, shell_script, shown_output, squeeze};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mock::*;
use serde_json::Value;
use wmreplay::server::Provider;

/// The shell functions every shell block runs with: `wmreplay serve` in
/// the background.
const PRELUDE: &str = r#"
WMR_SERVER=
wmr_stop() {
  if [ -n "$WMR_SERVER" ]; then
    kill "$WMR_SERVER" 2>/dev/null || true
    wait "$WMR_SERVER" 2>/dev/null || true
    WMR_SERVER=
  fi
}
trap wmr_stop EXIT
curl() { command curl --fail-with-body "$@"; }
wmreplay() {
  if [ "${1-}" != serve ]; then
    command wmreplay "$@"
    return
  fi
  wmr_stop
  command wmreplay "$@" </dev/null >>serve.out 2>&1 &
  WMR_SERVER=$!
  for _ in $(seq 1 400); do
    if curl -s -o /dev/null 127.0.0.1:8787/healthz; then return 0; fi
    if ! kill -0 "$WMR_SERVER" 2>/dev/null; then
      echo "doc-test: wmreplay serve $* exited:" >&2; cat serve.out >&2; return 1
    fi
    sleep 0.05
  done
  echo "doc-test: wmreplay serve $* did not answer on 127.0.0.1:8787" >&2
  return 1
}
"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn clients() -> PathBuf {
    root().join("target/sdk-clients")
}

fn python() -> PathBuf {
    clients().join("venv/bin/python")
}

/// Where a block runs, and what it talks to.
struct World {
    anthropic: (String, Mock),
    openai: (String, Mock),
    path: String,
}

impl World {
    fn requests(&self) -> usize {
        self.anthropic.1.requests() + self.openai.1.requests()
    }

    /// The block's text with the providers' URLs replaced by the mocks'.
    fn localise(&self, text: &str) -> String {
        text.replace("https://api.anthropic.com", &self.anthropic.0)
            .replace("https://api.openai.com", &self.openai.0)
            .replace("http://localhost:11434", &self.openai.0)
    }

    /// A fresh folder with the example log as `wm.log` and at its own path.
    fn folder(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let example = root().join("examples/working_memory.log");
        std::fs::copy(&example, dir.path().join("wm.log")).unwrap();
        std::fs::create_dir(dir.path().join("examples")).unwrap();
        std::fs::copy(&example, dir.path().join("examples/working_memory.log")).unwrap();
        std::os::unix::fs::symlink(
            clients().join("node/node_modules"),
            dir.path().join("node_modules"),
        )
        .unwrap();
        dir
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("WMREPLAY_") {
                c.env_remove(k);
            }
        }
        c.current_dir(dir)
            .env("PATH", &self.path)
            .env("HOME", dir)
            .env("ANTHROPIC_API_KEY", "sk-doc-blocks")
            .env("OPENAI_API_KEY", "sk-doc-blocks")
            .stdin(Stdio::null());
        c
    }

    /// `wmreplay serve` on 127.0.0.1:8787 in front of the mock, until the
    /// returned guard is dropped.
    fn serve(&self, dir: &Path, text: &str, token: Option<&str>) -> Result<Server, String> {
        let openai = !text.contains(":8787/anthropic") && text.contains(":8787/openai/");
        let (upstream, provider, model) = if openai {
            (&self.openai.0, "openai", "gpt-5.5")
        } else {
            (&self.anthropic.0, "anthropic", "claude-sonnet-5-5")
        };
        let out = std::fs::File::create(dir.join("serve.out")).unwrap();
        let mut c = self.command("wmreplay", dir);
        c.args(["serve", "--log", "wm.log", "--mcp", "--upstream", upstream])
            .args(["--provider", provider, "--model", model]);
        if let Some(token) = token {
            c.env("DOC_BLOCKS_TOKEN", token)
                .args(["--auth-token-env", "DOC_BLOCKS_TOKEN"]);
        }
        let child = c
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut server = Server(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect("127.0.0.1:8787").is_err() {
            if Instant::now() > deadline || server.0.try_wait().unwrap().is_some() {
                server.stop();
                let said = std::fs::read_to_string(dir.join("serve.out")).unwrap_or_default();
                return Err(format!("the harness's server did not start: {said}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }
}

struct Server(std::process::Child);

impl Server {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `c` (in a process group of its own, killed whole after `limit`);
/// an error naming its status and the tails of its output.
fn run(mut c: Command, dir: &Path, limit: Duration) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let (out_path, err_path) = (dir.join(".stdout"), dir.join(".stderr"));
    c.stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0);
    let mut child = c.spawn().map_err(|e| format!("{c:?}: {e}"))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.is_some_and(|s| s.success()) {
        return Ok(());
    }
    let tail = |p: &Path| {
        let s = std::fs::read_to_string(p).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    };
    Err(format!(
        "{}\n--- stdout (tail)\n{}\n--- stderr (tail)\n{}",
        match status {
            Some(s) => format!("exited with {s}"),
            None => format!("still running after {limit:?}: killed"),
        },
        tail(&out_path),
        tail(&err_path)
    ))
}

const LIMIT: Duration = Duration::from_secs(90);

/// A skipped block's syntax, where a checker is at hand.
fn compile_only(w: &World, b: &Block, dir: &Path) -> Result<(), String> {
    match kind_of(&b.lang) {
        Some(Kind::Python) => {
            std::fs::write(dir.join("block.py"), &b.text).unwrap();
            let mut c = w.command(python(), dir);
            c.args([
                "-c",
                "import ast, sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec', \
                 flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)",
                "block.py",
            ]);
            run(c, dir, LIMIT)
        }
        Some(Kind::Node) => {
            let file = node_file(&b.lang, &b.text);
            std::fs::write(dir.join(file), &b.text).unwrap();
            let mut c = w.command("node", dir);
            c.args(["--check", file]);
            run(c, dir, LIMIT)
        }
        _ => Ok(()),
    }
}

/// Runs one block; `Err` says why it failed.
fn run_block(w: &World, b: &Block) -> Result<(), String> {
    let dir = w.folder();
    let dir = dir.path();
    if b.skip.is_some() {
        return compile_only(w, b, dir);
    }
    let kind = kind_of(&b.lang)
        .ok_or_else(|| format!("no runner for `{}`: mark it skip, with why", b.lang))?;
    let text = w.localise(&b.text);
    let serves = text.contains(":8787")
        && !(kind == Kind::Shell && text.contains("wmreplay serve"))
        && matches!(kind, Kind::Shell | Kind::Python | Kind::Node);
    let _server = if serves {
        Some(w.serve(dir, &text, None)?)
    } else {
        None
    };
    let before = w.requests();
    match kind {
        Kind::Prose => return Ok(()),
        Kind::Shell => {
            std::fs::write(
                dir.join("block.sh"),
                format!("{PRELUDE}\n{}", shell_script(&text)),
            )
            .unwrap();
            let mut c = w.command("bash", dir);
            c.args(["-euo", "pipefail", "block.sh"]);
            run(c, dir, LIMIT)?;
            let printed = ["stdout", "stderr"]
                .map(|f| std::fs::read_to_string(dir.join(format!(".{f}"))).unwrap_or_default())
                .concat();
            let printed = squeeze(&printed);
            let tail = printed
                .char_indices()
                .rev()
                .nth(1500)
                .map_or(&printed[..], |(at, _)| &printed[at..]);
            for shown in shown_output(&text) {
                if !printed.contains(&shown) {
                    return Err(format!(
                        "the session shows `{shown}`, which it did not print (whitespace \
                         aside; its tail):\n{tail}"
                    ));
                }
            }
        }
        Kind::Python => {
            std::fs::write(dir.join("block.py"), &text).unwrap();
            let mut c = w.command(python(), dir);
            c.arg("block.py");
            run(c, dir, LIMIT)?;
        }
        Kind::Node => {
            let file = node_file(&b.lang, &text);
            std::fs::write(dir.join(file), &text).unwrap();
            let mut c = w.command("node", dir);
            c.arg(file);
            run(c, dir, LIMIT)?;
        }
        Kind::Json => return check_json(w, dir, &text),
        Kind::Toml => {
            std::fs::write(dir.join("block.toml"), &text).unwrap();
            let mut c = w.command(python(), dir);
            c.args([
                "-c",
                "import sys, tomllib; tomllib.load(open(sys.argv[1], 'rb'))",
                "block.toml",
            ]);
            return run(c, dir, LIMIT);
        }
    }
    if serves && matches!(kind, Kind::Python | Kind::Node) && w.requests() == before {
        return Err("it talked to the server, but the model was never called".into());
    }
    Ok(())
}

/// A JSON block: an MCP client's configuration, checked and its stdio
/// `wmreplay` server run; any other, parsed.
fn check_json(w: &World, dir: &Path, text: &str) -> Result<(), String> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                serde_json::from_str::<Value>(line).map_err(|e2| {
                    format!("not JSON ({e}), nor JSON Lines (line {}: {e2})", n + 1)
                })?;
            }
            return Ok(());
        }
    };
    let Some(servers) = value
        .get("mcpServers")
        .or_else(|| value.get("servers"))
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    let mut server = None;
    for (name, s) in servers {
        if let Some(url) = s.get("url").and_then(Value::as_str) {
            if server.is_none() {
                server = Some(w.serve(dir, "", Some(TOKEN))?);
            }
            mcp_over_http(w, dir, name, url, &s["headers"])?;
            continue;
        }
        let command = s["command"]
            .as_str()
            .ok_or_else(|| format!("{name}: neither `url` nor `command`"))?;
        let args: Vec<String> = s["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| x.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        match Path::new(command).file_name().and_then(|f| f.to_str()) {
            Some("wmreplay") => mcp_answers(w, dir, name, &args)?,
            Some("npx") if args.first().map(String::as_str) == Some("mcp-remote") => {
                // mcp-remote (from npm) bridges stdio to the HTTP route.
                let url = args.get(1).map(String::as_str).unwrap_or("");
                if url != "http://127.0.0.1:8787/mcp" {
                    return Err(format!("{name}: mcp-remote's URL {url}"));
                }
            }
            _ => return Err(format!("{name}: an unknown command {command}")),
        }
    }
    Ok(())
}

/// The token of the harness's server for MCP over HTTP: the
/// configurations' placeholders (`${…}`, `YOUR-TOKEN`) stand for it.
const TOKEN: &str = "doc-blocks-token";

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"doc-blocks","version":"1"}}}"#;

/// An MCP `initialize` posted to `url` with the configuration's headers
/// (placeholders made the token) is answered.
fn mcp_over_http(
    w: &World,
    dir: &Path,
    name: &str,
    url: &str,
    headers: &Value,
) -> Result<(), String> {
    let mut c = w.command("curl", dir);
    c.args([
        "-sS",
        "--fail-with-body",
        "-X",
        "POST",
        url,
        "-d",
        INITIALIZE,
    ])
    .args(["-H", "content-type: application/json"])
    .args(["-H", "accept: application/json, text/event-stream"]);
    for (k, v) in headers.as_object().into_iter().flatten() {
        let mut v = v.as_str().unwrap_or("").replace("YOUR-TOKEN", TOKEN);
        while let Some(at) = v.find("${") {
            let end = v[at..].find('}').map_or(v.len(), |e| at + e + 1);
            v.replace_range(at..end, TOKEN);
        }
        c.args(["-H", &format!("{k}: {v}")]);
    }
    let out = c.output().map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !body.contains("serverInfo") {
        return Err(format!(
            "{name}: {url} did not answer initialize ({}): {body}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// `wmreplay ARGS` (the configuration's, `${…}` folders made this folder)
/// answers an MCP `initialize` on stdio, and exits 0 at the end of input.
fn mcp_answers(w: &World, dir: &Path, name: &str, args: &[String]) -> Result<(), String> {
    use std::io::{BufRead, Write};
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("${workspaceFolder}", &dir.display().to_string()))
        .collect();
    let mut child = w
        .command("wmreplay", dir)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INITIALIZE}").map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let answer: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    if answer["result"]["serverInfo"].is_null() || !out.status.success() {
        return Err(format!(
            "{name}: `wmreplay {}` did not answer initialize ({}): {line}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    let mut more: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

#[test]
#[ignore = "needs the SDKs: bash .ci/sdk-clients.sh"]
fn every_code_block_of_the_docs_runs_as_written() {
    assert!(
        python().exists(),
        "{} is missing: run bash .ci/sdk-clients.sh",
        python().display()
    );
    assert!(
        std::net::TcpStream::connect("127.0.0.1:8787").is_err(),
        "something already listens on 127.0.0.1:8787, the port the docs' examples use"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_wmreplay")).parent().unwrap();
    let world = World {
        anthropic: rt.block_on(start_mock(Provider::Anthropic, Mode::Ok)),
        openai: rt.block_on(start_mock(Provider::OpenAi, Mode::Ok)),
        path: format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    };
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for doc in documents() {
        let text = std::fs::read_to_string(root().join(&doc)).unwrap();
        let blocks = match blocks_in(&doc, &text) {
            Ok(b) => b,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        for b in blocks {
            match &b.skip {
                Some(why) => {
                    skipped += 1;
                    eprintln!("skip {} ({}): {why}", b.place, b.lang);
                }
                None if kind_of(&b.lang) == Some(Kind::Prose) => continue,
                None => {
                    ran += 1;
                    eprintln!("run  {} ({})", b.place, b.lang);
                }
            }
            if let Err(e) = run_block(&world, &b) {
                failures.push(format!(
                    "{} ({}): {e}\n--- the block\n{}",
                    b.place, b.lang, b.text
                ));
            }
        }
    }
    eprintln!("{ran} blocks ran, {skipped} skipped");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 30, "only {ran} blocks ran");
}
