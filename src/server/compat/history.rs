//! What of a client's messages the log already holds, and the records of
//! those it lacks.
//!
//! A client of a provider's API sends its whole conversation every time.
//! The log is the conversation's memory, so the messages the log holds are
//! not sent again (the replay stands for them) and those it lacks are
//! written to it. Each message is a few *items*, in the order their records
//! are written: a user's words (`text_input`), tool results (`tool_result`,
//! then the words beside them), an assistant's text (`text_output`, its text
//! blocks a blank line apart, a refusal after its text) and its calls
//! (`tool_call`).
//!
//! An item is held only by a record of the request's session (no session:
//! records without one) of its kind with the same whole text, or the same
//! call id, found where the request's items and the session's newest
//! records line up as sequences: the newest item of the request that the
//! session's records hold, with the items before it found before it in the
//! same order (a few records of the server's own between them allowed). The
//! items after it are what the log lacks:
//!
//! - before the turn's user message, they are written before its
//!   `text_input`;
//! - a request that continues a turn (its last messages are tool results)
//!   whose `text_input` the session's records hold writes only what
//!   continues it that the log lacks;
//! - a request whose turn's words are the session's last input (still
//!   unanswered, or just answered) may repeat that turn: [`Plan::repeats`],
//!   confirmed by the request that wrote it.
//!
//! The session's records are read from the log's end backwards, as many
//! as the request has items and a few more, and no further back than the
//! session's records begin (`session_tail.rs`), so a lookup costs what the
//! session's conversation costs, not what the log holds.

use serde_json::Value;

use super::request::{Asked, blocks_of, calls_of, content_text, results_of, role, said};
use super::responses::part_text;
use super::session_tail::{Held, Kind, session_tail};
use super::tail::LogEnd;
use crate::server::app::Floors;
use crate::server::turn::{client_call, client_result};
use crate::server::upstream::Provider;
use crate::server::writer::Line;

/// Items of the request checked before the one found (its context).
const CONTEXT: usize = 8;

/// Records of the log's own (the server's tool rounds, an error's close)
/// allowed between two items of the request.
const EXTRAS: usize = 16;

/// One part of a client's message, as its record would be written.
pub(crate) struct Item {
    pub(crate) kind: Kind,
    /// The whole text (input, output) or the call id (call, result).
    pub(crate) what: String,
    /// The message it is part of.
    pub(crate) msg: usize,
    /// A call's name and input, or a result's content and error flag.
    name: String,
    input: Value,
    is_error: bool,
}

impl Item {
    /// An item of message `msg` without a call's or result's details.
    fn new(kind: Kind, what: String, msg: usize) -> Item {
        Item {
            kind,
            what,
            msg,
            name: String::new(),
            input: Value::Null,
            is_error: false,
        }
    }
}

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
    /// The offset of the session's last `text_input` when its words are
    /// this request's turn's: the request may repeat that turn (the caller
    /// checks that the same conversation wrote it).
    pub(crate) repeats: Option<u64>,
    /// The offset of the session's newest record (a fresh request's key
    /// names it, so two sends of one request before either is written are
    /// one turn).
    pub(crate) newest: Option<u64>,
}

/// The items of `m`, in the order their records are written.
pub(crate) fn items_of(p: Provider, m: &Value, msg: usize, out: &mut Vec<Item>) {
    let item = |kind, what| Item::new(kind, what, msg);
    let results = results_of(p, m);
    if !results.is_empty() {
        for (id, content, is_error) in results {
            out.push(Item {
                name: content,
                is_error,
                ..item(Kind::Result, id)
            });
        }
        // Words beside the results, after them.
        let words = blocks_of(m, "text")
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n\n");
        if !words.is_empty() {
            out.push(item(Kind::Input, words));
        }
        return;
    }
    match role(m) {
        "user" => {
            let t = content_text(&m["content"]).unwrap_or_default();
            if !t.is_empty() {
                out.push(item(Kind::Input, t));
            }
        }
        "assistant" => {
            let t = said(m);
            if !t.is_empty() {
                out.push(item(Kind::Output, t));
            }
            for (id, name, input) in calls_of(p, m) {
                out.push(Item {
                    name,
                    input,
                    ..item(Kind::Call, id)
                });
            }
        }
        _ => {}
    }
}

/// The items of a Responses API input item: a message's text, a
/// `function_call`, a `function_call_output`; nothing of the rest
/// (`reasoning`, a hosted tool's call), which is the client's.
fn response_items_of(m: &Value, msg: usize, out: &mut Vec<Item>) {
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let item = |kind, what| Item::new(kind, what, msg);
    match m.get("type").and_then(Value::as_str).unwrap_or("message") {
        "function_call" => {
            let args = s("arguments");
            out.push(Item {
                name: s("name"),
                input: serde_json::from_str(&args).unwrap_or(Value::String(args)),
                ..item(Kind::Call, s("call_id"))
            });
        }
        "function_call_output" => {
            let content = match m.get("output") {
                Some(Value::String(t)) => t.clone(),
                Some(o) => part_text(o).unwrap_or_else(|| o.to_string()),
                None => String::new(),
            };
            out.push(Item {
                name: content,
                ..item(Kind::Result, s("call_id"))
            });
        }
        "message" => {
            let t = part_text(&m["content"]).unwrap_or_default();
            match role(m) {
                _ if t.is_empty() => {}
                "user" => out.push(item(Kind::Input, t)),
                "assistant" => out.push(item(Kind::Output, t)),
                _ => {}
            }
        }
        _ => {}
    }
}

