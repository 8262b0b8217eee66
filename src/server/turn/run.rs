//! The rest of a turn once its request is made: the upstream called (with
//! its retries), the answer read whole or relayed as it streams, the tools
//! it calls run and the upstream called again with their results, the
//! answer appended as `text_output`, and the turn's outcome. Shutdown can cut it at any
//! point: what had arrived is appended with the stop reason `interrupted`.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::input::Input;
use super::tools::{ToolScope, run_calls};
use crate::server::app::compact::compact_soon;
use crate::server::app::{AppState, Outcome};
use crate::server::errors::ApiError;
use crate::server::sse::sse;
use crate::server::upstream::Answer;
use crate::server::upstream::call::{Failure, INTERRUPTED};
use crate::server::upstream::relay::Relay;
use crate::server::upstream::tools::{continuation, no_tool_choice, paused_continuation};
use crate::server::writer::Line;

/// An answer that never came: the turn was cut before it.
fn interrupted() -> Answer {
    Answer {
        stop_reason: Some(INTERRUPTED.to_string()),
        ..Answer::default()
    }
}

/// Calls the upstream, reads its whole answer (relaying a stream to the
/// client while the client keeps up), runs the tools it calls and calls
/// again with their results (at most `--max-tool-rounds` rounds; the call
/// after the last offers no tool), appends the answer, and says how the
/// turn ended. `started` hears once the upstream's first answer has begun
/// (or failed); `scope` is what the turn's tool calls may see.
pub(super) async fn run_turn(
    state: &Arc<AppState>,
    input: &Input,
    parts: Vec<Bytes>,
    stats: Value,
    mut relay: Option<Relay>,
    started: oneshot::Sender<Result<(), ApiError>>,
    scope: ToolScope,
) -> Outcome {
    let tools = &state.cfg.tools;
    let provider = state.cfg.provider;
    let mut cut = state.turns.cut_signal();
    let began = Instant::now();
    let mut started = Some(started);
    // The turn so far: the text of every round, the usage summed.
    let mut total = Answer::default();
    // The messages that follow the request's last one: each round's answer
    // and its tools' results.
    let mut more: Vec<u8> = Vec::new();
    // Where the last round's continuation ends in `more`: the tail a cache
    // breakpoint marks, when one is left.
    let mut tail_mark = None;
    let mut ran: Vec<Value> = Vec::new();
    let mut round = 0;
    loop {
        let last = round >= tools.max_rounds;
        let body = continued(
            &parts,
            &more,
            tail_mark,
            (tools.any() && last).then(|| no_tool_choice(provider)),
        );
        let upstream = state.upstream.as_ref().expect("a turn has an upstream");
        let answer = match exchange(
            upstream,
            &body,
            &mut relay,
            &mut started,
            &mut cut,
            None,
            None,
        )
        .await
        {
            Ok(a) => a,
            Err((e, partial)) => {
                total.text.push_str(&partial);
                return fail(state, input, e, &total.text, started, &relay).await;
            }
        };
        // The rounds' texts, a blank line apart.
        if !total.text.is_empty() && !answer.text.is_empty() {
            total.text.push_str(ROUND_SEPARATOR);
        }
        total.text.push_str(&answer.text);
        total.usage.add(&answer.usage);
        total.stop_reason = answer.stop_reason.clone();
        if answer.provider_usage.is_some() {
            total.provider_usage = answer.provider_usage.clone();
        }
        let stop = answer.stop_reason.as_deref();
        if stop == Some(INTERRUPTED) || last {
            break;
        }
        // A turn the provider paused goes on as it is (bounded like the
        // rounds of tools).
        if provider.paused(stop) {
            more.extend_from_slice(&paused_continuation(&answer));
            tail_mark = mark_room(state, &parts, &more);
            round += 1;
            continue;
        }
        // Tools run only when the model stopped to have them run.
        if !tools.any() || answer.tool_calls.is_empty() || !provider.wants_tools(stop) {
            break;
        }
        let results = match run_calls(state, input, &answer.tool_calls, &scope).await {
            Ok(r) => r,
            Err(e) => return fail(state, input, e, &total.text, started, &relay).await,
        };
        for (c, r) in answer.tool_calls.iter().zip(&results) {
            let call = json!({
                "id": c.id,
                "name": c.name,
                "input": serde_json::from_str::<Value>(&c.input).unwrap_or(Value::String(c.input.clone())),
                "is_error": r.is_error,
            });
            if let Some(tx) = &relay {
                tx.send_paced(sse("tool", &call)).await;
            }
            ran.push(call);
        }
        more.extend_from_slice(&continuation(provider, &answer, &results));
        tail_mark = mark_room(state, &parts, &more);
        round += 1;
    }
    let answer = total;
    let unusual = answer
        .stop_reason
        .as_deref()
        .filter(|r| !provider.normal_stop(r));
    let (line, text_cut) = Line::turn_within(
        "text_output",
        input.session_id.as_deref(),
        &answer.text,
        unusual,
        state.cfg.max_record_bytes,
    );
    if let Some(bytes) = text_cut {
        tracing::warn!(
            bytes,
            limit = state.cfg.max_record_bytes,
            "the answer is longer than a record may be (--max-record-bytes); the log keeps its start"
        );
    }
    let mut out = answer_json(&answer, stats);
    let tool_calls = ran.len();
    if !ran.is_empty() {
        out["tool_calls"] = Value::Array(ran);
    }
    if let Some(bytes) = text_cut {
        // The client has the whole text; the log, its start.
        out["text_cut"] = json!({ "bytes": bytes });
    }
    let first = match append_close(state, input, vec![line], &out).await {
        Ok(first) => first,
        Err(e) => {
            let e = state.append_failed(&e);
            if let Some(tx) = &relay {
                tx.send(error_event(tx, &e));
            }
            return Err(e);
        }
    };
    if let Some(v) = first {
        // Another replica closed this key's turn first: the log holds its
        // answer, and so does the client.
        tracing::warn!("another replica answered this turn first; answering with its record");
        if let Some(tx) = &relay {
            let mut shown = v.clone();
            take_replayed(&mut shown);
            tx.send_paced(sse("done", &shown)).await;
        }
        return Ok(v);
    }
    state.count_usage(&answer.usage);
    compact_soon(state);
    tracing::info!(
        input_tokens = answer.usage.input_tokens,
        cache_read_input_tokens = answer.usage.cache_read_input_tokens,
        cache_creation_input_tokens = answer.usage.cache_creation_input_tokens,
        output_tokens = answer.usage.output_tokens,
        stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
        tool_calls,
        ms = began.elapsed().as_millis() as u64,
        "turn answered"
    );
    if let Some(tx) = &relay {
        tx.send_paced(sse("done", &out)).await;
    }
    Ok(out)
}

