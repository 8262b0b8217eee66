//! What a compaction reads from the live state: the messages a selection
//! with summaries replays after the newest summary, their texts, and where
//! the log ended when they were read (see `crate::select::fold`).

use super::LiveReplay;
use super::segments::{OUTPUT, entry_offset};
use super::view::{self, message_text_of};
use crate::select::Selection;
use crate::select::fold;

/// The messages replayed after the newest summary, as a fold sees them.
#[derive(Debug, Default)]
pub(crate) struct Replayed {
    /// Each message's `(ts_ms key, offset)`, in replay order.
    pub(crate) items: Vec<(u64, u64)>,
    /// Their rendered bytes (at least their text's, so at least their
    /// tokens).
    pub(crate) bytes: u64,
    /// The texts asked for: `(index in items, text)`.
    pub(crate) texts: Vec<(usize, String)>,
    /// The log bytes read when they were taken.
    pub(crate) read_end: u64,
    /// The state's rebuilds then (a rebuild changes what offsets mean).
    pub(crate) rebuilds: u64,
}

impl LiveReplay {
    /// The messages `sel` replays after the newest summary (the summary
    /// apart), with the texts of those `want(offset)` asks for, unless
    /// their rendered bytes total at most `at` (then they cannot hold more
    /// than `at` tokens, and no text is taken). `sel` must have
    /// [`Selection::summaries`].
    pub(crate) fn replayed_after_summary(
        &self,
        sel: &Selection,
        at: u64,
        mut want: impl FnMut(u64) -> bool,
    ) -> Replayed {
        let v = view::build(&self.segments, sel, self.newest_summary());
        let mut out = Replayed {
            read_end: self.committed,
            rebuilds: self.rebuilds,
            ..Replayed::default()
        };
        for it in &v.items {
            let e = self.segments[it.si].entries[it.ei];
            out.items.push((e.key, e.offset));
            out.bytes += e.len;
        }
        if out.bytes <= at {
            return out;
        }
        for (i, it) in v.items.iter().enumerate() {
            let e = self.segments[it.si].entries[it.ei];
            if want(e.offset) {
                out.texts.push((i, self.text_at(it.si, it.ei)));
            }
        }
        out
    }

    /// The previous summary's text and the message texts of `items` (the
    /// first messages replayed after it, as [`replayed_after_summary`]
    /// gave them), joined by blank lines; `None` when the replay no longer
    /// starts with them (a late record, a rebuild): plan again.
    ///
    /// [`replayed_after_summary`]: Self::replayed_after_summary
    pub(crate) fn fold_texts(
        &self,
        sel: &Selection,
        items: &[(u64, u64)],
        rebuilds: u64,
    ) -> Option<(Option<String>, String)> {
        if self.rebuilds != rebuilds {
            return None;
        }
        let v = view::build(&self.segments, sel, self.newest_summary());
        if v.items.len() < items.len() {
            return None;
        }
        let mut texts = String::new();
        for (it, want) in v.items.iter().zip(items) {
            let e = self.segments[it.si].entries[it.ei];
            if (e.key, e.offset) != *want {
                return None;
            }
            if !texts.is_empty() {
                texts.push_str("\n\n");
            }
            texts.push_str(&self.text_at(it.si, it.ei));
        }
        let previous = v
            .summary
            .and_then(|s| fold::summary_text(&self.text_at(s.si, s.ei)));
        Some((previous, texts))
    }

    fn text_at(&self, si: usize, ei: usize) -> String {
        let seg = &self.segments[si];
        let e = seg.entries[ei];
        let at = entry_offset(seg, ei);
        let msg = &seg.bytes[at as usize..(at + e.len) as usize];
        let mut text = String::new();
        message_text_of(msg, self.format, e.flags & OUTPUT != 0, &mut text);
        text
    }
}
