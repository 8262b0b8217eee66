//! What a selection of the live state reads its messages from: every
//! message held in replay order, or, with summaries or facts, a view of
//! the ones that are replayed (the newest summary apart, to go first); and
//! the rendered messages' helpers (their text, their kind, the pending
//! mark) the selection uses.

use bytes::{Bytes, BytesMut};

use super::segments::Segment;
use crate::render::{self, Format, cache, xml};
use crate::replay::rendered::{FACT, SUMMARY};
use crate::select::{Selection, memory};

/// One message of a view: its segment, its entry, and where its bytes
/// start in the segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Item {
    pub(super) si: usize,
    pub(super) ei: usize,
    pub(super) at: u64,
}

/// The messages a selection with summaries or facts replays, in replay
/// order, without the newest summary (`summary`, replayed first).
pub(super) struct View {
    pub(super) items: Vec<Item>,
    pub(super) summary: Option<Item>,
}

/// The view of `segments` for `sel` (see [`crate::Selection::summaries`]
/// and [`crate::Selection::facts`]), given the newest valid summary (its
/// offset and cover). Walks every held entry: for a selection the state
/// was not shaped for (its own selection's messages are the held entries,
/// the summary apart).
pub(super) fn build(
    segments: &[Segment],
    sel: &Selection,
    newest: Option<(u64, (u64, u64))>,
) -> View {
    let newest = if sel.summaries { newest } else { None };
    let mut items = Vec::new();
    let mut summary = None;
    for (si, s) in segments.iter().enumerate() {
        let mut at = 0u64;
        for (ei, e) in s.entries.iter().enumerate() {
            let item = Item { si, ei, at };
            at += e.len;
            if sel.facts && e.flags & FACT != 0 {
                continue;
            }
            if sel.summaries && e.flags & SUMMARY != 0 {
                if newest.is_some_and(|(n, _)| n == e.offset) {
                    summary = Some(item);
                }
                continue;
            }
            if let Some((n, cover)) = newest
                && memory::covered(n, cover, e.key, e.offset)
            {
                continue;
            }
            items.push(item);
        }
    }
    View { items, summary }
}

