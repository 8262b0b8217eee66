//! Rendering records as messages, in the three output formats.
//!
//! Every message's size is known before anything is written (the line's
//! escape overhead was measured while parsing), so output is either one
//! exactly-sized buffer or a stream of bounded batches, and in both cases
//! groups of messages are written in parallel at precomputed offsets.
//!
//! A record's message text is
//! `WM_KIND=<type>\nts_ms: <ts_ms>\nWM_JSON: <line>`, JSON-escaped as
//! `JSON.stringify` escapes it. Each message is followed by the format's
//! separator (`,` for JSON arrays, nothing for NDJSON, whose messages end in
//! `\n`); the array forms drop the last separator when they close.

use rayon::prelude::*;

use crate::escape::{self, JsNumber, put};
use crate::parse::Record;

pub(crate) mod cache;
pub(crate) mod fields;
pub(crate) mod request;
mod stream;
pub(crate) mod xml;

pub use stream::{STREAM_BATCH, stream_messages};

/// An output format.
///
/// ```
/// use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};
///
/// let log = b"{\"type\":\"text_output\",\"ts_ms\":1,\"text\":\"ok\"}\n";
/// let replayed = replay(log, &ReplayOptions::default());
/// let current = CurrentRequest { text: "next?", session_id: Some("s1") };
/// for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
///     let body = String::from_utf8(replayed.render_request(format, SYSTEM_RULE, &current))?;
///     assert!(body.contains(r#""role":"assistant""#), "{format:?}");
///     assert!(body.contains(r"CURRENT_USER_REQUEST\nsession_id: s1\nuser_text: next?"));
/// }
/// let format: Format = "openai".parse()?;
/// assert_eq!(format, Format::OpenAi);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Anthropic Messages: `{"system":…,"messages":[{"role":…,"content":[{"type":"text","text":…}]},…]}`.
    #[default]
    Anthropic,
    /// OpenAI Chat Completions: `{"messages":[{"role":"system","content":…},{"role":…,"content":…},…]}`.
    OpenAi,
    /// One `{"role":…,"content":…}` object per line, no envelope.
    Ndjson,
    /// The XML injection format: a `<memory_context>` (or, for a session
    /// delta, `<memory_delta>`) document with one
    /// `<record kind="…" ts_ms="…">line</record>` element per record, the
    /// line being the record's JSON.
    Xml,
}

impl Format {
    /// The format's name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Anthropic => "anthropic",
            Format::OpenAi => "openai",
            Format::Ndjson => "ndjson",
            Format::Xml => "xml",
        }
    }

    pub(crate) fn open(self, role: Role) -> &'static [u8] {
        match (self, role) {
            (Format::Anthropic, Role::User) => {
                br#"{"role":"user","content":[{"type":"text","text":""#
            }
            (Format::Anthropic, Role::Assistant) => {
                br#"{"role":"assistant","content":[{"type":"text","text":""#
            }
            (Format::Anthropic, Role::System) => unreachable!("system is not a message"),
            (Format::Xml, _) => unreachable!("xml messages are elements"),
            (_, Role::User) => br#"{"role":"user","content":""#,
            (_, Role::Assistant) => br#"{"role":"assistant","content":""#,
            (_, Role::System) => br#"{"role":"system","content":""#,
        }
    }

    pub(crate) fn close(self) -> &'static [u8] {
        match self {
            Format::Anthropic => b"\"}]}",
            Format::OpenAi => b"\"}",
            Format::Ndjson => b"\"}\n",
            Format::Xml => b"</record>\n",
        }
    }

    pub(crate) fn separator(self) -> &'static [u8] {
        match self {
            Format::Ndjson | Format::Xml => b"",
            _ => b",",
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "anthropic" => Ok(Format::Anthropic),
            "openai" => Ok(Format::OpenAi),
            "ndjson" => Ok(Format::Ndjson),
            "xml" => Ok(Format::Xml),
            _ => Err(format!(
                "unknown format {s:?} (expected anthropic, openai, ndjson or xml)"
            )),
        }
    }
}

/// A message's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `user`: every record but `text_output`, and the current request.
    User,
    /// `assistant`: `text_output` records.
    Assistant,
    /// `system`: the system prompt, in formats that carry it as a message.
    System,
}

const PENDING_PREFIX: &[u8] = b"PENDING_USER_INPUT\\n";
const KIND_PREFIX: &[u8] = b"WM_KIND=";
const TS_PREFIX: &[u8] = b"\\nts_ms: ";
const JSON_PREFIX: &[u8] = b"\\nWM_JSON: ";

