//! With summaries, the held messages follow what can still be replayed:
//! once a summary covers records, their rendered messages are let go (the
//! parse has read them; a one-shot replay with summaries leaves them out
//! too), so the state holds the uncovered tail, the newest summary and the
//! memos (summaries and facts), not the whole log.

use bytes::BytesMut;

use super::LiveReplay;
use super::segments::{DROPPED, Segment};
use crate::ReplayOptions;
use crate::parse::LineParser;
use crate::replay::rendered::{Entry, Memo, SUMMARY};
use crate::select::memory;

/// The newest valid summary among the whole lines of `bytes` (a log from
/// its start), looked for from the end: its offset and cover. A first
/// build with summaries skips rendering what it covers (the parse checks
/// that it found the same one).
pub(super) fn newest_summary(bytes: &[u8], options: &ReplayOptions) -> Option<(u64, (u64, u64))> {
    let end = memchr::memrchr(b'\n', bytes)? + 1;
    let data = &bytes[..end];
    let mut parser = LineParser::new(options.max_depth);
    let mut seen = usize::MAX;
    for hit in memchr::memmem::rfind_iter(data, memory::SUMMARY.as_bytes()) {
        let start = memchr::memrchr(b'\n', &data[..hit]).map_or(0, |i| i + 1);
        if start == seen {
            continue;
        }
        seen = start;
        let stop = start + memchr::memchr(b'\n', &data[start..])?;
        let line = &data[start..stop];
        if let Ok(r) = parser.parse(line, 0)
            && r.kind_is(line, memory::SUMMARY)
            && let Some(cover) = memory::cover_of(&r, line)
        {
            return Some((start as u64, cover));
        }
    }
    None
}

impl LiveReplay {
    /// Drops the messages the newest summary covers, and the summaries
    /// other than it, when the state's selection has
    /// [`crate::Selection::summaries`] and the newest summary changed since
    /// the last look. Segments partly covered are copied, so their bytes
    /// are freed. A newer summary that covers less than the last one asks
    /// for a fresh build instead (`regressed`).
    pub(super) fn prune_covered(&mut self) {
        if !self.selection.summaries {
            return;
        }
        let newest = self.memos.iter().rev().find_map(|m| match m {
            Memo::Summary { at, cover } => Some((*at, *cover)),
            Memo::Fact { .. } => None,
        });
        let Some((n, cover)) = newest else {
            return;
        };
        match self.pruned_for {
            Some((at, _)) if at == n => return,
            // A newer summary that covers less than the one pruned for:
            // records let go are replayed again, so the state is built
            // afresh from the file (by the caller).
            Some((_, old)) if cover < old => {
                self.regressed = true;
                return;
            }
            _ => {}
        }
        self.pruned_for = Some((n, cover));
        let removed = self.rewrite(|e: &Entry| {
            let gone = if e.flags & SUMMARY != 0 {
                e.offset != n
            } else {
                memory::covered(n, cover, e.key, e.offset)
            };
            if gone { Fate::Remove } else { Fate::Keep }
        });
        self.records -= removed.0;
        self.rendered -= removed.1;
        // Only the newest summary's memo matters from now on.
        self.memos
            .retain(|m| !matches!(m, Memo::Summary { at, .. } if *at != n));
    }

