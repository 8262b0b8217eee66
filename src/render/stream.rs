//! Streaming the messages with bounded memory: batches of whole groups,
//! each rendered in parallel into one of two buffers while the other is
//! written.

use std::io::Write;

use super::{Format, Sequence, group_sizes, write_groups};

/// Output bytes per streamed batch: bounds the memory of streaming output
/// whatever the log's size.
pub const STREAM_BATCH: usize = 16 << 20;

/// Streams the messages of `records` (each followed by its separator) to `w`
/// in batches of about `batch` bytes (whole groups of messages, at
/// least one group each), each rendered in parallel. With
/// `drop_last_separator`, the final separator is not written.
///
/// Only each group's size is kept, not each message's: the groups' offsets
/// in a batch are all the parallel writers need. The records may come as two
/// lists, read merged ([`Sequence`]).
pub fn stream_messages<'a>(
    records: impl Into<Sequence<'a>>,
    log: &[u8],
    format: Format,
    drop_last_separator: bool,
    batch: usize,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    let seq = records.into();
    let cuts = seq.cuts();
    let sizes = group_sizes(seq, &cuts, log, format);
    let batches = batches(&sizes, batch);
    let last = sizes.len();
    let cut = |groups: &std::ops::Range<usize>, size: usize| {
        if groups.end == last && drop_last_separator {
            size - format.separator().len()
        } else {
            size
        }
    };
    let render = |groups: std::ops::Range<usize>, buf: &mut [u8]| {
        write_groups(seq, &cuts, groups.clone(), &sizes[groups], log, format, buf);
    };
    let largest = match batches.as_slice() {
        [] => return Ok(()),
        [(groups, size)] => {
            let mut buf = crate::buffers::huge_buffer(*size)?;
            render(groups.clone(), &mut buf[..*size]);
            return w.write_all(&buf[..cut(groups, *size)]);
        }
        more => more.iter().map(|b| b.1).max().unwrap_or(0),
    };
    // Two buffers, as big as the biggest batch (fresh memory costs a page
    // fault per page, so each is taken once): a thread renders the next
    // batch into one while this one writes the other, so output into a pipe
    // or a socket, which waits for its reader, goes on while rendering does.
    let (full_tx, full) = std::sync::mpsc::sync_channel::<(memmap2::MmapMut, usize)>(1);
    let (empty, empty_rx) = std::sync::mpsc::sync_channel::<memmap2::MmapMut>(2);
    empty.send(crate::buffers::huge_buffer(largest)?).ok();
    empty.send(crate::buffers::huge_buffer(largest)?).ok();
    std::thread::scope(|s| {
        s.spawn(move || {
            for (groups, size) in batches {
                // Either channel closed: the writer stopped on an error.
                let Ok(mut buf) = empty_rx.recv() else { return };
                render(groups.clone(), &mut buf[..size]);
                if full_tx.send((buf, cut(&groups, size))).is_err() {
                    return;
                }
            }
        });
        // Owned here, so that an error return drops both ends the renderer
        // waits on, and it stops.
        let (empty, full) = (empty, full);
        for (buf, n) in full {
            w.write_all(&buf[..n])?;
            // The renderer may be done and gone: the buffer is then dropped.
            let _ = empty.send(buf);
        }
        Ok(())
    })
}

/// Splits groups of the given sizes into consecutive batches of about
/// `batch` bytes: whole groups, at least one each, a batch closing once it
/// reaches `batch`. Returns each batch's groups and size.
pub(super) fn batches(sizes: &[u64], batch: usize) -> Vec<(std::ops::Range<usize>, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < sizes.len() {
        let mut end = start;
        let mut size = 0usize;
        while end < sizes.len() && (end == start || size < batch) {
            size += sizes[end] as usize;
            end += 1;
        }
        out.push((start..end, size));
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReplayOptions, replay};

    /// A writer that takes `left` bytes, then fails.
    struct Failing {
        left: usize,
        seen: usize,
    }

    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "gone"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            self.seen += n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_error_while_rendering_ahead_is_returned_not_waited_on() {
        let log = super::super::tests::log();
        let r = replay(&log, &ReplayOptions::default());
        let whole = super::super::request::render_messages(r.records(), &log, Format::OpenAi);
        // Many small batches: the renderer is ahead of the writer when the
        // writer fails, at the first batch, in the middle, and at the end.
        // (The stream is the array without its brackets.)
        for left in [0, 1, whole.len() / 2, whole.len() - 3] {
            let mut w = Failing { left, seen: 0 };
            let e =
                stream_messages(r.records(), &log, Format::OpenAi, true, 4096, &mut w).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
            assert_eq!(w.seen, left);
        }
    }
}