#[inline]
fn role(r: &Record) -> Role {
    if r.is_output() {
        Role::Assistant
    } else {
        Role::User
    }
}

/// Bytes of one record's message, separator included.
#[inline]
pub(crate) fn message_len(r: &Record, log: &[u8], format: Format) -> usize {
    if format == Format::Xml {
        return crate::render::xml::element_len(r, log);
    }
    let pending = if r.is_pending() {
        PENDING_PREFIX.len()
    } else {
        0
    };
    let kind_len = if r.kind_escaped() {
        escape::transcoded_len(r.kind_raw(log))
    } else {
        r.kind_raw(log).len()
    };
    format.open(role(r)).len()
        + pending
        + KIND_PREFIX.len()
        + kind_len
        + TS_PREFIX.len()
        + r.ts_text(log)
            .map_or_else(|| JsNumber::len_of(r.ts), <[u8]>::len)
        + JSON_PREFIX.len()
        + r.len as usize
        + r.escape_extra as usize
        + format.close().len()
        + format.separator().len()
}

/// Writes one record's message and separator; returns bytes written.
/// (Inlined into each loop that calls it: as a call, it was 3.7% of the
/// profile of `respond` on the bench corpus.)
#[inline(always)]
fn write_message(r: &Record, log: &[u8], format: Format, out: &mut [u8]) -> usize {
    if format == Format::Xml {
        return crate::render::xml::write_element(r, log, out);
    }
    let mut w = put(out, 0, format.open(role(r)));
    if r.is_pending() {
        w = put(out, w, PENDING_PREFIX);
    }
    w = put(out, w, KIND_PREFIX);
    if r.kind_escaped() {
        w += escape::write_transcoded(r.kind_raw(log), &mut out[w..]);
    } else {
        w = put(out, w, r.kind_raw(log));
    }
    w = put(out, w, TS_PREFIX);
    w = match r.ts_text(log) {
        Some(t) => put(out, w, t),
        None => put(out, w, JsNumber::new(r.ts).as_bytes()),
    };
    w = put(out, w, JSON_PREFIX);
    // The whole log, so the line's last partial block is read as a block.
    w += escape::write_escaped_in(log, r.span(), &mut out[w..]);
    w = put(out, w, format.close());
    put(out, w, format.separator())
}

/// A record's message text as the model reads it (unescaped):
/// `[PENDING_USER_INPUT\n]WM_KIND=<type>\nts_ms: <ts>\nWM_JSON: <line>`,
/// appended to `out` (what token windows count).
pub fn message_text(r: &Record, log: &[u8], out: &mut String) {
    if r.is_pending() {
        out.push_str("PENDING_USER_INPUT\n");
    }
    out.push_str("WM_KIND=");
    crate::parse::json::decode_string(r.kind_raw(log), out);
    out.push_str("\nts_ms: ");
    out.push_str(std::str::from_utf8(JsNumber::new(r.ts).as_bytes()).unwrap_or("0"));
    out.push_str("\nWM_JSON: ");
    out.push_str(&String::from_utf8_lossy(r.line(log)));
}

/// Records per parallel group: small enough to balance, large enough that
/// scheduling costs nothing.
const GROUP: usize = 512;

/// Each record's message length (separator included), computed in parallel.
pub(crate) fn message_lens(records: &[Record], log: &[u8], format: Format) -> Vec<u64> {
    let mut lens = vec![0u64; records.len()];
    lens.par_chunks_mut(GROUP)
        .zip(records.par_chunks(GROUP))
        .for_each(|(l, g)| {
            for (slot, r) in l.iter_mut().zip(g) {
                *slot = message_len(r, log, format) as u64;
            }
        });
    lens
}

/// Writes the messages of `records` (each followed by its separator) into
/// `out`, in parallel groups at offsets taken from `lens` (each message's
/// length, from [`message_lens`]); `out` must be exactly their sum.
///
/// Never panics when `log` changed after `lens` were measured (a file
/// truncated or rewritten under its memory map): a message that no longer
/// fits is cut, and a group that comes out short is padded with spaces. The
/// output is then meaningless, and the map's `verify` reports the change.
pub(crate) fn write_with_lens(
    records: &[Record],
    lens: &[u64],
    log: &[u8],
    format: Format,
    out: &mut [u8],
) {
    let sizes: Vec<u64> = lens.chunks(GROUP).map(|l| l.iter().sum()).collect();
    let seq = Sequence::from(records);
    let cuts = seq.cuts();
    write_groups(seq, &cuts, 0..sizes.len(), &sizes, log, format, out);
}