/// The items of `asked`'s messages `range`.
fn items(asked: &Asked, range: std::ops::Range<usize>) -> Vec<Item> {
    let mut out = Vec::new();
    for i in range {
        let m = &asked.messages[i];
        match asked.responses {
            true => response_items_of(m, i, &mut out),
            false => items_of(asked.provider, m, i, &mut out),
        }
    }
    out
}

/// The plan for `asked` against the log's bytes (`floors`: where the log's
/// sessions begin, as far as earlier lookups found).
pub(crate) fn plan<L: LogEnd + ?Sized>(
    log: &L,
    floors: Option<&Floors>,
    asked: &Asked,
    session: Option<&str>,
    max_record: usize,
) -> Plan {
    let items = items(asked, 0..asked.messages.len());
    // The turn's words: its user message's items (one input).
    let turn = items
        .iter()
        .position(|it| it.msg == asked.start)
        .unwrap_or(items.len());
    let held = tail_for(log, session, &items, floors);
    let writer = Writer {
        session,
        max_record,
        names: items
            .iter()
            .filter(|it| it.kind == Kind::Call)
            .map(|it| (it.what.clone(), it.name.clone()))
            .collect(),
    };
    let mut plan = Plan {
        newest: held.last().map(|h| h.at),
        ..Plan::default()
    };
    if asked.continues()
        && turn < items.len()
        && let Some((j, i)) = aligned(&items[..=turn], &held)
        && j == turn
    {
        // The turn's input is held: write what continues it that the
        // session's records after it lack.
        plan.input = Some(held[i].at);
        let later = &held[i + 1..];
        for it in &items[turn + 1..] {
            if !later.iter().any(|h| h.kind == it.kind && h.what == it.what) {
                plan.after.push(writer.line(it));
            }
        }
        return plan;
    }
    // A new turn: the history the log lacks goes before it.
    let found = aligned(&items[..turn], &held);
    let from = found.map_or(0, |(j, _)| j + 1);
    for it in &items[from..turn] {
        plan.before.push(writer.line(it));
    }
    for it in items.iter().skip(turn + 1) {
        plan.after.push(writer.line(it));
    }
    // A repeat: the turn's words are the session's last input. The
    // history is not matched here: a turn whose words and answer repeat
    // the turn's before it ("continue", "Done.") lines the history up with
    // its own answer as well as with the one before it. What makes it the
    // same turn is its request: `conversation_key` takes its key only when
    // that input was written for this very conversation (its hash).
    let last = held.iter().rposition(|h| h.kind == Kind::Input);
    if let Some(i) = last
        && turn < items.len()
        && held[i].what == items[turn].what
    {
        plan.repeats = Some(held[i].at);
    }
    plan
}

/// The index of the first message before the turn's that the log lacks:
/// the one after the newest the session's records hold.
pub(crate) fn lacking_from<L: LogEnd + ?Sized>(
    log: &L,
    floors: Option<&Floors>,
    asked: &Asked,
    session: Option<&str>,
) -> usize {
    let items = items(asked, 0..asked.start);
    let held = tail_for(log, session, &items, floors);
    match aligned(&items, &held) {
        Some((j, _)) => items[j].msg + 1,
        None => 0,
    }
}

/// The session's newest conversation records for a request of `items`
/// (oldest first): as many as `items` and [`CONTEXT`] + [`EXTRAS`] more; a
/// lookup without a session reads back four times their size (and 1 MiB)
/// of records without one.
fn tail_for<L: LogEnd + ?Sized>(
    log: &L,
    session: Option<&str>,
    items: &[Item],
    floors: Option<&Floors>,
) -> Vec<Held> {
    let bytes: u64 = items.iter().map(|i| i.what.len() as u64 + 256).sum();
    session_tail(
        log,
        session,
        items.len() + CONTEXT + EXTRAS,
        4 * bytes + (1 << 20),
        floors,
    )
}

/// The newest item of `items` the session's records hold in line: `(its
/// index, its record's index)`.
fn aligned(items: &[Item], held: &[Held]) -> Option<(usize, usize)> {
    let same = |it: &Item, h: &Held| it.kind == h.kind && it.what == h.what;
    for j in (0..items.len()).rev() {
        for i in (0..held.len()).rev() {
            if same(&items[j], &held[i]) && in_line(&items[..j], &held[..i], same) {
                return Some((j, i));
            }
        }
    }
    None
}

