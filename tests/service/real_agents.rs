//! The agents people run, pointed at `wmreplay serve` with the mock model
//! behind it: Claude Code (`claude -p`) and Codex (`codex exec`), installed
//! from npm by `.ci/agent-clients.sh` into `target/agent-clients`. Each test
//! runs the real client headless, as its users do, then checks what the
//! log holds: each message once, nothing missing, no instruction or side
//! request written.
//!
//! Ignored without the clients: `bash .ci/agent-clients.sh`, then
//! `cargo test --test service -- --ignored real_agents::` (CI does both).

use crate::mock;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mock::*;
use serde_json::Value;
use wmreplay::server::Provider;

fn bin(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/agent-clients/node/node_modules/.bin")
        .join(name)
}

/// Runs `program args…` in `cwd` with `env` (and `PATH`), to its end
/// within two minutes; its stdout, checked to have succeeded.
async fn run(
    program: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    env: Vec<(String, String)>,
) -> String {
    let out = tokio::task::spawn_blocking(move || {
        let mut c = Command::new(&program);
        c.args(&args).current_dir(&cwd).env_clear();
        c.env("PATH", std::env::var("PATH").unwrap_or_default());
        c.envs(env);
        let child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e} (run .ci/agent-clients.sh)", program.display()));
        let id = child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(120));
            let _ = Command::new("kill").arg("-9").arg(id.to_string()).status();
        });
        let out = child.wait_with_output().unwrap();
        drop(killer);
        out
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "the agent failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The log's records after the example: `(type, text or id)`.
fn records(log: &Path) -> Vec<(String, String, Value)> {
    let all = std::fs::read(log).unwrap();
    String::from_utf8_lossy(&all[example_bytes().len()..])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("appended lines parse"))
        .map(|r| {
            let what = r["text"].as_str().or(r["id"].as_str()).unwrap_or("");
            (
                r["type"].as_str().unwrap_or("").to_string(),
                what.to_string(),
                r,
            )
        })
        .collect()
}

/// No record of a conversation twice: each input, output, call and result
/// of a session once.
fn each_once(log: &Path) {
    let recs = records(log);
    for (i, (k, w, r)) in recs.iter().enumerate() {
        if k == "text_output" && w.is_empty() {
            continue;
        }
        let again = recs[i + 1..]
            .iter()
            .any(|(k2, w2, r2)| k2 == k && w2 == w && r2["session_id"] == r["session_id"]);
        assert!(!again, "written twice: {k} {w:?}\n{recs:#?}");
    }
}

/// The checks of a long session with `asked` and fifteen `turn N`s, a
/// round of `tool` every third: each input once (the user's words: after
/// any reminder a client puts first), each record of a session once, six
/// calls and their results. The number of inputs.
fn long_session(log: &Path, asked: &[&str], tool: &str) -> usize {
    let recs = records(log);
    let inputs: Vec<&str> = recs
        .iter()
        .filter(|r| r.0 == "text_input")
        .map(|r| r.1.as_str())
        .collect();
    let words = |t: &str| {
        let w = t
            .rsplit("</system-reminder>")
            .next()
            .unwrap_or("")
            .trim_start();
        w.lines().next().unwrap_or("").to_string()
    };
    let turns: Vec<String> = (0..15).map(|i| format!("turn {i}")).collect();
    for want in asked
        .iter()
        .copied()
        .chain(turns.iter().map(String::as_str))
    {
        let n = inputs
            .iter()
            .map(|t| words(t))
            .filter(|w| w == want || w.starts_with(&format!("{want}:")))
            .count();
        assert_eq!(n, 1, "{want:?} in {inputs:#?}");
    }
    each_once(log);
    let calls: Vec<_> = recs.iter().filter(|r| r.0 == "tool_call").collect();
    assert_eq!(calls.len(), 6, "{recs:#?}");
    assert!(calls.iter().all(|c| c.2["name"] == tool));
    let results: Vec<_> = recs.iter().filter(|r| r.0 == "tool_result").collect();
    assert_eq!(results.len(), 6);
    assert!(
        results
            .iter()
            .all(|r| r.2["content"].as_str().unwrap().contains("4242"))
    );
    inputs.len()
}