/// Writes the messages of `records`, one after another on this thread,
/// into `out` (exactly their length); like [`write_with_lens`], a log that
/// changed after they were measured leaves meaningless bytes, not a panic.
pub(crate) fn write_each(records: &[Record], log: &[u8], format: Format, out: &mut [u8]) {
    let mut w = 0;
    for r in records {
        w += write_message(r, log, format, &mut out[w..]);
    }
    out[w..].fill(b' ');
}

/// Records in replay order, held as two lists each in that order: the
/// records that were in order in the log, and the late ones, sorted
/// ([`crate::order::merge_late`]'s order, which merging them gives). The
/// render reads them merged, without moving every record into one list.
#[derive(Debug, Clone, Copy)]
pub struct Sequence<'a> {
    /// The records that were in order in the log.
    pub kept: &'a [Record],
    /// The late records, sorted by `ts_ms` (then file order).
    pub late: &'a [Record],
}

impl<'a> From<&'a [Record]> for Sequence<'a> {
    /// Records already in one list, in replay order.
    fn from(records: &'a [Record]) -> Self {
        Sequence {
            kept: records,
            late: &[],
        }
    }
}

impl<'a> From<&'a Vec<Record>> for Sequence<'a> {
    /// Records already in one list, in replay order.
    fn from(records: &'a Vec<Record>) -> Self {
        Sequence::from(records.as_slice())
    }
}

impl<'a> Sequence<'a> {
    fn len(&self) -> usize {
        self.kept.len() + self.late.len()
    }

    /// For each group of [`GROUP`] records in replay order, and the end, how
    /// many kept records come before it (the late ones before it are the
    /// rest): `groups + 1` cuts.
    fn cuts(&self) -> Vec<usize> {
        let n = self.len();
        let groups = n.div_ceil(GROUP);
        let mut cuts = Vec::with_capacity(groups + 1);
        cuts.push(0);
        for g in 1..=groups {
            let o = (g * GROUP).min(n);
            let prev = cuts[g - 1];
            // Each cut is within a group of the one before: a binary search
            // over at most GROUP records next to the ones the search before
            // read, not over the whole list (whose probes would each miss
            // the cache).
            let lo = prev.max(o.saturating_sub(self.late.len()));
            let hi = (prev + GROUP).min(o).min(self.kept.len());
            cuts.push(crate::order::co_rank_within(
                self.kept, self.late, o, lo, hi,
            ));
        }
        cuts
    }

    /// Group `g`'s records: its part of each list.
    fn group(&self, cuts: &[usize], g: usize) -> (&'a [Record], &'a [Record]) {
        let n = self.len();
        let (from, to) = (g * GROUP, ((g + 1) * GROUP).min(n));
        (
            &self.kept[cuts[g]..cuts[g + 1]],
            &self.late[from - cuts[g]..to - cuts[g + 1]],
        )
    }
}

/// The size of each group of [`GROUP`] records' messages (separators
/// included), computed in parallel.
fn group_sizes(seq: Sequence<'_>, cuts: &[usize], log: &[u8], format: Format) -> Vec<u64> {
    (0..cuts.len() - 1)
        .into_par_iter()
        .map(|g| {
            let (kept, late) = seq.group(cuts, g);
            kept.iter()
                .chain(late)
                .map(|r| message_len(r, log, format) as u64)
                .sum()
        })
        .collect()
}

