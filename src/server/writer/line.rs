//! One line to append, built by the routes and stamped with the writer's
//! clock when it is written; how a batch of them is laid out in the file.

use crate::append::now_ms;

use super::Appended;

/// One line to append: `prefix`, then (when `stamp`) the `ts_ms` the writer
/// assigns, then `suffix`. The writer adds the `\n`.
#[derive(Debug, Clone)]
pub struct Line {
    prefix: Vec<u8>,
    stamp: bool,
    suffix: Vec<u8>,
    /// Stamped no lower than this (see [`Line::at_least`]).
    floor: Option<f64>,
}

impl Line {
    /// A chat turn: `{"type":KIND,"ts_ms":…,"session_id":…,"text":…}`, plus
    /// `"stop_reason"` when given.
    pub fn turn(
        kind: &str,
        session_id: Option<&str>,
        text: &str,
        stop_reason: Option<&str>,
    ) -> Line {
        let prefix = format!(
            "{{\"type\":{},\"ts_ms\":",
            serde_json::to_string(kind).expect("a string serialises")
        );
        let mut suffix = String::new();
        if let Some(id) = session_id {
            suffix.push_str(",\"session_id\":");
            suffix.push_str(&serde_json::to_string(id).expect("a string serialises"));
        }
        suffix.push_str(",\"text\":");
        suffix.push_str(&serde_json::to_string(text).expect("a string serialises"));
        if let Some(r) = stop_reason {
            suffix.push_str(",\"stop_reason\":");
            suffix.push_str(&serde_json::to_string(r).expect("a string serialises"));
        }
        suffix.push('}');
        Line {
            prefix: prefix.into_bytes(),
            stamp: true,
            suffix: suffix.into_bytes(),
            floor: None,
        }
    }

    /// [`Line::turn`] held to `max` bytes (a record's limit,
    /// `--max-record-bytes`): a text that would make the line longer is cut
    /// (at a character, to what fits), and the record says so with
    /// `"text_cut":{"bytes":N}`, `N` the whole text's length in bytes. A
    /// model that ignores its token limit then grows the log, and every
    /// later request, by at most the limit a turn. Returns the line and
    /// whether the text was cut.
    pub fn turn_within(
        kind: &str,
        session_id: Option<&str>,
        text: &str,
        stop_reason: Option<&str>,
        max: usize,
    ) -> (Line, Option<usize>) {
        let whole = Line::turn(kind, session_id, text, stop_reason);
        if whole.len() <= max {
            return (whole, None);
        }
        let cut_note = format!(",\"text_cut\":{{\"bytes\":{}}}", text.len());
        let room = max
            .saturating_sub(whole.len() - json_len(text))
            .saturating_sub(cut_note.len());
        let kept = fit_json(text, room);
        let mut line = Line::turn(kind, session_id, kept, stop_reason);
        line.suffix.pop();
        line.suffix.extend_from_slice(cut_note.as_bytes());
        line.suffix.push(b'}');
        (line, Some(text.len()))
    }

    /// A record written as given (it must be one line of JSON).
    pub fn verbatim(record: Vec<u8>) -> Line {
        Line {
            prefix: record,
            stamp: false,
            suffix: Vec::new(),
            floor: None,
        }
    }

    /// A JSON object without a `ts_ms`: the writer's clock is put first in
    /// it. `object` must start with `{`.
    pub fn stamped_object(object: &[u8]) -> Line {
        debug_assert_eq!(object.first(), Some(&b'{'));
        let rest = &object[1..];
        let empty = rest.iter().all(|b| b.is_ascii_whitespace() || *b == b'}');
        let mut suffix = Vec::with_capacity(rest.len() + 1);
        if !empty {
            suffix.push(b',');
        }
        suffix.extend_from_slice(if empty { b"}" } else { rest });
        Line {
            prefix: b"{\"ts_ms\":".to_vec(),
            stamp: true,
            suffix,
            floor: None,
        }
    }

    /// A stamped line whose `ts_ms` is at least `floor` (when given), the
    /// clock's otherwise: a keyed-memory record is stamped no lower than
    /// the newest `ts_ms` of its key, so it wins over every earlier record
    /// of that key (equal stamps go by file order, and it is written last),
    /// whatever stamp a client gave those. The writer's clock is not moved
    /// by it: the log's other records keep the time.
    pub fn at_least(mut self, floor: Option<f64>) -> Line {
        self.floor = floor;
        self
    }

    pub(crate) fn len(&self) -> usize {
        self.prefix.len() + self.suffix.len() + if self.stamp { 20 } else { 0 } + 1
    }
}

pub(crate) use crate::escape::{fit_json, json_len};

/// Renders `lines` at the end of `buf` (stamping each with the clock, never
/// below `last_ts`); returns where each went in `buf`.
pub(crate) fn render(buf: &mut Vec<u8>, lines: &[Line], last_ts: &mut u64) -> Vec<Appended> {
    let mut appended = Vec::with_capacity(lines.len());
    for l in lines {
        let start = buf.len();
        buf.extend_from_slice(&l.prefix);
        let ts = if l.stamp {
            let ts = now_ms().max(*last_ts);
            *last_ts = ts;
            match l.floor.filter(|f| *f > ts as f64) {
                None => {
                    buf.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
                    Some(ts)
                }
                // Integers JavaScript reads exactly: the floor, rounded up.
                Some(f) if f <= 9_007_199_254_740_991.0 => {
                    let at = f.ceil() as u64;
                    buf.extend_from_slice(itoa::Buffer::new().format(at).as_bytes());
                    Some(at)
                }
                // Beyond: the floor itself, as JavaScript writes it (an
                // infinite one as a number JSON readers take for it).
                Some(f) if f.is_finite() => {
                    buf.extend_from_slice(crate::escape::JsNumber::new(f).as_bytes());
                    None
                }
                Some(_) => {
                    buf.extend_from_slice(b"1e400");
                    None
                }
            }
        } else {
            None
        };
        buf.extend_from_slice(&l.suffix);
        buf.push(b'\n');
        appended.push(Appended {
            ts_ms: ts,
            offset: start as u64,
            len: (buf.len() - start) as u64,
        });
    }
    appended
}
