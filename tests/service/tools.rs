//! Tools the server offers the model and runs itself, through the mock
//! upstream in each provider's protocol, streamed and not: `search_memory`
//! (`--recall-tool`), the memory tool (`--memory-tool`), the round limit
//! (`--max-tool-rounds`), and what the log keeps of them.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};
use wmreplay::server::Provider;

use crate::mock;

/// A log whose oldest record holds the invoice number, followed by 20
/// ordinary records (a `--tail` window never reaches it).
fn log_with_invoice(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    writeln!(
        f,
        r#"{{"type":"wm_insight","ts_ms":1000,"text":"the Lisbon invoice is INV-4471, due in March"}}"#
    )
    .unwrap();
    for i in 0..20 {
        writeln!(
            f,
            r#"{{"type":"wm_event","ts_ms":{},"text":"routine event {i}"}}"#,
            2000 + i
        )
        .unwrap();
    }
}

/// The records appended after the log's first 21 lines.
fn appended(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(21)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The events of an SSE body: (name, data).
fn events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = String::new();
            for l in e.lines() {
                if let Some(n) = l.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = l.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, serde_json::from_str(&data).unwrap_or(Value::Null))
        })
        .collect()
}

async fn recall_tool_turn(provider: Provider, stream: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    log_with_invoice(&log);
    let (upstream, m) = mock::start_mock(provider, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), provider);
    cfg.selection.tail = Some(8);
    cfg.tools.search_memory = true;
    let srv = mock::start(cfg).await;
    let text = "what is the invoice number?\nsearch_memory: Lisbon invoice";
    let (s, body) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": text, "session_id": "s1", "stream": stream}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let done = if stream {
        let ev = events(&body);
        let tool = ev.iter().find(|(n, _)| n == "tool").expect("a tool event");
        assert_eq!(tool.1["name"], "search_memory");
        assert_eq!(tool.1["input"]["query"], "Lisbon invoice");
        assert_eq!(tool.1["is_error"], false);
        ev.iter().find(|(n, _)| n == "done").unwrap().1.clone()
    } else {
        serde_json::from_str(&body).unwrap()
    };
    // The model was called twice: the second time with its call and the
    // result, in the provider's own shapes, and it quoted the result.
    let bodies = m.bodies();
    assert_eq!(bodies.len(), 2, "{:?}", m.rejected.lock().unwrap());
    assert!(m.rejected.lock().unwrap().is_empty());
    let first = &bodies[0];
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap()
        })
        .collect();
    assert_eq!(names, ["search_memory"]);
    let results = mock::tools::results(provider, &bodies[1]);
    assert_eq!(results.len(), 1);
    let found: Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(found["query"], "Lisbon invoice");
    let records = found["records"].as_array().unwrap();
    assert_eq!(records[0]["offset"], 0);
    assert!(
        records[0]["record"]["text"]
            .as_str()
            .unwrap()
            .contains("INV-4471")
    );
    // Nothing the request holds is found again: the window's records, and
    // the turn's own input.
    assert!(records.iter().all(|r| r["offset"] == 0), "{found}");
    let answer = done["text"].as_str().unwrap();
    assert!(answer.starts_with("Let me look."), "{answer}");
    assert!(answer.contains("TOOL RESULTS") && answer.contains("INV-4471"));
    assert_eq!(done["tool_calls"][0]["name"], "search_memory");
    assert_eq!(done["usage"]["output_tokens"], 12, "summed over both calls");

    // The log: input, the call, its result, the answer.
    let recs = appended(&log);
    let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text_input", "tool_call", "tool_result", "text_output"]
    );
    assert_eq!(recs[1]["name"], "search_memory");
    assert_eq!(recs[1]["session_id"], "s1");
    assert_eq!(recs[1]["input"], json!({"query": "Lisbon invoice"}));
    assert_eq!(recs[2]["id"], recs[1]["id"]);
    assert_eq!(recs[2]["is_error"], false);
    assert_eq!(recs[2]["content"].as_str().unwrap(), results[0]);
    assert_eq!(recs[3]["text"], answer);

    // The next turn replays the tool records; searching again finds the
    // old record, never the tool records (left out of the index).
    let (s, body) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": "again\nsearch_memory: Lisbon invoice INV"}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let bodies = m.bodies();
    assert_eq!(bodies.len(), 4);
    let texts = mock::message_texts(&bodies[2]);
    assert!(
        texts.iter().any(|t| t.starts_with("WM_KIND=tool_call")),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.starts_with("WM_KIND=tool_result")));
    let again: Value =
        serde_json::from_str(&mock::tools::results(provider, &bodies[3])[0]).unwrap();
    let kinds: Vec<&str> = again["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["record"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["wm_insight"], "{again}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_memory_anthropic() {
    recall_tool_turn(Provider::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_memory_anthropic_streamed() {
    recall_tool_turn(Provider::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_memory_openai() {
    recall_tool_turn(Provider::OpenAi, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_memory_openai_streamed() {
    recall_tool_turn(Provider::OpenAi, true).await;
}

/// The six memory commands over four rounds, and a path escape: the
/// results the model got, the files kept as `wm_fact` records, and a later
/// turn's replay showing them.
async fn memory_tool_turn(provider: Provider, stream: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let (upstream, m) = mock::start_mock(provider, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), provider);
    cfg.selection.facts = true;
    cfg.tools.memory = true;
    let srv = mock::start(cfg).await;
    let rounds = json!([
        [
            {"name": "memory", "input": {"command": "create", "path": "/memories/prefs.md", "file_text": "Tone: brief.\nPrices: net.\n"}},
            {"name": "memory", "input": {"command": "create", "path": "/memories/../secrets.md", "file_text": "x"}},
            {"name": "memory", "input": {"command": "view", "path": "/memories"}}
        ],
        [
            {"name": "memory", "input": {"command": "str_replace", "path": "/memories/prefs.md", "old_str": "net", "new_str": "with tax"}},
            {"name": "memory", "input": {"command": "insert", "path": "/memories/prefs.md", "insert_line": 0, "insert_text": "# Preferences"}}
        ],
        [
            {"name": "memory", "input": {"command": "view", "path": "/memories/prefs.md", "view_range": [2, -1]}},
            {"name": "memory", "input": {"command": "create", "path": "/memories/old/draft.md", "file_text": "draft"}},
            {"name": "memory", "input": {"command": "rename", "old_path": "/memories/prefs.md", "new_path": "/memories/user/prefs.md"}}
        ],
        [
            {"name": "memory", "input": {"command": "delete", "path": "/memories/old"}}
        ]
    ]);
    let text = format!("remember my preferences\nTOOLS: {rounds}");
    let (s, body) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": text, "stream": stream}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let bodies = m.bodies();
    assert!(
        m.rejected.lock().unwrap().is_empty(),
        "{:?}",
        m.rejected.lock().unwrap()
    );
    assert_eq!(bodies.len(), 5);
    if provider == Provider::Anthropic {
        assert_eq!(
            bodies[0]["tools"],
            json!([{"type": "memory_20250818", "name": "memory"}])
        );
        let seen = m.seen.lock().unwrap();
        assert!(
            seen[0].headers["anthropic-beta"]
                .to_str()
                .unwrap()
                .contains("context-management-2025-06-27")
        );
    } else {
        assert_eq!(bodies[0]["tools"][0]["function"]["name"], "memory");
    }
    // The last call offered no more rounds (the limit is 4).
    assert!(bodies[4]["tool_choice"] == "none" || bodies[4]["tool_choice"]["type"] == "none");
    let results = mock::tools::results(provider, &bodies[4]);
    assert_eq!(results.len(), 9, "{results:#?}");
    assert_eq!(
        results[0],
        "File created successfully at: /memories/prefs.md"
    );
    if provider == Provider::Anthropic {
        assert!(
            results[1].starts_with("ERROR Error: Invalid path /memories/../secrets.md"),
            "{}",
            results[1]
        );
    } else {
        assert!(
            results[1].starts_with("Error: Invalid path"),
            "{}",
            results[1]
        );
    }
    assert!(
        results[2].contains("\t/memories/prefs.md"),
        "{}",
        results[2]
    );
    assert!(results[3].starts_with("The memory file has been edited."));
    assert_eq!(results[4], "The file /memories/prefs.md has been edited.");
    assert_eq!(
        results[5],
        "Here's the content of /memories/prefs.md with line numbers:\n     2\tTone: brief.\n     3\tPrices: with tax."
    );
    assert_eq!(
        results[7],
        "Successfully renamed /memories/prefs.md to /memories/user/prefs.md"
    );
    assert_eq!(results[8], "Successfully deleted /memories/old");

    // The files are keyed memory: exactly one left, nothing outside.
    let facts = mock::get_json(&format!("{}/v1/facts", srv.url)).await;
    assert_eq!(
        facts["facts"],
        json!({"/memories/user/prefs.md": "# Preferences\nTone: brief.\nPrices: with tax.\n"})
    );
    let kinds: Vec<String> = mock::turns(&log, "tool_result")
        .iter()
        .map(|r| r["is_error"].to_string())
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "true").count(), 1);

    // A later turn's replay shows the files (in the facts message).
    let (s, _) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": "what do you remember?"}).to_string(),
    )
    .await;
    assert_eq!(s, 200);
    let last = m.bodies().pop().unwrap();
    let texts = mock::message_texts(&last);
    let facts_msg = &texts[texts.len() - 2];
    assert!(facts_msg.starts_with("WM_KIND=wm_facts"), "{facts_msg}");
    assert!(
        facts_msg.contains(
            r##""/memories/user/prefs.md":"# Preferences\nTone: brief.\nPrices: with tax.\n""##
        ),
        "{facts_msg}"
    );
    assert!(!facts_msg.contains("/memories/old"));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tool_anthropic() {
    memory_tool_turn(Provider::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tool_anthropic_streamed() {
    memory_tool_turn(Provider::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tool_openai_streamed() {
    memory_tool_turn(Provider::OpenAi, true).await;
}

/// Past `--max-tool-rounds`, the model is called once more without tools;
/// a client cannot add or choose tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rounds_are_bounded_and_tools_are_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    log_with_invoice(&log);
    let (upstream, m) = mock::start_mock(Provider::OpenAi, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::OpenAi);
    cfg.tools.search_memory = true;
    cfg.tools.max_rounds = 2;
    let srv = mock::start(cfg).await;
    let call = json!({"name": "search_memory", "input": {"query": "invoice"}});
    let text = format!("TOOLS: {}", json!([[call], [call], [call]]));
    let (s, body) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": text}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let bodies = m.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(bodies[..2].iter().all(|b| b.get("tool_choice").is_none()));
    assert_eq!(bodies[2]["tool_choice"], "none");
    let kinds: Vec<String> = appended(&log)
        .iter()
        .map(|r| r["type"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "text_input",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "text_output"
        ]
    );
    let done: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(done["stop_reason"], "stop");

    for params in [json!({"tools": []}), json!({"tool_choice": "auto"})] {
        let (s, body) = mock::post(
            &format!("{}/respond", srv.url),
            json!({"text": "hi", "params": params}).to_string(),
        )
        .await;
        assert_eq!(s, 400, "{body}");
        assert!(
            body.contains("invalid_params") && body.contains("its own tools"),
            "{body}"
        );
    }
    assert_eq!(m.requests(), 3);
    srv.stop().await;
}

/// The mock's tool rules refuse what the providers refuse, so the tests
/// above would catch a malformed continuation.
#[test]
fn the_mock_refuses_unanswered_or_unknown_tool_calls() {
    let headers = {
        let mut h = axum::http::HeaderMap::new();
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        h.insert("authorization", "Bearer k".parse().unwrap());
        h
    };
    let tools = json!([{"name": "search_memory", "input_schema": {"type": "object"}}]);
    let user = |c: Value| json!({"role": "user", "content": c});
    let use_block = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search_memory", "input": {}}]});
    let result = |id: &str| json!([{"type": "tool_result", "tool_use_id": id, "content": "x"}]);
    let req = |messages: Value| json!({"model": "m", "max_tokens": 5, "tools": tools, "messages": messages});
    let check = |v: Value| mock::strict::check(Provider::Anthropic, &v, &headers);
    assert!(
        check(req(json!([
            user(json!("q")),
            use_block,
            user(result("t1"))
        ])))
        .is_ok()
    );
    assert!(
        check(req(json!([
            user(json!("q")),
            use_block,
            user(result("t2"))
        ])))
        .is_err()
    );
    assert!(
        check(req(json!([
            user(json!("q")),
            use_block,
            user(json!("no result"))
        ])))
        .is_err()
    );
    assert!(check(req(json!([user(json!([{"type": "text", "text": ""}]))]))).is_err());
    let mut no_tools = req(json!([user(json!("q")), use_block, user(result("t1"))]));
    no_tools.as_object_mut().unwrap().remove("tools");
    assert!(check(no_tools).is_err());
    let memory = json!({"model": "m", "max_tokens": 5, "messages": [user(json!("q"))],
                        "tools": [{"type": "memory_20250818", "name": "memory"}]});
    assert!(check(memory).unwrap_err().contains("beta"));

    let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    let openai = |messages: Value| json!({"model": "m", "tools": [{"type": "function", "function": {"name": "f"}}], "messages": messages});
    let check = |v: Value| mock::strict::check(Provider::OpenAi, &v, &headers);
    let q = json!({"role": "user", "content": "q"});
    let answered = json!({"role": "tool", "tool_call_id": "c1", "content": "x"});
    assert!(check(openai(json!([q, call, answered]))).is_ok());
    assert!(check(openai(json!([q, call, q]))).is_err());
    assert!(check(openai(json!([q, answered]))).is_err());
}

/// The tool records repeat what was searched for and found: the index
/// leaves them out, so a search never finds its own earlier answers.
#[test]
fn the_index_leaves_tool_records_out() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    log_with_invoice(&log);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    writeln!(f, r#"{{"type":"tool_call","ts_ms":3000,"id":"t","name":"search_memory","input":{{"query":"Lisbon invoice"}}}}"#).unwrap();
    writeln!(f, r#"{{"type":"tool_result","ts_ms":3001,"id":"t","name":"search_memory","content":"the Lisbon invoice is INV-4471","is_error":false}}"#).unwrap();
    writeln!(
        f,
        r#"{{"type":"wm_event","ts_ms":3002,"text":"Lisbon invoice paid"}}"#
    )
    .unwrap();
    drop(f);
    let hits = wmreplay::search::search(&log, "Lisbon invoice", &Default::default()).unwrap();
    let kinds: Vec<&str> = hits.iter().map(|h| h.kind.as_str()).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(
        kinds.iter().all(|k| *k == "wm_insight" || *k == "wm_event"),
        "{kinds:?}"
    );
}