    /// Lets go of the messages of the records before `below` (the
    /// (key, offset) of the lowest record any window of the state's own
    /// selection can read, see [`crate::select::window`]'s `floor`): their
    /// entries stay, with no bytes and the [`DROPPED`] flag, so that the
    /// order, the pending prompt and remembered starts are what a one-shot
    /// replay sees. The newest summary (replayed first) is kept. Done when
    /// it frees a quarter of what is held, or 1 MiB.
    pub(super) fn let_go_before(&mut self, below: (u64, u64)) {
        let summaries = self.selection.summaries;
        let goes = |e: &Entry| {
            e.flags & DROPPED == 0
                && (e.key, e.offset) < below
                && !(summaries && e.flags & SUMMARY != 0)
        };
        let mut free = 0u64;
        for s in &self.segments {
            if s.entries
                .first()
                .is_some_and(|e| (e.key, e.offset) >= below)
            {
                break;
            }
            free += s
                .entries
                .iter()
                .filter(|e| goes(e))
                .map(|e| e.len)
                .sum::<u64>();
        }
        if free < (1 << 20) && free.saturating_mul(4) < self.rendered {
            return;
        }
        let (_, freed) = self.rewrite(|e| if goes(e) { Fate::Empty } else { Fate::Keep });
        self.rendered -= freed;
        self.let_go = true;
    }

    /// Rewrites the held segments: each entry is kept, removed, or kept
    /// without its bytes ([`DROPPED`]). Segments with a change are copied,
    /// so their bytes are freed. Returns the entries removed and the bytes
    /// freed.
    fn rewrite(&mut self, fate: impl Fn(&Entry) -> Fate) -> (u64, u64) {
        let mut removed = (0u64, 0u64);
        let mut kept_segments = Vec::with_capacity(self.segments.len());
        for s in std::mem::take(&mut self.segments) {
            if s.entries.iter().all(|e| matches!(fate(e), Fate::Keep)) {
                kept_segments.push(s);
                continue;
            }
            let mut bytes = BytesMut::new();
            let mut entries = Vec::with_capacity(s.entries.len());
            let mut at = 0usize;
            for e in &s.entries {
                let len = e.len as usize;
                match fate(e) {
                    Fate::Keep => {
                        bytes.extend_from_slice(&s.bytes[at..at + len]);
                        entries.push(*e);
                    }
                    Fate::Remove => {
                        removed.0 += 1;
                        removed.1 += e.len;
                    }
                    Fate::Empty => {
                        removed.1 += e.len;
                        entries.push(Entry {
                            len: 0,
                            flags: e.flags | DROPPED,
                            ..*e
                        });
                    }
                }
                at += len;
            }
            if !entries.is_empty() {
                kept_segments.push(Segment {
                    bytes: bytes.freeze(),
                    entries,
                });
            }
        }
        self.segments = kept_segments;
        removed
    }
}

/// What [`LiveReplay::rewrite`] does with an entry.
enum Fate {
    Keep,
    Remove,
    Empty,
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use crate::render::cache::{CacheMemory, CachePolicy};
    use crate::select::{Selection, WindowStart};
    use crate::{CurrentRequest, Format, LiveReplay, ReplayOptions, Tokenizer, replay};