/// A server of `provider` on a fresh log with the mock behind it (no
/// retries of its own, so a client's are its own), and an agent's home and
/// project, the project holding `notes.txt`.
struct Agent {
    dir: tempfile::TempDir,
    log: PathBuf,
    mock: Mock,
    server: Running,
    home: PathBuf,
    cwd: PathBuf,
    notes: PathBuf,
}

impl Agent {
    async fn start(provider: Provider) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let log = example_log(dir.path());
        let (url, mock) = start_mock(provider, Mode::Ok).await;
        let mut cfg = config(&log, Some(&url), provider);
        cfg.upstream_retries = 0;
        let server = start(cfg).await;
        let home = dir.path().join("home");
        let cwd = dir.path().join("project");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&cwd).unwrap();
        let notes = cwd.join("notes.txt");
        std::fs::write(&notes, "the secret number is 4242\n").unwrap();
        Agent {
            dir,
            log,
            mock,
            server,
            home,
            cwd,
            notes,
        }
    }
}

/// Claude Code with its default tools: a plain turn, a tool round (its
/// own Read tool), `--continue`, a second process that sees the first
/// conversation, and a 529 it retries by itself: one turn each, every
/// message once, its instructions never written.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the agents: bash .ci/agent-clients.sh"]
async fn claude_code_through_the_anthropic_door() {
    let Agent {
        dir: _dir,
        log,
        mock,
        server,
        home,
        cwd,
        notes,
    } = Agent::start(Provider::Anthropic).await;
    let env = vec![
        ("HOME".to_string(), home.display().to_string()),
        (
            "ANTHROPIC_BASE_URL".into(),
            format!("{}/anthropic", server.url),
        ),
        ("ANTHROPIC_API_KEY".into(), "sk-test-agent".into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
    ];
    let claude = |args: &[&str]| {
        run(
            bin("claude"),
            args.iter().map(|a| a.to_string()).collect(),
            cwd.clone(),
            env.clone(),
        )
    };
    // A plain turn.
    let out = claude(&["-p", "plain question"]).await;
    assert!(out.contains("answer to"), "{out}");
    // A tool round: the model calls Claude Code's Read, which runs it.
    let read = format!(
        "read my notes\nTOOLS: [[{{\"name\":\"Read\",\"input\":{{\"file_path\":\"{}\"}}}}]]",
        notes.display()
    );
    let out = claude(&["-p", &read]).await;
    assert!(
        out.contains("4242"),
        "the tool's result reached the model: {out}"
    );
    // The same conversation, continued.
    let out = claude(&["-p", "--continue", "follow-up"]).await;
    assert!(out.contains("answer to"), "{out}");
    // A second process: a new session that sees the first conversation.
    claude(&["-p", "what did I ask before?"]).await;
    let sent = mock
        .bodies()
        .into_iter()
        .rev()
        .find(|b| current_text_of(b).is_some_and(|t| t.ends_with("what did I ask before?")))
        .expect("the second process's request")
        .to_string();
    assert!(
        sent.contains("plain question") && sent.contains("4242"),
        "the log replayed"
    );
    // A 529, retried by Claude Code itself: one turn.
    let calls = mock.requests();
    claude(&["-p", "flaky\nMOCK_FAIL_ONCE: 529"]).await;
    assert_eq!(mock.requests(), calls + 2, "the failed call and its retry");
    // A long conversation: fifteen more turns, a tool round every third.
    for i in 0..15 {
        let ask = match i % 3 {
            0 => format!(
                "turn {i}: read again\nTOOLS: [{{\"calls\":[{{\"name\":\"Read\",\"input\":{{\"file_path\":\"{}\"}}}}],\"text\":\"Reading, turn {i}.\"}}]",
                notes.display()
            ),
            _ => format!("turn {i}"),
        };
        claude(&["-p", "--continue", &ask]).await;
    }

    let recs = records(&log);
    let inputs = long_session(
        &log,
        &[
            "plain question",
            "read my notes",
            "follow-up",
            "what did I ask before?",
            "flaky",
        ],
        "Read",
    );
    assert_eq!(inputs, 20);
    // Its instructions (the environment, reminders) are not conversation.
    let raw = std::fs::read_to_string(&log).unwrap();
    assert!(
        !raw.contains("Primary working directory"),
        "an instruction written"
    );
    assert!(!raw.contains("sk-test-agent"));
    // Every record of the conversation names Claude Code's session.
    assert!(
        recs.iter().all(|r| r.2["session_id"].is_string()),
        "{recs:#?}"
    );
    server.stop().await;
}

/// Codex (`codex exec`) through the Responses door, with its own tools and
/// sandbox off: a plain turn, a shell round (its `exec_command`), `exec
/// resume --last`, and a second process that sees the first conversation;
/// every message once, its instructions never written.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the agents: bash .ci/agent-clients.sh"]
async fn codex_through_the_responses_door() {
    let Agent {
        dir: _dir,
        log,
        mock,
        server,
        home,
        cwd,
        ..
    } = Agent::start(Provider::OpenAi).await;
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5.1-codex\"\nmodel_provider = \"wm\"\n\
             [model_providers.wm]\nname = \"wmreplay\"\nbase_url = \"{}/openai/v1\"\n\
             env_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
            server.url
        ),
    )
    .unwrap();
    let env = vec![
        ("HOME".to_string(), home.display().to_string()),
        ("CODEX_HOME".into(), home.display().to_string()),
        ("OPENAI_API_KEY".into(), "sk-test-agent".into()),
    ];
    let codex = |args: &[&str]| {
        let mut all = vec![
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ];
        all.extend_from_slice(args);
        run(
            bin("codex"),
            all.iter().map(|a| a.to_string()).collect(),
            cwd.clone(),
            env.clone(),
        )
    };
    let out = codex(&["plain question"]).await;
    assert!(out.contains("answer to"), "{out}");
    let shell = "look at my notes\nTOOLS: [[{\"name\":\"exec_command\",\"input\":{\"cmd\":\"cat notes.txt\"}}]]";
    let out = codex(&[shell]).await;
    assert!(
        out.contains("4242"),
        "the command's output reached the model: {out}"
    );
    let out = codex(&["resume", "--last", "follow-up"]).await;
    assert!(out.contains("answer to"), "{out}");
    codex(&["what did I ask before?"]).await;
    // A long conversation: fifteen more turns, a shell round every third.
    for i in 0..15 {
        let ask = match i % 3 {
            0 => format!("turn {i}: again\n{}", shell.lines().nth(1).unwrap()),
            _ => format!("turn {i}"),
        };
        codex(&["resume", "--last", &ask]).await;
    }
    let sent = mock
        .bodies()
        .into_iter()
        .rev()
        .find(|b| b.to_string().contains("user_text: what did I ask before?"))
        .expect("the second process's request")
        .to_string();
    assert!(
        sent.contains("plain question") && sent.contains("4242"),
        "the log replayed"
    );

    let recs = records(&log);
    long_session(
        &log,
        &[
            "plain question",
            "look at my notes",
            "follow-up",
            "what did I ask before?",
        ],
        "exec_command",
    );
    let raw = std::fs::read_to_string(&log).unwrap();
    assert!(
        !raw.contains("You are a coding agent"),
        "an instruction written"
    );
    assert!(!raw.contains("sk-test-agent"));
    assert!(
        recs.iter().all(|r| r.2["session_id"].is_string()),
        "{recs:#?}"
    );
    server.stop().await;
}

