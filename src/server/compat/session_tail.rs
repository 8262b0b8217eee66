//! A session's newest records, read from the log's end backwards (in
//! blocks: `tail.rs`): what the history lookup lines a request up with.
//! With a session, its id is searched for (at memchr's speed) at most
//! [`SESSION_SPAN`] bytes back; without one, the records without a session
//! are read back, at most four times the history's size (and 1 MiB) of
//! them, passing over other sessions' records within the same span (a
//! client without a session on a log busy with sessions finds its history
//! however much they wrote since).
//!
//! A lookup that read back all of its span (the session has fewer records
//! than the request has messages, as a conversation's own session always
//! has) leaves where the session's oldest record is in the log's
//! [`Floors`]: the log only grows, so nothing of the session lies before
//! it, and the session's next lookups read back only that far — what the
//! session wrote since it began, not what the log holds.

use std::borrow::Cow;
use std::collections::HashMap;

use memchr::memmem;
use serde::Deserialize;

use super::tail::{LogEnd, lines_back};
use crate::server::app::floors::{Floors, Known};

/// How far back a session's records are searched for.
pub(super) const SESSION_SPAN: u64 = 256 << 20;

/// What a record or a message's part is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Input,
    Output,
    Call,
    Result,
}

/// A record of the session, read from the log.
pub(crate) struct Held {
    pub(super) kind: Kind,
    pub(super) what: String,
    /// The offset of its line.
    pub(super) at: u64,
}

/// A record as the lookup reads it.
#[derive(Deserialize)]
struct Rec<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
}

/// The session's newest conversation records (oldest first), `want` of
/// them, read from the log's end; no further back than `floors` knows the
/// session's records begin. Without a session, `budget` bytes of records
/// without one at most.
pub(super) fn session_tail<L: LogEnd + ?Sized>(
    log: &L,
    session: Option<&str>,
    want: usize,
    budget: u64,
    floors: Option<&Floors>,
) -> Vec<Held> {
    let mut out = Vec::new();
    // Whether the line is of another session (else it is read as one of
    // `session`'s, if it is a conversation record).
    let take = |line: &[u8], at: u64, out: &mut Vec<Held>| -> bool {
        let Ok(r) = serde_json::from_slice::<Rec>(line) else {
            return false;
        };
        if r.session_id.as_deref() != session {
            return true;
        }
        let (kind, what) = match (r.kind.as_ref(), r.text, r.id) {
            ("text_input", Some(t), _) => (Kind::Input, t),
            ("text_output", Some(t), _) => (Kind::Output, t),
            ("tool_call", _, Some(id)) => (Kind::Call, id),
            ("tool_result", _, Some(id)) => (Kind::Result, id),
            _ => return false,
        };
        out.push(Held {
            kind,
            what: what.into_owned(),
            at,
        });
        false
    };
    let len = log.len();
    let span = len.saturating_sub(SESSION_SPAN);
    let file = log.file_id();
    let mut known = floors.map_or(Known::Nothing, |f| f.get(file, len, session));
    // A session not known yet: where every session named in the span (or
    // after the index's end) begins is noted first, once for them all (a
    // log that cannot say which file it is keeps no index: not walked).
    if let Some(f) = floors
        && session.is_some()
        && file.is_some()
        && !matches!(known, Known::From(_))
    {
        let from = match known {
            Known::After(end) => end.saturating_sub(1).max(span),
            _ => span,
        };
        let mut begins = HashMap::new();
        let walk = lines_back(log, from, |lines, base| {
            note_sessions(lines, base, &mut begins);
            true
        });
        f.index(file, len, known, begins, walk.whole.then_some(walk.end));
        known = f.get(file, len, session);
    }
    // The line at a floor is read whole: the walk goes to the `\n` before it.
    let floor = match known {
        Known::From(at) | Known::After(at) => at.saturating_sub(1).max(span),
        Known::Nothing => span,
    };
    let walk = match session {
        Some(s) => {
            let quoted = serde_json::to_string(s).expect("a string serialises");
            let finder = memmem::FinderRev::new(quoted.as_bytes());
            lines_back(log, floor, |lines, base| {
                let mut stop = lines.len();
                while out.len() < want {
                    let Some(at) = finder.rfind(&lines[..stop]) else {
                        break;
                    };
                    let start = memchr::memrchr(b'\n', &lines[..at]).map_or(0, |i| i + 1);
                    let end = at + memchr::memchr(b'\n', &lines[at..stop]).unwrap_or(stop - at);
                    let _ = take(&lines[start..end], base + start as u64, &mut out);
                    stop = start;
                }
                out.len() < want
            })
        }
        None => {
            // Records of sessions are passed over (the server's own known
            // by their first bytes, unparsed) and do not count: the rest are
            // read back up to the budget.
            let mut budget = budget;
            lines_back(log, floor, |lines, base| {
                let mut stop = lines.len();
                while stop > 0 && out.len() < want {
                    let end = stop - 1;
                    let start = memchr::memrchr(b'\n', &lines[..end]).map_or(0, |i| i + 1);
                    let line = &lines[start..end];
                    stop = start;
                    if of_a_session(line) || take(line, base + start as u64, &mut out) {
                        continue;
                    }
                    budget = budget.saturating_sub(line.len() as u64 + 1);
                    if budget == 0 {
                        return false;
                    }
                }
                out.len() < want
            })
        }
    };
    // Read back to its floor: every record of the session after it was
    // found, so none lies before the oldest (or, with none, before the
    // log's end as it was).
    if walk.whole
        && let Some(f) = floors
    {
        let at = out.last().map_or(walk.end, |h| h.at);
        f.learn(file, len, session, at);
    }
    out.reverse();
    out
}