/// What goes between the texts of a turn's rounds in its answer and its
/// `text_output`: a blank line.
pub(crate) const ROUND_SEPARATOR: &str = "\n\n";

/// The cache breakpoint the tool rounds' tail may carry: the member, when
/// the request marks its prefix (Anthropic) with fewer than the provider's
/// four breakpoints and the tail ends in a block that takes one.
pub(super) fn mark_room(state: &AppState, parts: &[Bytes], more: &[u8]) -> Option<&'static [u8]> {
    if !state.marks_cache() || !more.ends_with(b"}]}") {
        return None;
    }
    let policy = state.cache_policy();
    let used: usize = parts
        .iter()
        .map(|p| memchr::memmem::find_iter(p, b"\"cache_control\"").count())
        .sum();
    (used < policy.max_breakpoints).then(|| policy.ttl.member())
}

/// The request's pieces with `more` messages after its last one (its last
/// block marked with `mark`, a cache breakpoint's member) and, when given,
/// a `tool_choice` member: the body of a round after the first.
pub(crate) fn continued(
    parts: &[Bytes],
    more: &[u8],
    mark: Option<&[u8]>,
    choice: Option<&str>,
) -> Vec<Bytes> {
    if more.is_empty() && choice.is_none() {
        return parts.to_vec();
    }
    let (tail, rest) = parts.split_last().expect("a body has a tail");
    // The tail ends with the messages' `]` and the body's `}`.
    debug_assert!(tail.ends_with(b"]}"));
    let mut t = Vec::with_capacity(tail.len() + more.len() + 80);
    t.extend_from_slice(&tail[..tail.len() - 2]);
    match mark {
        // Inside the last block: before its `}`, the content's `]` and the
        // message's `}`.
        Some(member) if more.ends_with(b"}]}") => {
            t.extend_from_slice(&more[..more.len() - 3]);
            t.extend_from_slice(member);
            t.extend_from_slice(b"}]}");
        }
        _ => t.extend_from_slice(more),
    }
    t.push(b']');
    t.extend_from_slice(choice.unwrap_or("").as_bytes());
    t.push(b'}');
    let mut out = rest.to_vec();
    out.push(Bytes::from(t));
    out
}

