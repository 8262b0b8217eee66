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
        }
    }

    /// A record written as given (it must be one line of JSON).
    pub fn verbatim(record: Vec<u8>) -> Line {
        Line {
            prefix: record,
            stamp: false,
            suffix: Vec::new(),
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
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.prefix.len() + self.suffix.len() + if self.stamp { 20 } else { 0 } + 1
    }
}

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
            buf.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
            Some(ts)
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