/// Whether the last items of `items` (up to [`CONTEXT`]) are found in
/// `held`, newest last and in order, with at most [`EXTRAS`] other records
/// between two of them; records that run out first (the log's stretch of
/// this session begins later: nothing older, or nothing older the user
/// said) agree.
fn in_line(items: &[Item], held: &[Held], same: impl Fn(&Item, &Held) -> bool) -> bool {
    let mut y = held.len();
    for it in items.iter().rev().take(CONTEXT) {
        let low = y.saturating_sub(EXTRAS + 1);
        match (low..y).rev().find(|&k| same(it, &held[k])) {
            Some(k) => y = k,
            None => return low == 0 && held[..y].iter().all(|h| h.kind != Kind::Input),
        }
    }
    true
}

/// How the records of a client's messages are written.
struct Writer<'a> {
    session: Option<&'a str>,
    max_record: usize,
    /// Each tool call's name, by its id (a result names its call).
    names: Vec<(String, String)>,
}

impl Writer<'_> {
    fn line(&self, it: &Item) -> Line {
        match it.kind {
            Kind::Input => {
                Line::turn_within("text_input", self.session, &it.what, None, self.max_record).0
            }
            Kind::Output => {
                Line::turn_within("text_output", self.session, &it.what, None, self.max_record).0
            }
            Kind::Call => client_call(
                &it.what,
                &it.name,
                it.input.clone(),
                self.session,
                self.max_record,
            ),
            Kind::Result => {
                let name = self
                    .names
                    .iter()
                    .find(|(i, _)| *i == it.what)
                    .map(|(_, n)| n.as_str());
                client_result(
                    &it.what,
                    name,
                    &it.name,
                    it.is_error,
                    self.session,
                    self.max_record,
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: Kind, what: &str) -> Item {
        Item::new(kind, what.into(), 0)
    }

    fn log(lines: &[(&str, Option<&str>, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (kind, session, text) in lines {
            let mut o = serde_json::json!({"type": kind, "ts_ms": 1, "text": text});
            if let Some(s) = session {
                o["session_id"] = Value::from(*s);
            }
            out.extend_from_slice(o.to_string().as_bytes());
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn a_record_of_another_session_or_a_prefix_holds_nothing() {
        let l = log(&[
            ("text_input", Some("b"), "thanks"),
            ("text_input", Some("a"), "hello there, again"),
        ]);
        let items = [
            item(Kind::Input, "thanks"),
            item(Kind::Input, "hello there"),
        ];
        let held = tail_for(&l[..], Some("a"), &items, None);
        assert_eq!(held.len(), 1);
        assert_eq!(aligned(&items, &held).map(|x| x.0), None);
        let held = tail_for(&l[..], Some("b"), &items, None);
        assert_eq!(aligned(&items, &held), Some((0, 0)));
        // No session: records without one only.
        assert!(tail_for(&l[..], None, &items, None).is_empty());
    }

    #[test]
    fn a_history_without_a_session_is_found_behind_megabytes_of_sessions() {
        let mut l = log(&[("text_input", None, "q1"), ("text_output", None, "a1")]);
        // 3 MB of a session's records since, as the server writes them and
        // as another writer might (parsed).
        let big = "x".repeat(10_000);
        for i in 0..300 {
            let line = match i % 2 {
                0 => format!(
                    r#"{{"type":"text_output","ts_ms":{i},"session_id":"cc","text":"{big}"}}"#
                ),
                _ => format!(r#"{{"type":"tool_result","session_id":"cc","content":"{big}"}}"#),
            };
            l.extend_from_slice(line.as_bytes());
            l.push(b'\n');
        }
        let items = [
            item(Kind::Input, "q1"),
            item(Kind::Output, "a1"),
            item(Kind::Input, "q2"),
        ];
        let held = tail_for(&l[..], None, &items, None);
        assert_eq!(held.len(), 2);
        assert_eq!(aligned(&items[..2], &held), Some((1, 1)));
    }

    #[test]
    fn a_short_text_said_twice_is_found_where_the_sequences_line_up() {
        // The log holds q1 a1 thanks a2; the client also had q3 a3 thanks.
        let l = log(&[
            ("text_input", None, "q1"),
            ("text_output", None, "a1"),
            ("text_input", None, "thanks"),
            ("text_output", None, "a2"),
        ]);
        let items: Vec<Item> = [
            (Kind::Input, "q1"),
            (Kind::Output, "a1"),
            (Kind::Input, "thanks"),
            (Kind::Output, "a2"),
            (Kind::Input, "q3"),
            (Kind::Output, "a3"),
            (Kind::Input, "thanks"),
        ]
        .iter()
        .map(|(k, w)| item(*k, w))
        .collect();
        let held = tail_for(&l[..], None, &items, None);
        assert_eq!(aligned(&items, &held), Some((3, 3)));
        // A line not yet ended is not read.
        let mut cut = l.clone();
        cut.extend_from_slice(br#"{"type":"text_input","ts_ms":1,"text":"q3"}"#);
        assert_eq!(tail_for(&cut[..], None, &items, None).len(), 4);
    }
}