/// Writes the messages of groups `groups` of `seq` (each message followed by
/// its separator) into `out`, one parallel task per group, each group at the
/// offset its size (`sizes[k]` for group `groups.start + k`) puts it; `out`
/// must be exactly their sum.
fn write_groups(
    seq: Sequence<'_>,
    cuts: &[usize],
    groups: std::ops::Range<usize>,
    sizes: &[u64],
    log: &[u8],
    format: Format,
    out: &mut [u8],
) {
    let mut slices = Vec::with_capacity(sizes.len());
    let mut rest = out;
    for &size in sizes {
        let (head, tail) = rest.split_at_mut(size as usize);
        slices.push(head);
        rest = tail;
    }
    debug_assert!(rest.is_empty(), "output buffer larger than the messages");
    groups
        .into_par_iter()
        .zip(slices.into_par_iter())
        .for_each(|(g, slice)| {
            let (kept, mut late) = seq.group(cuts, g);
            let mut w = 0;
            // The two lists merged, reading each front to back (a binary
            // search for each late record's place would miss the cache at
            // every probe: these records were last read long ago).
            if !late.is_empty() {
                let mut next = crate::order::order(&late[0]);
                for r in kept {
                    let key = crate::order::order(r);
                    while next < key {
                        w += write_message(&late[0], log, format, &mut slice[w..]);
                        late = &late[1..];
                        next = late
                            .first()
                            .map_or((u64::MAX, u64::MAX), crate::order::order);
                    }
                    w += write_message(r, log, format, &mut slice[w..]);
                }
            } else {
                for r in kept {
                    w += write_message(r, log, format, &mut slice[w..]);
                }
            }
            for r in late {
                w += write_message(r, log, format, &mut slice[w..]);
            }
            slice[w..].fill(b' ');
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReplayOptions, replay};

    /// A log whose messages have escapes in the kind and the line.
    pub(super) fn log() -> Vec<u8> {
        let mut log = Vec::new();
        for i in 0..3000 {
            let line = format!(
                "{{\"type\":\"k\\u00e9\\\\{i}\",\"ts_ms\":{},\"t\":\"a\\\"b\\\\c\\td {}\"}}\n",
                i % 7,
                "x".repeat(i % 90)
            );
            log.extend_from_slice(line.as_bytes());
        }
        log
    }

    /// Measures the messages on `log`, then writes them from `changed`: what a
    /// file rewritten under its memory map between the two looks like.
    fn render_changed(log: &[u8], changed: &[u8], format: Format) -> Vec<u8> {
        let r = replay(log, &ReplayOptions::default());
        assert_eq!(r.records().len(), 3000);
        let lens = message_lens(r.records(), log, format);
        let mut out = vec![0u8; lens.iter().sum::<u64>() as usize];
        write_with_lens(r.records(), &lens, changed, format, &mut out);
        out
    }

    #[test]
    fn a_source_changed_after_measuring_never_panics() {
        let log = log();
        let n = log.len();
        let variants: Vec<(&str, Vec<u8>)> = vec![
            // The tail truncated under the map: the zero page's NULs escape
            // to six bytes each.
            ("zeroed tail", {
                let mut c = log.clone();
                c[n / 2..].fill(0);
                c
            }),
            ("all NULs", vec![0u8; n]),
            // Every byte a quote, or a backslash (a kind ending in `\`).
            ("all quotes", vec![b'"'; n]),
            ("all backslashes", vec![b'\\'; n]),
            // Fewer escapes than measured: the output comes out short.
            (
                "no escapes",
                log.iter()
                    .map(|&b| if b == b'\\' || b == b'"' { b'a' } else { b })
                    .collect(),
            ),
        ];
        for format in [Format::Anthropic, Format::OpenAi, Format::Ndjson] {
            let same = render_changed(&log, &log, format);
            for (name, changed) in &variants {
                let out = render_changed(&log, changed, format);
                assert_eq!(out.len(), same.len(), "{name}, {format:?}");
                assert_ne!(out, same, "{name}, {format:?}");
            }
        }
    }

    #[test]
    fn batches_cover_every_group_once_and_close_at_the_batch_size() {
        let sizes: Vec<u64> = (0..50u64).map(|i| (i * 7919) % 1000 + 1).collect();
        for batch in [0, 1, 500, 999, 1000, 3000, 1 << 30] {
            let got = stream::batches(&sizes, batch);
            let mut next = 0;
            for (groups, size) in &got {
                assert_eq!(groups.start, next, "batch {batch}");
                assert!(!groups.is_empty());
                let sum: u64 = sizes[groups.clone()].iter().sum();
                assert_eq!(*size as u64, sum);
                // Without its last group, a batch is under the size.
                let before: u64 = sizes[groups.start..groups.end - 1].iter().sum();
                assert!(groups.len() == 1 || (before as usize) < batch);
                next = groups.end;
            }
            assert_eq!(next, sizes.len());
        }
        assert!(stream::batches(&[], 10).is_empty());
    }

    #[test]
    fn an_unchanged_source_fills_the_buffer_exactly() {
        let log = log();
        let out = render_changed(&log, &log, Format::OpenAi);
        // Messages joined by their separators, no padding anywhere.
        let body = format!("[{}]", std::str::from_utf8(&out[..out.len() - 1]).unwrap());
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3000);
        assert!(!out.ends_with(b" "));
    }
}
