//! What of a client's messages the log already holds, and the records of
//! those it lacks.
//!
//! A client of a provider's API sends its whole conversation every time.
//! The log is the conversation's memory, so the messages the log holds are
//! not sent again (the replay stands for them) and those it lacks are
//! written to it:
//!
//! - the turn's user message (the last one in the user's words) is new
//!   unless it began a turn the client is continuing with tool results: a
//!   `text_input` the log holds with that text;
//! - before it, the messages after the newest one the log holds (a
//!   `text_input`, `text_output`, `tool_call` or `tool_result` with its text
//!   or its tool call's id) are written as records before the turn's input,
//!   looking back at most [`LOOK_BACK`] messages: a client that brings a
//!   conversation the log never saw has its last messages kept;
//! - after it, the model's calls of the client's tools and their results
//!   that the log lacks (an answer this server relayed is recorded with its
//!   calls; the results arrive with the request that continues the turn).
//!
//! A message is found by a record of its kind with the message's text (a
//! text longer than [`PREFIX`] characters by that many of its first), or by
//! its tool call's id, searched from the log's end backwards.

use memchr::memmem;
use serde_json::Value;

use super::request::{Asked, calls_of, content_text, results_of, role, said};
use crate::server::turn::{client_call, client_result};
use crate::server::upstream::Provider;
use crate::server::writer::Line;

/// Most messages before the turn's looked at for one the log holds.
pub(crate) const LOOK_BACK: usize = 64;

/// Characters of a message's text a record must start with.
const PREFIX: usize = 256;

/// Most candidate lines checked for one message, so that a short text
/// found everywhere does not make a lookup read the whole log line by line.
const MAX_CHECKS: usize = 4096;

/// What the log holds of a request's messages, and what to write.
#[derive(Default)]
pub(crate) struct Plan {
    /// The offset of the `text_input` the turn's user message began, when
    /// the request continues a turn the log holds.
    pub(crate) input: Option<u64>,
    /// Records of the messages before the turn's that the log lacks.
    pub(crate) before: Vec<Line>,
    /// Records of the turn's tool calls and results that the log lacks.
    pub(crate) after: Vec<Line>,
}

/// The plan for `asked` against the log's bytes.
pub(crate) fn plan(log: &[u8], asked: &Asked, session: Option<&str>, max_record: usize) -> Plan {
    let p = asked.provider;
    let records = Records {
        session,
        max_record,
        names: names(p, &asked.messages),
    };
    let mut plan = Plan::default();
    if asked.continues() {
        plan.input = find_text(log, "text_input", &asked.text);
    }
    for m in &asked.messages[asked.start + 1..] {
        records.lacking(log, p, m, &mut plan.after);
    }
    if plan.input.is_some() {
        return plan;
    }
    // A new turn: the history the log lacks goes before it.
    let from = lacking_from(log, asked);
    for m in &asked.messages[from..asked.start] {
        records.all(p, m, &mut plan.before);
    }
    plan
}

/// The index of the first message before the turn's that the log lacks:
/// the one after the newest it holds, looking back at most [`LOOK_BACK`].
pub(crate) fn lacking_from(log: &[u8], asked: &Asked) -> usize {
    let first = asked.start.saturating_sub(LOOK_BACK);
    for j in (first..asked.start).rev() {
        if held(log, asked.provider, &asked.messages[j]) == Some(true) {
            return j + 1;
        }
    }
    first
}

/// Whether the log holds `m`: `None` when nothing tells (no text, no id).
fn held(log: &[u8], p: Provider, m: &Value) -> Option<bool> {
    let calls = calls_of(p, m);
    if !calls.is_empty() {
        return Some(
            calls
                .iter()
                .any(|c| find_id(log, "tool_call", &c.0).is_some()),
        );
    }
    let results = results_of(p, m);
    if !results.is_empty() {
        return Some(
            results
                .iter()
                .any(|r| find_id(log, "tool_result", &r.0).is_some()),
        );
    }
    match role(m) {
        "user" => {
            let t = content_text(&m["content"]).unwrap_or_default();
            (!t.is_empty()).then(|| find_text(log, "text_input", &t).is_some())
        }
        "assistant" => {
            let t = said(m);
            (!t.is_empty()).then(|| find_text(log, "text_output", &t).is_some())
        }
        _ => None,
    }
}

/// How the records of a client's messages are written.
struct Records<'a> {
    session: Option<&'a str>,
    max_record: usize,
    /// Each tool call's name, by its id (a result names its call).
    names: Vec<(String, String)>,
}