/// One framework's steps, each in a process of its own, against a server of
/// `provider` on a fresh log: a plain turn, a round of a function tool the
/// framework runs, a new process that sees both, and a 20-turn conversation
/// whose whole history goes with each turn (a tool round every fourth).
async fn framework(
    provider: Provider,
    program: PathBuf,
    args: &[&str],
    cwd: PathBuf,
    prefix: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (url, mock) = start_mock(provider, Mode::Ok).await;
    let mut cfg = config(&log, Some(&url), provider);
    cfg.upstream_retries = 0;
    let server = start(cfg).await;
    let mut seen = Vec::new();
    for step in ["plain", "tool", "recall", "long"] {
        let mut a: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        a.push(server.url.clone());
        a.push(step.into());
        let out = run(
            program.clone(),
            a,
            cwd.clone(),
            vec![("HOME".into(), dir.path().display().to_string())],
        )
        .await;
        let v: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{args:?} {step}: not JSON ({e}): {out}"));
        seen.push(v["final"].as_str().unwrap_or("").to_string());
    }
    let who = format!("{args:?}");
    assert!(seen[0].contains("answer to"), "{who}: {seen:?}");
    assert!(
        seen[1].contains("Rainy in Oslo"),
        "{who}: the tool's result: {seen:?}"
    );
    let recall = mock
        .bodies()
        .into_iter()
        .rev()
        .find(|b| b.to_string().contains("what did I ask before?"))
        .unwrap()
        .to_string();
    assert!(
        recall.contains("plain question") && recall.contains("Rainy in Oslo"),
        "{who}: replayed"
    );
    let recs = records(&log);
    let inputs: Vec<&str> = recs
        .iter()
        .filter(|r| r.0 == "text_input")
        .map(|r| r.1.as_str())
        .collect();
    // Three steps and twenty turns: each input once, nothing else.
    assert_eq!(inputs.len(), 23, "{who}: {inputs:#?}");
    assert!(
        inputs[0].ends_with(&format!("{prefix}plain question")),
        "{who}: {inputs:#?}"
    );
    for i in 0..20 {
        let turn = format!("{prefix}long turn {i}");
        let n = inputs
            .iter()
            .filter(|t| {
                t.lines()
                    .next()
                    .is_some_and(|l| l == turn || l.starts_with(&format!("{turn}:")))
            })
            .count();
        assert_eq!(n, 1, "{who}: {turn:?} in {inputs:#?}");
    }
    each_once(&log);
    let calls: Vec<_> = recs.iter().filter(|r| r.0 == "tool_call").collect();
    assert_eq!(calls.len(), 6, "{who}: {recs:#?}");
    assert!(calls.iter().all(|c| c.2["name"] == "get_weather"));
    let results: Vec<_> = recs.iter().filter(|r| r.0 == "tool_result").collect();
    assert_eq!(results.len(), 6, "{who}: {recs:#?}");
    assert!(results.iter().all(|r| r.2["content"] == "Rainy in Oslo"));
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains("Answer briefly."),
        "{who}: instructions written"
    );
    server.stop().await;
}