    /// A small deterministic generator (no dependency for a test).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// Windows of the state's own selection: turn after turn of random
    /// records (late ones, long ones, summaries, facts), the live body and
    /// report equal the one-shot ones with the start remembered from the
    /// turn before, while the state lets go of what lies before the window
    /// and holds a fraction of the rendered log.
    #[test]
    fn windows_let_go_of_what_lies_before_them_and_replay_the_one_shot_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let current = CurrentRequest {
            text: "now",
            session_id: None,
        };
        let base = Selection {
            tokenizer: Tokenizer::Bytes,
            ..Selection::default()
        };
        let sels = [
            Selection {
                tail: Some(12),
                ..base.clone()
            },
            Selection {
                tail: Some(20),
                trim_to: Some(0.5),
                start_on: Some("text_input".into()),
                mark_pending: true,
                ..base.clone()
            },
            Selection {
                max_tokens: Some(900),
                mark_pending: true,
                ..base.clone()
            },
            Selection {
                max_tokens: Some(1200),
                trim_to: Some(0.6),
                start_on: Some("text_output".into()),
                summaries: true,
                facts: true,
                ..base.clone()
            },
            Selection {
                tail: Some(30),
                max_tokens: Some(1500),
                start_on: Some("tool".into()),
                summaries: true,
                ..base.clone()
            },
            Selection {
                tail: Some(8),
                max_tokens: Some(2000),
                trim_to: Some(0.8),
                facts: true,
                ..base.clone()
            },
        ];
        for (k, sel) in sels.iter().enumerate() {
            for seed in 1..4u64 {
                let format = if seed == 2 {
                    Format::OpenAi
                } else {
                    Format::Anthropic
                };
                let mut spec = crate::RequestSpec::new(format, crate::SYSTEM_RULE, current);
                if format == Format::Anthropic {
                    spec.cache = Some(CachePolicy::default());
                }
                let mut rng = Lcg(seed * 7919 + k as u64);
                let mut file = std::fs::File::create(&path).unwrap();
                let mut live = LiveReplay::new(&path, format, ReplayOptions::default())
                    .with_selection(sel.clone());
                let (mut prev, mut one_prev): (Option<WindowStart>, Option<WindowStart>) =
                    (None, None);
                let (mut live_mem, mut one_mem) = (CacheMemory::default(), CacheMemory::default());
                let mut written = 0u64;
                let mut offsets: Vec<(u64, u64)> = Vec::new();
                let mut ts = 1000u64;
                for turn in 0..60u64 {
                    let mut lines = Vec::new();
                    for _ in 0..rng.below(8) {
                        ts += 1;
                        let pad = "x".repeat(rng.below(300) as usize);
                        let kind = ["wm_event", "text_input", "text_output", "tool"]
                            [rng.below(4) as usize];
                        // Now and then a record late by up to 40 ms.
                        let at = if rng.below(6) == 0 {
                            ts - rng.below(40)
                        } else {
                            ts
                        };
                        lines.push(format!(
                            r#"{{"type":"{kind}","ts_ms":{at},"text":"t{turn} {pad}"}}"#
                        ));
                    }
                    if rng.below(3) == 0 {
                        lines.push(format!(
                            r#"{{"type":"wm_fact","ts_ms":{ts},"key":"k{}","value":{}}}"#,
                            rng.below(3),
                            turn
                        ));
                    }
                    if turn % 9 == 8 && !offsets.is_empty() {
                        // A summary covering about the first two thirds.
                        let (cts, o) = offsets[offsets.len() * 2 / 3];
                        lines.push(format!(
                            r#"{{"type":"wm_summary","ts_ms":{ts},"covers":{{"ts_ms":{cts},"offset":{o}}},"text":"s{turn}"}}"#
                        ));
                    }
                    for l in lines {
                        let at: u64 = l
                            .split("\"ts_ms\":")
                            .nth(1)
                            .unwrap()
                            .split([',', '}'])
                            .next()
                            .unwrap()
                            .parse()
                            .unwrap();
                        offsets.push((at, written));
                        written += l.len() as u64 + 1;
                        writeln!(file, "{l}").unwrap();
                    }
                    let (got, report) = live
                        .request_body_with(&spec, sel, prev, &mut live_mem)
                        .unwrap();
                    let bytes = std::fs::read(&path).unwrap();
                    let mut one = replay(&bytes, &ReplayOptions::default());
                    let want_report = one.select(sel, one_prev);
                    let want = one.render_spec(&spec, &mut one_mem).unwrap();
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        String::from_utf8(want).unwrap(),
                        "selection {k} seed {seed} turn {turn}"
                    );
                    assert_eq!(report, want_report, "selection {k} seed {seed} turn {turn}");
                    prev = report.window_start;
                    one_prev = want_report.window_start;
                }
                // Everything rendered, for comparison.
                let mut whole = LiveReplay::new(&path, format, ReplayOptions::default());
                whole.refresh().unwrap();
                let held = live.rendered_len();
                assert!(
                    held * 3 < whole.rendered_len(),
                    "selection {k} seed {seed}: {held} of {} held",
                    whole.rendered_len()
                );
            }
        }
    }
}