/// One call to the upstream and its whole answer (a stream relayed as it
/// comes), its retries included; an error with the text a stream had
/// relayed before it failed.
pub(super) async fn exchange(
    upstream: &crate::server::upstream::call::Upstream,
    parts: &[Bytes],
    relay: &mut Option<Relay>,
    started: &mut Option<oneshot::Sender<Result<(), ApiError>>>,
    cut: &mut tokio::sync::watch::Receiver<bool>,
    key: Option<&crate::server::upstream::ApiKey>,
    beta: Option<&str>,
) -> Result<Answer, (ApiError, String)> {
    let deadline = tokio::time::Instant::now() + upstream.timeout;
    let mut stream_retries = 0;
    loop {
        let called = tokio::select! {
            r = upstream.call_as(parts, deadline, key, beta) => Some(r),
            _ = cut.wait_for(|c| *c) => None,
        };
        match called {
            None => return Ok(interrupted()),
            Some(Err(e)) => return Err((upstream.call_error(e), String::new())),
            Some(Ok(resp)) if relay.is_some() => {
                if let Some(s) = started.take() {
                    let _ = s.send(Ok(()));
                }
                match upstream.read_stream(resp, relay, cut).await {
                    Ok(a) => return Ok(a),
                    // Overloaded before any text: nothing was relayed, so
                    // the call is made again, as a failed call would be.
                    Err(Failure::Early(e)) => {
                        let wait = upstream.backoff(stream_retries);
                        if stream_retries >= upstream.retries
                            || tokio::time::Instant::now() + wait >= deadline
                        {
                            return Err((e, String::new()));
                        }
                        stream_retries += 1;
                        metrics::counter!("wmreplay_upstream_retries_total").increment(1);
                        tracing::warn!(
                            code = e.code,
                            wait_ms = wait.as_millis() as u64,
                            "the upstream's stream failed before any text; retrying"
                        );
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = cut.wait_for(|c| *c) => return Ok(interrupted()),
                        }
                    }
                    Err(Failure::Late(e, text)) => return Err((e, text)),
                }
            }
            Some(Ok(resp)) => {
                return tokio::select! {
                    r = upstream.read_whole(resp, deadline) => r.map_err(|e| (e, String::new())),
                    _ = cut.wait_for(|c| *c) => Ok(interrupted()),
                };
            }
        }
    }
}

/// A turn that failed: closed in the log (with `text`, what had been
/// relayed) before the client hears of it.
pub(super) async fn fail(
    state: &Arc<AppState>,
    input: &Input,
    e: ApiError,
    text: &str,
    mut started: Option<oneshot::Sender<Result<(), ApiError>>>,
    relay: &Option<Relay>,
) -> Outcome {
    tracing::warn!(code = e.code, status = e.status.as_u16(), message = %e.message, "turn failed");
    close_failed(state, input, &e, text).await;
    match started.take() {
        Some(s) => {
            let _ = s.send(Err(e.clone()));
        }
        None => {
            if let Some(tx) = relay {
                tx.send(error_event(tx, &e));
            }
        }
    }
    Err(e)
}

