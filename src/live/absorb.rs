//! Placing what a refresh parsed: the new records' messages go on at the
//! end, or among the held ones when they are late; the stats are added up.

use super::segments::{INPUT, OUTPUT, Segment};
use super::{LiveReplay, Refresh, SummaryMemo};
use crate::error::Error;
use crate::order::ts_key;
use crate::replay::parse_range_rendered;
use crate::replay::rendered::Memo;
use crate::replay::rendered::RenderSpec;

impl LiveReplay {
    /// Parses `buf[start..]` (the file's bytes from offset `base`) up to its
    /// last `\n`, and places the new records. The rendered messages need
    /// memory in proportion to the bytes (several times them for short
    /// records): when it cannot be had, [`Error::OutOfMemory`], with the
    /// state half updated (the caller resets it).
    pub(super) fn absorb(
        &mut self,
        buf: &[u8],
        start: usize,
        base: u64,
        report: &mut Refresh,
        done: Option<&(dyn Fn(std::ops::Range<usize>) + Sync)>,
    ) -> Result<(), Error> {
        let Some(last_nl) = memchr::memrchr(b'\n', buf) else {
            return Ok(());
        };
        let commit = last_nl + 1;
        if commit <= start {
            // Only a byte-order mark and nothing after it yet.
            return Ok(());
        }
        let spec = RenderSpec {
            format: self.format,
            filter: self.selection.has_filters().then_some(&self.selection),
            skip: self.skip,
            drop_facts: self.selection.facts,
            drop_invalid_summaries: self.selection.summaries,
            drop_below: self.drop_below,
            base,
            done,
        };
        let parsed = parse_range_rendered(
            buf,
            start..commit,
            self.lines + 1,
            &self.options,
            Some(&spec),
            false,
            &|_| {},
        );
        self.committed = base + commit as u64;
        report.bytes_committed = commit as u64;
        self.lines += parsed.lines;
        let st = &mut self.stats;
        st.total_lines += parsed.stats.total_lines;
        st.parsed_entries += parsed.stats.parsed_entries;
        st.skipped_invalid_json += parsed.stats.skipped_invalid_json;
        st.skipped_invalid_shape += parsed.stats.skipped_invalid_shape;
        st.bytes = self.committed;
        st.unterminated_tail = false;
        for mut s in parsed.stats.skips {
            if st.skips.len() >= self.options.max_skips {
                break;
            }
            s.offset += base;
            st.skips.push(s);
        }
        let Some(rendered) = parsed.rendered else {
            return Ok(());
        };
        if rendered.unrendered > 0 {
            let held: u64 = rendered.pieces.iter().map(|p| p.bytes.len() as u64).sum();
            return Err(Error::out_of_memory(&self.path, held + rendered.unrendered));
        }
        // Ordered so far (over every record, filtered out or not, as a
        // one-shot replay reports it): each at least the newest before it.
        if let (Some(first), Some(newest)) = (rendered.first, rendered.newest) {
            if st.already_ordered {
                st.already_ordered = rendered.ordered && self.last_key.is_none_or(|k| first >= k);
            }
            self.last_key = Some(self.last_key.map_or(newest, |k| k.max(newest)));
        }
        // The new messages are in replay order among themselves; those older
        // than the newest message held (a prefix of them) are late, and go
        // among the held ones; the rest go on at the end.
        let newest = self.segments.last().map(Segment::last_key);
        for m in rendered.memos {
            match m {
                // In file order: the last valid one is the newest.
                Memo::Summary { at, key, cover } => {
                    self.summary = Some(SummaryMemo { at, key, cover });
                }
                Memo::Fact { at, ts, key, value } => {
                    self.fact_table
                        .set((ts_key(ts), at), ts, &key, value.as_deref());
                }
            }
        }
        for piece in rendered.pieces {
            let n = piece.entries.len() as u64;
            let total = piece.bytes.len() as u64;
            self.records += n;
            self.rendered += total;
            report.records_added += n;
            for e in piece
                .entries
                .iter()
                .filter(|e| e.flags & (INPUT | OUTPUT) != 0)
            {
                if self
                    .last_io
                    .is_none_or(|(k, o, _)| (e.key, e.offset) > (k, o))
                {
                    self.last_io = Some((e.key, e.offset, e.flags));
                }
            }
            let split = newest.map_or(0, |k| piece.entries.partition_point(|e| e.key < k));
            self.late += split as u64;
            report.late_records += split as u64;
            let entries = &piece.entries;
            let (mut i, mut byte) = (0usize, 0usize);
            while i < split {
                // A run of late records that land between the same two held
                // records goes in as one slice.
                let (seg, idx) = self.position(entries[i].key);
                let bound = self.bound_after(seg, idx);
                let mut j = i + 1;
                while j < split && bound.is_none_or(|b| entries[j].key < b) {
                    j += 1;
                }
                let len = entries[i..j].iter().map(|e| e.len).sum::<u64>() as usize;
                let run = Segment {
                    bytes: piece.bytes.slice(byte..byte + len),
                    entries: entries[i..j].to_vec(),
                };
                self.note_stragglers(&run);
                self.insert(seg, idx, run);
                byte += len;
                i = j;
            }
            if split == 0 {
                self.push(piece);
            } else if split < entries.len() {
                let tail = Segment {
                    bytes: piece.bytes.slice(byte..),
                    entries: entries[split..].to_vec(),
                };
                self.push(tail);
            }
        }
        self.compact_if_needed();
        self.prune_covered();
        Ok(())
    }
}
