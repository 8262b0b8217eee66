//! With summaries, the held messages follow what can still be replayed:
//! once a summary covers records, their rendered messages are let go (the
//! parse has read them; a one-shot replay with summaries leaves them out
//! too), so the state holds the uncovered tail, the newest summary and the
//! memos (summaries and facts), not the whole log.

use bytes::BytesMut;

use super::segments::{DROPPED, INPUT, OUTPUT, Segment};
use super::{LiveReplay, SummaryMemo};
use crate::ReplayOptions;
use crate::parse::LineParser;
use crate::replay::rendered::{Entry, SUMMARY};
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
        let Some(SummaryMemo { at: n, cover, .. }) = self.summary else {
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
        let removed = self.rewrite(
            |_| true,
            |e: &Entry| {
                let gone = if e.flags & SUMMARY != 0 {
                    e.offset != n
                } else {
                    memory::covered(n, cover, e.key, e.offset)
                };
                if gone { Fate::Remove } else { Fate::Keep }
            },
        );
        // Messages let go lie before the bound they were let go for; a
        // cover past it covers them all (they were written before the
        // summary), so none is left standing without the ones it came
        // after.
        self.records -= removed.0;
        self.rendered -= removed.1;
        if removed.0 > 0 {
            self.find_last_io();
        }
    }

    /// The newest input or output held, looked for from the end (after
    /// entries were removed).
    fn find_last_io(&mut self) {
        self.last_io = None;
        for s in self.segments.iter().rev() {
            if let Some(e) = s
                .entries
                .iter()
                .rev()
                .find(|e| e.flags & (INPUT | OUTPUT) != 0)
            {
                self.last_io = Some((e.key, e.offset, e.flags));
                return;
            }
        }
    }

    /// Lets go of the messages of the records before `below` (the
    /// (key, offset) of the lowest record any window of the state's own
    /// selection can read, see [`crate::select::window`]'s `floor`): their
    /// entries stay, with no bytes and the [`DROPPED`] flag, so that the
    /// order, the pending prompt and remembered starts are what a one-shot
    /// replay sees. The newest summary (replayed first) is kept. Done when
    /// it frees a quarter of what is held, or 1 MiB.
    ///
    /// What was let go before is not looked at again: the entries from the
    /// last let go's bound to `below` are, once each (what was appended
    /// since, in a state whose window moves with the appends); a late
    /// record that lands below the bound is let go as it arrives
    /// ([`let_go_below_floor`](Self::let_go_below_floor)).
    pub(super) fn let_go_before(&mut self, below: (u64, u64)) {
        let from = self.let_go_to.unwrap_or((0, 0));
        if below <= from {
            return;
        }
        let summaries = self.selection.summaries;
        let goes = move |e: &Entry| {
            e.flags & DROPPED == 0
                && (e.key, e.offset) >= from
                && (e.key, e.offset) < below
                && !(summaries && e.flags & SUMMARY != 0)
        };
        // Look only at what was not looked at for the last call.
        let (seen, mut free) = match self.let_go_seen {
            Some((seen, free)) if seen <= below => (seen.max(from), free),
            _ => (from, 0),
        };
        let id = |e: &Entry| (e.key, e.offset);
        let first = self
            .segments
            .partition_point(|s| s.entries.last().is_some_and(|e| id(e) < from));
        let look = self
            .segments
            .partition_point(|s| s.entries.last().is_some_and(|e| id(e) < seen));
        let mut visited = 0u64;
        for s in &self.segments[look..] {
            if s.entries.first().is_some_and(|e| id(e) >= below) {
                break;
            }
            let lo = s.entries.partition_point(|e| id(e) < seen);
            let hi = s.entries.partition_point(|e| id(e) < below);
            visited += (hi - lo) as u64;
            free += s.entries[lo..hi]
                .iter()
                .filter(|e| goes(e))
                .map(|e| e.len)
                .sum::<u64>();
        }
        self.visits += visited;
        if free < (1 << 20) && free.saturating_mul(4) < self.rendered {
            self.let_go_seen = Some((below, free));
            return;
        }
        let last = self
            .segments
            .partition_point(|s| s.entries.first().is_some_and(|e| id(e) < below));
        // Late records held below the last bound, now below this one.
        let mut more: Vec<usize> = Vec::new();
        self.stragglers.retain(|&at| {
            if at >= below {
                return true;
            }
            more.push(
                self.segments
                    .partition_point(|s| s.entries.last().is_some_and(|e| id(e) < at)),
            );
            false
        });
        let goes = |e: &Entry| {
            e.flags & DROPPED == 0
                && (e.key, e.offset) < below
                && !(summaries && e.flags & SUMMARY != 0)
        };
        let (_, freed) = self.rewrite(
            |k| (first..last).contains(&k) || more.contains(&k),
            |e| if goes(e) { Fate::Empty } else { Fate::Keep },
        );
        self.rendered -= freed;
        self.let_go = true;
        self.let_go_to = Some(below);
        self.let_go_seen = None;
    }

    /// Notes the late records of `run` (about to be placed) that land below
    /// what was let go: a window can still reach one (a small record can
    /// fit between the window and the first record that did not), so they
    /// are kept, and let go by the next let go that passes them.
    pub(super) fn note_stragglers(&mut self, run: &Segment) {
        let Some(bound) = self.let_go_to else {
            return;
        };
        self.stragglers.extend(
            run.entries
                .iter()
                .map(|e| (e.key, e.offset))
                .take_while(|&id| id < bound),
        );
    }

    /// Rewrites the held segments `segments(k)` picks: each entry is kept, removed,
    /// or kept without its bytes ([`DROPPED`]). Segments with a change are
    /// copied, so their bytes are freed. Returns the entries removed and
    /// the bytes freed.
    fn rewrite(
        &mut self,
        segments: impl Fn(usize) -> bool,
        fate: impl Fn(&Entry) -> Fate,
    ) -> (u64, u64) {
        let mut removed = (0u64, 0u64);
        let mut changed_from = usize::MAX;
        let mut kept_segments = Vec::with_capacity(self.segments.len());
        let mut visited = 0u64;
        for (k, s) in std::mem::take(&mut self.segments).into_iter().enumerate() {
            if !segments(k) {
                kept_segments.push(s);
                continue;
            }
            visited += s.entries.len() as u64;
            if s.entries.iter().all(|e| matches!(fate(e), Fate::Keep)) {
                kept_segments.push(s);
                continue;
            }
            // The bytes kept, as ranges of the old ones: one range (what
            // was let go is the segment's start, as when a window moves
            // on) is a slice of them, not a copy.
            let mut kept: Vec<std::ops::Range<usize>> = Vec::new();
            let mut entries = Vec::with_capacity(s.entries.len());
            let mut at = 0usize;
            let mut gone = 0u64;
            for e in &s.entries {
                let len = e.len as usize;
                match fate(e) {
                    Fate::Keep => {
                        match kept.last_mut() {
                            Some(r) if r.end == at => r.end += len,
                            _ if len > 0 => kept.push(at..at + len),
                            _ => {}
                        }
                        entries.push(*e);
                    }
                    Fate::Remove => {
                        removed.0 += 1;
                        removed.1 += e.len;
                        gone += 1;
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
            if gone > 0 {
                changed_from = changed_from.min(kept_segments.len());
            }
            let bytes = match kept.as_slice() {
                [] => bytes::Bytes::new(),
                [one] => s.bytes.slice(one.clone()),
                more => {
                    let mut b = BytesMut::with_capacity(more.iter().map(|r| r.len()).sum());
                    for r in more {
                        b.extend_from_slice(&s.bytes[r.clone()]);
                    }
                    b.freeze()
                }
            };
            if !entries.is_empty() {
                kept_segments.push(Segment { bytes, entries });
            }
        }
        self.segments = kept_segments;
        self.starts_ok = self.starts_ok.min(changed_from);
        self.visits += visited;
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

    /// A late record that lands below what a window let go can still be
    /// replayed: the window stopped at a record that did not fit, and a
    /// small one put just before the window's start fits. (Letting such a
    /// record go as it arrived gave a shorter window than the one-shot
    /// replay's.) And a summary covering past what was let go, then an
    /// early record written after it.
    #[test]
    fn late_records_below_what_was_let_go_and_covers_past_it_replay_the_one_shot_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let current = CurrentRequest {
            text: "now",
            session_id: None,
        };
        for summaries in [false, true] {
            let sel = Selection {
                max_tokens: Some(600),
                tokenizer: Tokenizer::Bytes,
                summaries,
                ..Selection::default()
            };
            let spec = crate::RequestSpec::new(Format::Anthropic, crate::SYSTEM_RULE, current);
            let mut file = std::fs::File::create(&path).unwrap();
            let mut live = LiveReplay::new(&path, Format::Anthropic, ReplayOptions::default())
                .with_selection(sel.clone());
            let check = |live: &mut LiveReplay, what: &str| {
                let (got, report) = live
                    .request_body_with(&spec, &sel, None, &mut CacheMemory::default())
                    .unwrap();
                let bytes = std::fs::read(&path).unwrap();
                let mut one = replay(&bytes, &ReplayOptions::default());
                let want_report = one.select(&sel, None);
                let want = one.render_spec(&spec, &mut CacheMemory::default()).unwrap();
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    String::from_utf8(want).unwrap(),
                    "{what} (summaries {summaries})"
                );
                assert_eq!(report, want_report, "{what}");
            };
            // Small records, then a big one the window cannot hold, then
            // small ones up to the budget: the window starts after the big
            // one, and what lies before it is let go.
            for ts in 1..=300u64 {
                writeln!(
                    file,
                    r#"{{"type":"wm_event","ts_ms":{ts},"n":"{}"}}"#,
                    "s".repeat(40)
                )
                .unwrap();
            }
            writeln!(
                file,
                r#"{{"type":"wm_event","ts_ms":400,"big":"{}"}}"#,
                "b".repeat(500)
            )
            .unwrap();
            for ts in 500..510u64 {
                writeln!(file, r#"{{"type":"wm_event","ts_ms":{ts},"n":"x"}}"#).unwrap();
            }
            check(&mut live, "before");
            assert!(live.let_go, "the window let go of what lies before it");
            // A small record late enough to land between the big one and
            // the window's start: it fits.
            writeln!(file, r#"{{"type":"wm_event","ts_ms":450,"late":1}}"#).unwrap();
            check(&mut live, "a late record just before the window");
            // One landing before the big one: never replayed.
            writeln!(file, r#"{{"type":"wm_event","ts_ms":350,"late":2}}"#).unwrap();
            check(
                &mut live,
                "a late record before the record that did not fit",
            );
            // More records push the window on: the late ones are let go.
            for ts in 600..700u64 {
                writeln!(file, r#"{{"type":"wm_event","ts_ms":{ts},"n":"more"}}"#).unwrap();
            }
            check(&mut live, "later");
            if summaries {
                // A summary covering everything to ts 650, past what was let
                // go...
                let bytes = std::fs::read(&path).unwrap();
                let at = bytes
                    .split(|b| *b == b'\n')
                    .scan(0usize, |o, l| {
                        let here = *o;
                        *o += l.len() + 1;
                        Some((here, l))
                    })
                    .find(|(_, l)| memchr::memmem::find(l, b"\"ts_ms\":650,").is_some())
                    .unwrap()
                    .0;
                writeln!(
                    file,
                    r#"{{"type":"wm_summary","ts_ms":700,"covers":{{"ts_ms":650,"offset":{at}}},"text":"so far"}}"#
                )
                .unwrap();
                check(&mut live, "a summary covering past what was let go");
                // ...and a record written after it that sorts early: not
                // covered, so replayed, right after the summary.
                writeln!(file, r#"{{"type":"wm_event","ts_ms":2,"after":1}}"#).unwrap();
                check(&mut live, "an early record written after the summary");
            }
        }
    }
}