/// The event that tells a streaming client of `e`: the server's `error`
/// event, or the provider's own to a client of its API.
pub(super) fn error_event(relay: &Relay, e: &ApiError) -> Bytes {
    match relay.raw {
        None => sse("error", &e.json()),
        Some(_) if relay.responses => crate::server::upstream::responses::error_event(e),
        Some(p) => crate::server::upstream::shapes::error_event(p, e),
    }
}

/// Closes a turn whose upstream call failed, so its `text_input` is not
/// left unanswered in the log: a `text_output` with the text a stream had
/// relayed before it failed (none otherwise), the stop
/// reason `error`, and the error (status, code, message) as the client got
/// it. Later replays show the model that the request failed. A keyed turn
/// may still be retried: its retry replays the log before its `text_input`,
/// which this record follows, and appends its answer after it.
pub(super) async fn close_failed(state: &Arc<AppState>, input: &Input, e: &ApiError, text: &str) {
    let mut record = serde_json::Map::new();
    record.insert("type".into(), json!("text_output"));
    if let Some(id) = &input.session_id {
        record.insert("session_id".into(), json!(id));
    }
    // Held, with the error, within a record's limit.
    let room = state
        .cfg
        .max_record_bytes
        .saturating_sub(1024 + e.message.len());
    let kept = crate::server::writer::fit_json(text, room);
    record.insert("text".into(), json!(kept));
    if kept.len() < text.len() {
        record.insert("text_cut".into(), json!({ "bytes": text.len() }));
    }
    record.insert("stop_reason".into(), json!(ERROR_STOP));
    record.insert(
        "error".into(),
        json!({
            "status": e.upstream_status.unwrap_or(e.status.as_u16()),
            "code": e.upstream_code.as_deref().unwrap_or(e.code),
            "message": e.message,
        }),
    );
    let line = Line::stamped_object(Value::Object(record).to_string().as_bytes());
    let appended = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    if let Err(err) = appended {
        tracing::error!(error = %err, "could not close a failed turn in the log");
    }
}

/// The stop reason recorded for a turn whose upstream call failed.
pub(crate) const ERROR_STOP: &str = "error";

/// What a client is answered for `answer`.
pub(super) fn answer_json(answer: &Answer, stats: Value) -> Value {
    let mut out = json!({
        "text": answer.text,
        "stop_reason": answer.stop_reason,
        "usage": answer.usage.to_json(),
        "stats": stats,
    });
    if let Some(u) = &answer.provider_usage {
        out["provider_usage"] = u.clone();
    }
    out
}

/// Closes a turn whose attempt was cut with its outcome unknown (its
/// process stopped): a `text_output` with the stop reason `interrupted`,
/// and that is its outcome. The upstream is not called again.
pub(super) async fn close_turn(state: &Arc<AppState>, input: &Input) -> Outcome {
    let answer = interrupted();
    let line = Line::turn(
        "text_output",
        input.session_id.as_deref(),
        "",
        Some(INTERRUPTED),
    );
    // In the shape its door answers: a client of a provider's API retrying
    // after a crash reads a message (or a completion) as its SDK parses it.
    let out = match &input.compat {
        Some(c) => crate::server::upstream::shapes::message(c.provider, &c.model, &answer),
        None => answer_json(&answer, Value::Null),
    };
    if let Some(v) = append_close(state, input, vec![line], &out)
        .await
        .map_err(|e| state.append_failed(&e))?
    {
        return Ok(v);
    }
    tracing::info!("a turn cut by a stop was closed as interrupted");
    Ok(out)
}