/// The chunks of `msgs` (in order): runs of adjacent messages as slices of
/// their segment, message `mark` with the pending mark, and `member` after
/// each message of `breakpoints` (indexes into `msgs`, ascending).
pub(super) fn chunks(
    segments: &[Segment],
    msgs: &[Item],
    mark: Option<usize>,
    breakpoints: &[usize],
    member: &'static [u8],
    format: Format,
) -> Vec<Bytes> {
    use crate::replay::rendered::OUTPUT;
    let mut out = Vec::new();
    // The run being gathered: segment, start, end.
    let mut run: Option<(usize, u64, u64)> = None;
    let flush = |run: &mut Option<(usize, u64, u64)>, out: &mut Vec<Bytes>| {
        if let Some((si, from, to)) = run.take()
            && to > from
        {
            out.push(segments[si].bytes.slice(from as usize..to as usize));
        }
    };
    for (i, m) in msgs.iter().enumerate() {
        let e = segments[m.si].entries[m.ei];
        let end = m.at + e.len;
        let special = mark == Some(i) || breakpoints.binary_search(&i).is_ok();
        if !special {
            match &mut run {
                Some((si, _, to)) if *si == m.si && *to == m.at => *to = end,
                _ => {
                    flush(&mut run, &mut out);
                    run = Some((m.si, m.at, end));
                }
            }
            continue;
        }
        flush(&mut run, &mut out);
        let mut msg = segments[m.si].bytes.slice(m.at as usize..end as usize);
        if mark == Some(i) {
            msg = mark_pending(&msg, format, e.flags & OUTPUT != 0);
        }
        if breakpoints.binary_search(&i).is_ok() {
            let tail = msg.split_off(msg.len() - cache::MARKER_FROM_END);
            out.push(msg);
            out.push(Bytes::from_static(member));
            out.push(tail);
        } else {
            out.push(msg);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// Appends a rendered message's text (its JSON string content, unescaped) to
/// `out`.
pub(super) fn message_text_of(msg: &[u8], format: Format, output: bool, out: &mut String) {
    if format == Format::Xml {
        // The element as the model reads it.
        out.push_str(&String::from_utf8_lossy(msg));
        return;
    }
    let role = if output {
        render::Role::Assistant
    } else {
        render::Role::User
    };
    let open = format.open(role).len();
    let close = format.close().len() + format.separator().len();
    let content = msg
        .get(open..msg.len().saturating_sub(close))
        .unwrap_or(&[]);
    crate::parse::json::decode_string(content, out);
}

/// Whether a rendered message is a record of type `kind`: its text starts
/// `WM_KIND=<kind>\n` (its element's `kind` attribute, in XML).
pub(super) fn message_kind_is(msg: &[u8], format: Format, output: bool, kind: &str) -> bool {
    if format == Format::Xml {
        let k = kind.as_bytes();
        let mut attr = vec![0u8; k.len() + xml::text_extra(k, true)];
        xml::write_text(k, &mut attr, true);
        let open = b"<record kind=\"";
        return msg.starts_with(open)
            && msg[open.len()..].starts_with(&attr)
            && msg.get(open.len() + attr.len()) == Some(&b'"');
    }
    let role = if output {
        render::Role::Assistant
    } else {
        render::Role::User
    };
    let mut text = String::new();
    let open = format.open(role).len();
    let want = format!("WM_KIND={kind}\n");
    // Only the message's start is decoded: enough for its first line.
    let end = msg.len().min(open + 6 * want.len() + 16);
    crate::parse::json::decode_string(msg.get(open..end).unwrap_or(&[]), &mut text);
    text.starts_with(&want)
}

/// A rendered message with `PENDING_USER_INPUT\n` as its first line.
pub(super) fn mark_pending(msg: &Bytes, format: Format, output: bool) -> Bytes {
    if format == Format::Xml {
        // `" pending="true` before the end of the start tag (the first `">`:
        // the kind attribute has its quotes escaped).
        let Some(k) = memchr::memmem::find(msg, b"\">") else {
            return msg.clone();
        };
        let mut b = BytesMut::with_capacity(msg.len() + 16);
        b.extend_from_slice(&msg[..k]);
        b.extend_from_slice(b"\" pending=\"true");
        b.extend_from_slice(&msg[k..]);
        return b.freeze();
    }
    let role = if output {
        render::Role::Assistant
    } else {
        render::Role::User
    };
    let open = format.open(role).len().min(msg.len());
    let mut b = BytesMut::with_capacity(msg.len() + 20);
    b.extend_from_slice(&msg[..open]);
    b.extend_from_slice(b"PENDING_USER_INPUT\\n");
    b.extend_from_slice(&msg[open..]);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use crate::render::cache::{CacheMemory, CachePolicy};
    use crate::select::Selection;
    use crate::{CurrentRequest, Format, LiveReplay, ReplayOptions, replay};

    /// Summaries (some late, some invalid), facts (some deleting) and late
    /// records appended turn after turn: the live body with summaries and
    /// facts is the one-shot body, with and without windows, the pending
    /// mark and cache breakpoints.
    #[test]
    fn live_summaries_and_facts_are_the_one_shot_body_turn_after_turn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let current = CurrentRequest {
            text: "now",
            session_id: None,
        };
        let sels = [
            Selection {
                summaries: true,
                facts: true,
                ..Selection::default()
            },
            Selection {
                summaries: true,
                tail: Some(9),
                mark_pending: true,
                ..Selection::default()
            },
            Selection {
                facts: true,
                max_tokens: Some(400),
                tokenizer: crate::Tokenizer::Bytes,
                ..Selection::default()
            },
        ];
        for (k, sel) in sels.iter().enumerate() {
            for (format, cache) in [
                (Format::Anthropic, Some(CachePolicy::default())),
                (Format::OpenAi, None),
            ] {
                for pruned in [false, true] {
                    let mut file = std::fs::File::create(&path).unwrap();
                    let mut live = LiveReplay::new(&path, format, ReplayOptions::default());
                    if pruned {
                        // The state's own selection: it lets go of what the
                        // newest summary covers.
                        live = live.with_selection(sel.clone());
                    }
                    let mut spec = crate::RequestSpec::new(format, crate::SYSTEM_RULE, current);
                    spec.cache = cache;
                    let mut written = 0u64;
                    let mut offsets = Vec::new();
                    let mut line =
                        |file: &mut std::fs::File, offsets: &mut Vec<u64>, text: String| {
                            offsets.push(written);
                            written += text.len() as u64 + 1;
                            writeln!(file, "{text}").unwrap();
                        };
                    for turn in 0..14u64 {
                        let ts = 100 + turn * 10;
                        line(
                            &mut file,
                            &mut offsets,
                            format!(r#"{{"type":"text_input","ts_ms":{ts},"text":"q{turn}"}}"#),
                        );
                        line(
                            &mut file,
                            &mut offsets,
                            format!(
                                r#"{{"type":"wm_fact","ts_ms":{},"key":"k{}","value":{}}}"#,
                                ts + 1,
                                turn % 4,
                                if turn % 5 == 4 {
                                    "null".to_string()
                                } else {
                                    format!("[{turn}]")
                                }
                            ),
                        );
                        line(
                            &mut file,
                            &mut offsets,
                            format!(r#"{{"type":"wm_event","ts_ms":{},"late":true}}"#, ts - 15),
                        );
                        if turn % 3 == 2 {
                            // A summary covering an earlier record, written now.
                            let o = offsets[offsets.len() / 2];
                            line(
                                &mut file,
                                &mut offsets,
                                format!(
                                    r#"{{"type":"wm_summary","ts_ms":{ts},"covers":{{"ts_ms":{},"offset":{o}}},"text":"s{turn}"}}"#,
                                    100 + (turn / 2) * 10
                                ),
                            );
                            // Written after it, sorted into what it covers: replayed.
                            line(
                                &mut file,
                                &mut offsets,
                                format!(
                                    r#"{{"type":"wm_event","ts_ms":{},"after":true}}"#,
                                    99 + (turn / 2) * 10
                                ),
                            );
                        }
                        if turn == 12 {
                            // A newer summary that covers less than the last.
                            line(
                                &mut file,
                                &mut offsets,
                                format!(
                                    r#"{{"type":"wm_summary","ts_ms":{ts},"covers":{{"ts_ms":105,"offset":0}},"text":"less"}}"#
                                ),
                            );
                        }
                        if turn % 4 == 3 {
                            line(
                                &mut file,
                                &mut offsets,
                                format!(
                                    r#"{{"type":"wm_summary","ts_ms":{ts},"covers":{{"ts_ms":1}},"text":"invalid"}}"#
                                ),
                            );
                        }
                        line(
                            &mut file,
                            &mut offsets,
                            format!(
                                r#"{{"type":"text_output","ts_ms":{},"text":"a{turn}"}}"#,
                                ts + 2
                            ),
                        );
                        let (got, _) = live
                            .request_body_with(&spec, sel, None, &mut CacheMemory::default())
                            .unwrap();
                        let bytes = std::fs::read(&path).unwrap();
                        let mut one = replay(&bytes, &ReplayOptions::default());
                        one.select(sel, None);
                        let want = one.render_request_with(&spec);
                        assert_eq!(
                            String::from_utf8(got).unwrap(),
                            String::from_utf8(want).unwrap(),
                            "selection {k} {format:?} turn {turn} pruned {pruned}"
                        );
                        if pruned {
                            // A first build: what the newest summary covers is
                            // never rendered.
                            let mut fresh =
                                LiveReplay::new(&path, format, ReplayOptions::default())
                                    .with_selection(sel.clone());
                            let (again, _) = fresh
                                .request_body_with(&spec, sel, None, &mut CacheMemory::default())
                                .unwrap();
                            assert_eq!(
                                String::from_utf8(again).unwrap(),
                                String::from_utf8(one.render_request_with(&spec)).unwrap(),
                                "fresh: selection {k} {format:?} turn {turn}"
                            );
                        }
                        if pruned && sel.summaries && turn == 11 {
                            let held = live.info().records;
                            assert!(held < one.stats().parsed_entries / 2, "{held} held");
                        }
                    }
                }
            }
        }
    }
}
