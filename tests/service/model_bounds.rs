//! What the server writes on the model's behalf, and how tool rounds end:
//! each a case an adversarial run found broken (issue list in
//! docs/reliability.md, "The model's output and tool rounds").
//!
//! - stop reasons tool rounds obey as the providers' SDKs' runners do: a
//!   tool use in an answer that stopped for `refusal`,
//!   `model_context_window_exceeded` or `content_filter` is not run, and
//!   that stop reason is the turn's; `pause_turn` is continued; an OpenAI
//!   refusal is the answer's text; the rounds' texts are a blank line apart;
//!   the tool rounds' tail carries a cache breakpoint;
//! - memory-tool and `PUT /v1/facts` writes win over a record of their key
//!   stamped in the future;
//! - a refused command's input, a model's answer and a summary are held to
//!   `--max-record-bytes`;
//! - a fact that would not replay is refused.

use std::path::Path;

use serde_json::{Value, json};
use wmreplay::server::Provider;

use crate::mock;

/// The records of `log` from line `from` on.
fn records_from(log: &Path, from: usize) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .skip(from)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn lines(log: &Path) -> usize {
    std::fs::read_to_string(log).unwrap().lines().count()
}

/// The `done` answer of a turn's response (JSON, or the stream's last event).
fn done(body: &str, stream: bool) -> Value {
    if !stream {
        return serde_json::from_str(body).unwrap();
    }
    let last = body
        .split("\n\n")
        .filter(|e| e.starts_with("event: done"))
        .last()
        .unwrap_or_else(|| panic!("no done event in {body}"));
    serde_json::from_str(last.split_once("data: ").unwrap().1).unwrap()
}

/// A turn asking for `rounds` (see the mock's `TOOLS:`) with the memory
/// tool on: the answer, and the records it appended.
async fn turn(provider: Provider, stream: bool, rounds: Value) -> (Value, Vec<Value>, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let (upstream, m) = mock::start_mock(provider, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), provider);
    cfg.selection.facts = true;
    cfg.tools.memory = true;
    let srv = mock::start(cfg).await;
    let before = lines(&log);
    let text = format!("please\nTOOLS: {rounds}");
    let (s, body) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": text, "stream": stream}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(
        m.rejected.lock().unwrap().is_empty(),
        "{:?}",
        m.rejected.lock().unwrap()
    );
    let bodies = m.bodies();
    srv.stop().await;
    (done(&body, stream), records_from(&log, before), bodies)
}

fn create(path: &str) -> Value {
    json!({"name": "memory", "input": {"command": "create", "path": path, "file_text": "x"}})
}

/// A tool use in an answer stopped for another reason than to run tools is
/// not run (nothing written, no tool record), and that reason is the
/// turn's, in the answer and in the log. Before, the tool ran (a wm_fact was
/// written), the turn went on, and the reason was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_run_only_when_the_model_stopped_to_run_them() {
    for (provider, stop) in [
        (Provider::Anthropic, "refusal"),
        (Provider::Anthropic, "model_context_window_exceeded"),
        (Provider::Anthropic, "max_tokens"),
        (Provider::OpenAi, "content_filter"),
        (Provider::OpenAi, "length"),
    ] {
        for stream in [false, true] {
            let rounds =
                json!([{"stop": stop, "text": "Hm.", "calls": [create("/memories/a.md")]}]);
            let (answer, recs, bodies) = turn(provider, stream, rounds).await;
            let what = format!("{provider:?} {stop} stream {stream}");
            assert_eq!(bodies.len(), 1, "{what}: the model was called again");
            assert_eq!(answer["stop_reason"], stop, "{what}: {answer}");
            let kinds: Vec<&str> = recs.iter().map(|r| r["type"].as_str().unwrap()).collect();
            assert_eq!(kinds, ["text_input", "text_output"], "{what}");
            assert_eq!(recs[1]["stop_reason"], stop, "{what}");
            assert_eq!(recs[1]["text"], "Hm.", "{what}");
        }
    }
}

/// `pause_turn` is continued, the paused answer sent back as it came, and
/// the rounds' texts are a blank line apart ("Let me look.FINAL" before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_turn_is_continued_and_rounds_are_a_blank_line_apart() {
    for stream in [false, true] {
        let rounds = json!([
            {"stop": "pause_turn", "text": "Still searching."},
            [create("/memories/b.md")]
        ]);
        let (answer, recs, bodies) = turn(Provider::Anthropic, stream, rounds).await;
        assert_eq!(bodies.len(), 3, "stream {stream}");
        // The second call ends with the paused answer, as it came.
        let last = bodies[1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["role"], "assistant");
        assert_eq!(last["content"][0]["text"], "Still searching.");
        let text = answer["text"].as_str().unwrap();
        assert!(
            text.starts_with("Still searching.\n\nLet me look.\n\n"),
            "stream {stream}: {text:?}"
        );
        assert_eq!(answer["stop_reason"], "end_turn");
        assert_eq!(recs.last().unwrap()["text"], answer["text"]);
        assert!(recs.iter().any(|r| r["type"] == "wm_fact"));
    }
}