impl Records<'_> {
    /// The records of `m` whose call or result the log lacks.
    fn lacking(&self, log: &[u8], p: Provider, m: &Value, out: &mut Vec<Line>) {
        let calls = calls_of(p, m);
        if !calls.is_empty() {
            if calls
                .iter()
                .all(|c| find_id(log, "tool_call", &c.0).is_none())
            {
                self.all(p, m, out);
            }
            return;
        }
        for (id, content, is_error) in results_of(p, m) {
            if find_id(log, "tool_result", &id).is_none() {
                out.push(self.result(&id, &content, is_error));
            }
        }
    }

    /// Every record of `m`.
    fn all(&self, p: Provider, m: &Value, out: &mut Vec<Line>) {
        let results = results_of(p, m);
        if !results.is_empty() {
            for (id, content, is_error) in results {
                out.push(self.result(&id, &content, is_error));
            }
            return;
        }
        let (kind, text) = match role(m) {
            "user" => (
                "text_input",
                content_text(&m["content"]).unwrap_or_default(),
            ),
            _ => ("text_output", said(m)),
        };
        if !text.is_empty() {
            out.push(Line::turn_within(kind, self.session, &text, None, self.max_record).0);
        }
        for (id, name, input) in calls_of(p, m) {
            out.push(self.call(&id, &name, input));
        }
    }

    fn call(&self, id: &str, name: &str, input: Value) -> Line {
        client_call(id, name, input, self.session, self.max_record)
    }

    fn result(&self, id: &str, content: &str, is_error: bool) -> Line {
        let name = self
            .names
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, n)| n.as_str());
        client_result(id, name, content, is_error, self.session, self.max_record)
    }
}

fn names(p: Provider, messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .flat_map(|m| calls_of(p, m))
        .map(|(id, name, _)| (id, name))
        .collect()
}

/// The offset of the newest record of `kind` whose `text` is `text` (or,
/// for a text longer than [`PREFIX`] characters, starts with its first
/// [`PREFIX`]).
pub(crate) fn find_text(log: &[u8], kind: &str, text: &str) -> Option<u64> {
    let prefix: String = text.chars().take(PREFIX).collect();
    // A text longer than the prefix is matched by its prefix; a shorter one
    // exactly.
    let whole = prefix.len() == text.len();
    let quoted = serde_json::to_string(&prefix).expect("a string serialises");
    // Without the closing quote: the record's text may go on.
    let needle = &quoted.as_bytes()[..quoted.len() - 1];
    find(log, needle, |r| {
        r.get("type").and_then(Value::as_str) == Some(kind)
            && r.get("text").and_then(Value::as_str).is_some_and(|t| {
                if whole {
                    t == text
                } else {
                    t.starts_with(&prefix)
                }
            })
    })
}

/// The offset of the newest record of `kind` with the tool call id `id`.
pub(crate) fn find_id(log: &[u8], kind: &str, id: &str) -> Option<u64> {
    if id.is_empty() {
        return None;
    }
    let quoted = serde_json::to_string(id).expect("a string serialises");
    find(log, quoted.as_bytes(), |r| {
        r.get("type").and_then(Value::as_str) == Some(kind)
            && r.get("id").and_then(Value::as_str) == Some(id)
    })
}

/// The start of the newest whole line holding `needle` whose record `is`.
fn find(log: &[u8], needle: &[u8], is: impl Fn(&Value) -> bool) -> Option<u64> {
    let finder = memmem::FinderRev::new(needle);
    // Whole lines only: a line still being written has no `\n` yet.
    let mut end = memchr::memrchr(b'\n', log).map_or(0, |i| i + 1);
    for _ in 0..MAX_CHECKS {
        let at = finder.rfind(&log[..end])?;
        let start = memchr::memrchr(b'\n', &log[..at]).map_or(0, |i| i + 1);
        let stop = at + memchr::memchr(b'\n', &log[at..end]).unwrap_or(end - at);
        if let Ok(r) = serde_json::from_slice::<Value>(&log[start..stop])
            && is(&r)
        {
            return Some(start as u64);
        }
        end = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_found_by_its_text_start_and_kind_newest_first() {
        let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hello there\"}\n\
{\"type\":\"text_output\",\"ts_ms\":2,\"text\":\"hello there\"}\n\
{\"type\":\"text_input\",\"ts_ms\":3,\"text\":\"hello there, again\"}\n";
        // Short texts match whole: a record that goes on is another text.
        assert_eq!(find_text(log, "text_input", "hello there"), Some(0));
        assert_eq!(find_text(log, "text_input", "hello"), None);
        let second = log.iter().position(|&b| b == b'\n').unwrap() as u64 + 1;
        let third = log[second as usize..]
            .iter()
            .position(|&b| b == b'\n')
            .unwrap() as u64
            + second
            + 1;
        assert_eq!(
            find_text(log, "text_input", "hello there, again"),
            Some(third)
        );
        assert_eq!(find_text(log, "text_output", "hello there"), Some(second));
        // A text that needs escaping is found as the record holds it.
        let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"a \\\"quote\\\"\\n\"}\n";
        assert_eq!(find_text(log, "text_input", "a \"quote\"\n"), Some(0));
        // A line not yet ended is not read.
        let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"x\"}";
        assert_eq!(find_text(log, "text_input", "x"), None);
    }

    #[test]
    fn a_tool_call_is_found_by_its_id() {
        let log = b"{\"type\":\"tool_call\",\"ts_ms\":1,\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"q\":\"toolu_2\"}}\n";
        assert_eq!(find_id(log, "tool_call", "toolu_1"), Some(0));
        assert_eq!(find_id(log, "tool_call", "toolu_2"), None);
        assert_eq!(find_id(log, "tool_result", "toolu_1"), None);
    }
}