/// The OpenAI Agents SDK (Python and TypeScript) with its default model
/// class, the Responses API; LangChain's `ChatOpenAI` in Responses mode and
/// `ChatAnthropic`, each with `base_url` pointed at the server.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the agents: bash .ci/agent-clients.sh"]
async fn the_agents_sdks_and_langchain_through_the_doors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clients = root.join("target/agent-clients");
    let python = clients.join("venv/bin/python");
    let script = root
        .join("tests/sdk/agent_frameworks.py")
        .display()
        .to_string();
    for (provider, which) in [
        (Provider::OpenAi, "agents"),
        (Provider::OpenAi, "langchain-openai"),
        (Provider::Anthropic, "langchain-anthropic"),
    ] {
        framework(
            provider,
            python.clone(),
            &[&script, which],
            root.to_path_buf(),
            "",
        )
        .await;
    }
    // The TypeScript SDK resolves its packages beside the script.
    let node_dir = clients.join("node");
    std::fs::copy(
        root.join("tests/sdk/agents_node.mjs"),
        node_dir.join("agents_node.mjs"),
    )
    .unwrap();
    framework(
        Provider::OpenAi,
        PathBuf::from("node"),
        &["agents_node.mjs"],
        node_dir,
        "node ",
    )
    .await;
}