/// An OpenAI refusal (`message.refusal`, `delta.refusal`) is the answer's
/// text with the stop reason `refusal`, in the answer and in the log; it
/// was dropped (the answer and the log's text were "").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_refusal_is_answered_and_recorded() {
    for stream in [false, true] {
        let rounds = json!([{"stop": "stop", "text": "", "refusal": "I can't help with that."}]);
        let (answer, recs, _) = turn(Provider::OpenAi, stream, rounds).await;
        assert_eq!(answer["text"], "I can't help with that.", "stream {stream}");
        assert_eq!(answer["stop_reason"], "refusal");
        let out = recs.last().unwrap();
        assert_eq!(out["text"], "I can't help with that.");
        assert_eq!(out["stop_reason"], "refusal");
    }
}

/// The tool rounds' tail is cache-marked (Anthropic), within the
/// provider's four breakpoints: each round re-sent it uncached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_rounds_tail_is_cache_marked() {
    let rounds = json!([[create("/memories/c.md")], [create("/memories/d.md")]]);
    let (_, _, bodies) = turn(Provider::Anthropic, false, rounds).await;
    assert_eq!(bodies.len(), 3);
    for b in &bodies[1..] {
        let raw = b.to_string();
        assert!(raw.matches("cache_control").count() <= 4, "{raw}");
        let last = b["messages"].as_array().unwrap().last().unwrap();
        let blocks = last["content"].as_array().unwrap();
        assert_eq!(blocks.last().unwrap()["type"], "tool_result");
        assert!(
            blocks.last().unwrap().get("cache_control").is_some(),
            "the last tool result carries a breakpoint: {last}"
        );
        // Only the newest tail is marked.
        let marked_results = raw.matches("\"tool_use_id\"").count();
        assert!(marked_results >= 1);
    }
}

/// Memory written by the tool or `PUT /v1/facts` wins over a record of its
/// key stamped in the future (through `/v1/records`), and a command's
/// result describes what the log then holds. Before, `create` answered
/// "File overwritten" and `delete` "Successfully deleted", and the future
/// record's value stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_writes_win_over_records_stamped_in_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.selection.facts = true;
    cfg.tools.memory = true;
    let srv = mock::start(cfg).await;
    let facts_url = format!("{}/v1/facts", srv.url);
    let facts = || mock::get_json(&facts_url);
    for key in ["/memories/fut.md", "/memories/huge.md"] {
        let ts = if key.ends_with("huge.md") {
            "1e300"
        } else {
            "9999999999999"
        };
        let (s, b) = mock::post(
            &format!("{}/v1/records", srv.url),
            format!(r#"{{"type":"wm_fact","ts_ms":{ts},"key":"{key}","value":"old"}}"#),
        )
        .await;
        assert_eq!(s, 200, "{b}");
    }
    let rounds = json!([[
        {"name": "memory", "input": {"command": "create", "path": "/memories/fut.md", "file_text": "new"}},
        {"name": "memory", "input": {"command": "create", "path": "/memories/huge.md", "file_text": "new"}}
    ]]);
    let (s, b) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": format!("x\nTOOLS: {rounds}")}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let results = mock::tools::results(Provider::Anthropic, &m.bodies()[1]);
    assert_eq!(results[0], "File overwritten: /memories/fut.md");
    let f = facts().await;
    assert_eq!(f["facts"]["/memories/fut.md"], "new", "{f}");
    assert_eq!(f["facts"]["/memories/huge.md"], "new", "{f}");
    // Deleted: gone.
    let rounds =
        json!([[{"name": "memory", "input": {"command": "delete", "path": "/memories/fut.md"}}]]);
    let (s, _) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": format!("y\nTOOLS: {rounds}")}).to_string(),
    )
    .await;
    assert_eq!(s, 200);
    assert!(facts().await["facts"].get("/memories/fut.md").is_none());
    // PUT /v1/facts the same.
    mock::post(
        &format!("{}/v1/records", srv.url),
        r#"{"type":"wm_fact","ts_ms":9999999999999,"key":"plan","value":"old"}"#,
    )
    .await;
    let r = mock::client()
        .put(format!("{}/v1/facts/plan", srv.url))
        .body(r#""new""#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(facts().await["facts"]["plan"], "new");
    // The log's other records keep the time: the turn after is stamped now.
    let out = mock::turns(&log, "text_output");
    assert!(out.last().unwrap()["ts_ms"].as_f64().unwrap() < 9_000_000_000_000.0);
    srv.stop().await;
}