/// Appends the `text_output` that closes a turn. In a log kept in a stream
/// a keyed turn's close is named, and carries `answer` but its text (which
/// the record holds), so one close is kept whichever replicas try and any
/// of them answers a repeat with the first answer whole: `Some(answer)`
/// when another's was there first.
pub(super) async fn append_close(
    state: &Arc<AppState>,
    input: &Input,
    lines: Vec<Line>,
    answer: &Value,
) -> std::io::Result<Option<Value>> {
    crate::server::failpoint::crash("turn-crash-answered", input.text.as_bytes());
    let w = state.writer()?;
    // On a log this process writes alone, a keyed turn is answered by this
    // batch, in the step that makes it durable (the batch's journal entry
    // carries it): no crash leaves the answer in the log and its key
    // running, which a retry would close a second time.
    if let Some(key) = &input.key
        && state.writes_locally()
    {
        let answer = answer.to_string();
        let key = crate::server::writer::BatchKey {
            key: key.clone(),
            answer: Box::new(move |_| answer.clone()),
            body: input.hash(),
            made: true,
        };
        w.append_batch(lines, Some(key)).await?;
        if let Some(c) = &input.compat {
            c.key_answered
                .store(true, std::sync::atomic::Ordering::Release);
        }
        return Ok(None);
    }
    let Some(key) = input.key.as_deref().filter(|_| w.synced_at().is_some()) else {
        w.append(lines).await?;
        return Ok(None);
    };
    let named = w
        .append_named(lines, output_name(key), None, Some(meta_of(answer)))
        .await?;
    if !named.existed {
        return Ok(None);
    }
    answer_of_close(w, named.appended[0], named.meta.as_deref()).map(Some)
}

/// What a close carries besides its record: the answer without its text
/// (and without the turn's stats and tool calls when that would pass
/// 16 KiB).
fn meta_of(answer: &Value) -> String {
    let mut m = answer.clone();
    if let Some(o) = m.as_object_mut() {
        o.remove("text");
        if Value::Object(o.clone()).to_string().len() > 16 << 10 {
            o.remove("stats");
            o.remove("tool_calls");
        }
    }
    m.to_string()
}

/// Marks an answer as the repeat of a first one (a client is told so with
/// `idempotent-replayed: true`).
pub(crate) fn mark_replayed(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        o.insert(REPLAYED.into(), Value::Bool(true));
    }
}

/// Whether `v` was marked a repeat, the mark taken out.
pub(crate) fn take_replayed(v: &mut Value) -> bool {
    v.as_object_mut().and_then(|o| o.remove(REPLAYED)).is_some()
}

const REPLAYED: &str = "\u{0}replayed";

/// The message name of a keyed turn's close in a log kept in a stream.
pub(super) fn output_name(key: &str) -> String {
    format!("turn:{key}:output")
}

/// The answer a client gets for the `text_output` at `a`, written by
/// another replica with `meta` (the first answer but its text): the first
/// answer whole, marked a repeat. A close without it (written before it
/// was kept) answers its record's text and stop reason.
pub(super) fn answer_of_close(
    w: &dyn crate::server::writer::LogWriter,
    a: crate::server::writer::Appended,
    meta: Option<&str>,
) -> std::io::Result<Value> {
    let record: Value = serde_json::from_slice(&w.read_back(a.offset, a.len)?).unwrap_or_default();
    let field = |k: &str| record.get(k).and_then(Value::as_str).map(str::to_string);
    let mut v = match meta.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
        Some(Value::Object(mut o)) => {
            o.insert("text".into(), json!(field("text").unwrap_or_default()));
            Value::Object(o)
        }
        _ => answer_json(
            &Answer {
                text: field("text").unwrap_or_default(),
                stop_reason: field("stop_reason"),
                ..Answer::default()
            },
            Value::Null,
        ),
    };
    mark_replayed(&mut v);
    Ok(v)
}

/// For a keyed turn whose input another replica wrote: that replica's
/// close, waited for while its attempt may still be running (up to the
/// upstream timeout, at most a minute); `None` if none came.
pub(super) async fn close_from_elsewhere(state: &Arc<AppState>, input: &Input) -> Option<Value> {
    let key = input.key.as_deref()?;
    let w = state.writer().ok()?;
    let wait = state
        .upstream
        .as_ref()
        .map_or(std::time::Duration::ZERO, |u| u.timeout)
        .min(std::time::Duration::from_secs(60));
    let until = tokio::time::Instant::now() + wait;
    loop {
        if let Ok(Some(named)) = w.find_named(&output_name(key)).await
            && let Some(first) = named.appended.first()
        {
            return answer_of_close(w, *first, named.meta.as_deref()).ok();
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