/// Whether `line` is a record the server wrote for a session, known by its
/// first bytes (`{"type":"…","ts_ms":…,"session_id":"`: the session is a
/// member of the record itself); any other line is parsed to know.
fn of_a_session(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(b"{\"type\":\"") else {
        return false;
    };
    // A type with an escaped quote fails the next check: parsed.
    let Some(q) = memchr::memchr(b'"', rest) else {
        return false;
    };
    let Some(rest) = rest[q + 1..].strip_prefix(b",\"ts_ms\":") else {
        return false;
    };
    let n = rest
        .iter()
        .take_while(|b| b.is_ascii_digit() || b"+-.eE".contains(b))
        .count();
    rest[n..].starts_with(b",\"session_id\":\"")
}

/// Notes in `begins` where each session named in `lines` (a stretch of the
/// log's whole lines at `base`, read from its end backwards) begins: every
/// `"session_id": "…"` member (a nested one too: a floor too low costs a
/// little reading, never a record missed), at its line's offset.
fn note_sessions(lines: &[u8], base: u64, begins: &mut HashMap<String, u64>) {
    const KEY: &[u8] = b"\"session_id\"";
    let blank = |i: &mut usize| {
        while lines.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    for hit in memmem::find_iter(lines, KEY) {
        // A quote after a backslash is inside a string.
        if hit > 0 && lines[hit - 1] == b'\\' {
            continue;
        }
        let mut i = hit + KEY.len();
        blank(&mut i);
        if lines.get(i) != Some(&b':') {
            continue;
        }
        i += 1;
        blank(&mut i);
        if lines.get(i) != Some(&b'"') {
            continue;
        }
        // The string's end: the first quote not escaped.
        let mut j = i + 1;
        let close = loop {
            match memchr::memchr2(b'"', b'\\', &lines[j.min(lines.len())..]) {
                Some(k) if lines[j + k] == b'\\' => j += k + 2,
                Some(k) => break Some(j + k),
                None => break None,
            }
        };
        let Some(close) = close else {
            continue;
        };
        let raw = &lines[i + 1..close];
        let id: Cow<str> = match memchr::memchr(b'\\', raw) {
            None => match std::str::from_utf8(raw) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => continue,
            },
            Some(_) => match serde_json::from_slice::<String>(&lines[i..=close]) {
                Ok(s) => Cow::Owned(s),
                Err(_) => continue,
            },
        };
        let at = base + memchr::memrchr(b'\n', &lines[..hit]).map_or(0, |p| p + 1) as u64;
        match begins.get_mut(id.as_ref()) {
            Some(a) => *a = (*a).min(at),
            None => {
                begins.insert(id.into_owned(), at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A log in memory that says which file it is, as a file's end does.
    struct Named<'a>(&'a [u8]);

    impl LogEnd for Named<'_> {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }

        fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
            self.0.read_at(buf, at)
        }

        fn file_id(&self) -> Option<(u64, u64)> {
            Some((1, 1))
        }
    }

    const SESSIONS: [Option<&str>; 4] = [Some("s0"), Some("s1"), Some("s2"), None];
    const KINDS: [&str; 5] = [
        "text_input",
        "text_output",
        "tool_call",
        "tool_result",
        "note",
    ];

    /// One record: its session, kind, words, and how it is written (the
    /// server's own member order, or another writer's spaces and order,
    /// with another session named inside it, or in its text).
    fn record(session: usize, kind: usize, words: usize, shape: usize, ts: usize) -> String {
        let (s, k) = (SESSIONS[session], KINDS[kind]);
        let sid = s.map(|s| format!("\"session_id\":\"{s}\","));
        let what = format!("w{words}");
        match shape {
            0 => format!(
                "{{\"type\":\"{k}\",\"ts_ms\":{ts},{}\"text\":\"{what}\",\"id\":\"{what}\"}}",
                sid.unwrap_or_default()
            ),
            1 => format!(
                "{{ \"text\": \"{what}\", \"id\": \"{what}\", {} \"type\": \"{k}\", \"ts_ms\": {ts} }}",
                s.map(|s| format!("\"session_id\" : \"{s}\","))
                    .unwrap_or_default()
            ),
            2 => format!(
                "{{\"type\":\"{k}\",\"ts_ms\":{ts},\"meta\":{{\"session_id\":\"s1\"}},{}\"text\":\"{what}\",\"id\":\"{what}\"}}",
                sid.unwrap_or_default()
            ),
            _ => format!(
                "{{\"type\":\"{k}\",\"ts_ms\":{ts},{}\"text\":\"say \\\"session_id\\\": \\\"s2\\\" {what}\",\"id\":\"{what}\"}}",
                sid.unwrap_or_default()
            ),
        }
    }

    fn held(h: &[Held]) -> Vec<(Kind, String, u64)> {
        h.iter().map(|h| (h.kind, h.what.clone(), h.at)).collect()
    }

    proptest! {
        /// Appends and lookups in any order: every lookup through the
        /// floors (learned by the lookups before it, the index of the
        /// sessions included) finds what a lookup reading the whole log
        /// back finds.
        #[test]
        fn a_lookup_through_the_floors_finds_what_a_whole_walk_finds(
            steps in proptest::collection::vec(
                (0..4usize, 0..5usize, 0..6usize, 0..4usize, 0..4usize, 0..40usize),
                1..120,
            ),
        ) {
            let floors = Floors::default();
            let mut log = Vec::new();
            for (i, (session, kind, words, shape, op, items)) in steps.into_iter().enumerate() {
                if op == 0 {
                    let s = SESSIONS[session];
                    let budget = 256 * items as u64 + 512;
                    let through = session_tail(&Named(&log), s, items, budget, Some(&floors));
                    let whole = session_tail(&log[..], s, items, budget, None);
                    prop_assert_eq!(held(&through), held(&whole), "{:?} after {} lines", s, i);
                } else {
                    log.extend_from_slice(record(session, kind, words, shape, i).as_bytes());
                    log.push(b'\n');
                }
            }
        }
    }

    #[test]
    fn the_servers_own_records_of_a_session_are_known_by_their_first_bytes() {
        assert!(of_a_session(
            br#"{"type":"text_input","ts_ms":1.5e3,"session_id":"s","text":""}"#
        ));
        for not in [
            &br#"{"type":"text_input","ts_ms":1,"text":"","session_id":"s"}"#[..],
            br#"{"type":"a\",\"ts_ms\":1,\"session_id\":\"","ts_ms":1}"#,
            br#"{"type":"text_input","ts_ms":1,"session_id":null}"#,
        ] {
            assert!(!of_a_session(not), "{}", String::from_utf8_lossy(not));
        }
    }

    #[test]
    fn a_new_session_after_the_index_reads_only_what_came_after_it() {
        let mut log = Vec::new();
        for i in 0..200 {
            log.extend_from_slice(record(i % 3, 0, i % 6, i % 4, i).as_bytes());
            log.push(b'\n');
        }
        let floors = Floors::default();
        assert!(session_tail(&Named(&log), Some("new"), 24, 1 << 20, Some(&floors)).is_empty());
        let end = log.len() as u64;
        assert_eq!(
            floors.get(Some((1, 1)), end, Some("new")),
            Known::From(end),
            "read back to the index: nothing of it before the end"
        );
        assert_eq!(floors.get(Some((1, 1)), end, Some("s0")), Known::From(0));
        assert_eq!(
            floors.get(Some((1, 1)), end, Some("other")),
            Known::After(end)
        );
        log.extend_from_slice(
            b"{\"type\":\"text_input\",\"ts_ms\":1,\"session_id\":\"other\",\"text\":\"hi\"}\n",
        );
        let found = session_tail(&Named(&log), Some("other"), 24, 1 << 20, Some(&floors));
        assert_eq!(held(&found), vec![(Kind::Input, "hi".to_string(), end)]);
    }
}