/// A command refused for its size leaves a bounded record: its input keeps
/// the command and the path, and names what was left out with its size.
/// Before, the whole 2 MiB input was appended (a line over the limit every
/// later request replayed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_commands_record_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let (upstream, m) = mock::start_mock(Provider::Anthropic, mock::Mode::Ok).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.tools.memory = true;
    cfg.max_record_bytes = 64 << 10;
    let srv = mock::start(cfg).await;
    let before = lines(&log);
    let big = "z".repeat(200 << 10);
    // (Written out by the mock: the user's own text is held to the limit.)
    let rounds = json!([[{"name": "memory", "input": {"command": "create", "path": "/memories/big.md", "file_text": format!("REPEAT:z:{}", big.len())}}]]);
    let (s, b) = mock::post(
        &format!("{}/respond", srv.url),
        json!({"text": format!("x\nTOOLS: {rounds}")}).to_string(),
    )
    .await;
    assert_eq!(s, 200, "{b}");
    let recs = records_from(&log, before);
    let call = recs.iter().find(|r| r["type"] == "tool_call").unwrap();
    assert_eq!(call["input"]["command"], "create");
    assert_eq!(call["input"]["path"], "/memories/big.md");
    assert_eq!(call["input"]["left_out"]["file_text"], big.len() + 2);
    for line in std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .skip(before + 1)
    {
        assert!(line.len() <= 64 << 10, "a line of {} bytes", line.len());
    }
    let result = recs.iter().find(|r| r["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], true);
    // The next request does not replay the input: the tool call's record
    // names what it left out.
    mock::post(&format!("{}/respond", srv.url), r#"{"text":"and now?"}"#).await;
    let last = m.bodies().pop().unwrap();
    assert_eq!(last.to_string().matches(&big).count(), 0);
    assert!(last.to_string().contains("left_out"));
    srv.stop().await;
}

/// A model's answer longer than a record may be is cut in the log (the
/// record says `text_cut` with the whole length; the client gets it
/// whole); before, a 3 MiB answer was appended as is. Streamed, the
/// client (slower than the mock) may be let go past 256 KiB unread: the
/// turn goes on and the log is checked alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_held_to_a_records_limit() {
    for stream in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let log = mock::example_log(dir.path());
        let (upstream, _m) = mock::start_mock(Provider::Anthropic, mock::Mode::Big(3 << 10)).await;
        let cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
        let srv = mock::start(cfg).await;
        let sent = mock::client()
            .post(format!("{}/respond", srv.url))
            .body(json!({"text": "tell me everything", "stream": stream}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(sent.status(), 200);
        let body = sent.text().await;
        let mut rec = Value::Null;
        for _ in 0..200 {
            let text = std::fs::read_to_string(&log).unwrap();
            let last = text.lines().last().unwrap();
            assert!(last.len() <= 1 << 20, "a line of {} bytes", last.len());
            rec = serde_json::from_str(last).unwrap();
            if rec["type"] == "text_output" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(rec["type"], "text_output");
        let whole = rec["text_cut"]["bytes"].as_u64().unwrap() as usize;
        assert!(whole > 3 << 20);
        if !stream {
            let answer = done(&body.unwrap(), false);
            assert_eq!(
                answer["text"].as_str().unwrap().len(),
                whole,
                "the client has it whole"
            );
            assert_eq!(answer["text_cut"]["bytes"], whole);
            assert!(
                answer["text"]
                    .as_str()
                    .unwrap()
                    .starts_with(rec["text"].as_str().unwrap())
            );
        }
        srv.stop().await;
    }
}

/// A summary is held to one and a half times its token limit and to a
/// record's limit; before, a 3 MiB summary was appended as is, by the
/// server and by `wmreplay compact`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_is_held_to_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&log).unwrap();
        for i in 0..400 {
            writeln!(
                f,
                r#"{{"type":"wm_event","ts_ms":{},"text":"event {i} FACT-{i} {}"}}"#,
                1000 + i,
                "w".repeat(200)
            )
            .unwrap();
        }
    }
    let (upstream, _m) = mock::start_mock(Provider::Anthropic, mock::Mode::Big(3 << 10)).await;
    let mut cfg = mock::config(&log, Some(&upstream), Provider::Anthropic);
    cfg.selection.summaries = true;
    cfg.selection.tokenizer = wmreplay::Tokenizer::Bytes;
    let mut c = wmreplay::server::Compaction::new(5_000);
    c.max_output_tokens = 2_000;
    cfg.compaction = Some(c);
    let srv = mock::start(cfg).await;
    let mut summary = None;
    for _ in 0..200 {
        summary = records_from(&log, 400)
            .into_iter()
            .find(|r| r["type"] == "wm_summary");
        if summary.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let summary = summary.expect("a summary was written");
    let text = summary["text"].as_str().unwrap();
    // Bytes: four a token with this tokenizer, 3,000 tokens at most.
    assert!(text.len() <= 3_000 * 4 + 4, "{} bytes", text.len());
    assert!(summary["text_cut"]["bytes"].as_u64().unwrap() > 3 << 20);
    srv.stop().await;
}

/// A fact nested deeper than a replay reads is refused with a 400 and not
/// written: before, `PUT /v1/facts` answered 200 and the replay skipped the
/// line, so the acknowledged fact never appeared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_that_would_not_replay_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = mock::example_log(dir.path());
    let srv = mock::start(mock::config(&log, None, Provider::Anthropic)).await;
    let before = std::fs::read(&log).unwrap();
    let deep = format!("{}1{}", "[".repeat(20_000), "]".repeat(20_000));
    let r = mock::client()
        .put(format!("{}/v1/facts/deep", srv.url))
        .body(deep)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "invalid_record", "{v}");
    assert_eq!(std::fs::read(&log).unwrap(), before);
    srv.stop().await;
}
