//! A log's whole lines read back from its end, in blocks: what the history
//! lookup reads of a log (its newest records), at the cost of what it
//! reads, whatever the log's size, without mapping the log for each
//! request.

use std::fs::File;
use std::io;

/// The first block read from the end; each next one is twice as long, up
/// to [`MAX_BLOCK`]. (The unit tests read in tiny blocks, so that their
/// small logs take many.)
const FIRST_BLOCK: u64 = if cfg!(test) { 16 } else { 64 << 10 };
const MAX_BLOCK: u64 = if cfg!(test) { 256 } else { 4 << 20 };

/// What a log's end is read from: a file (the bytes up to its length when
/// it was looked at) or bytes in memory.
pub(crate) trait LogEnd {
    fn len(&self) -> u64;
    /// Fills `buf` from `at`, within [`len`](Self::len).
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// Which file it is (device, inode), when it is one.
    fn file_id(&self) -> Option<(u64, u64)> {
        None
    }
}

impl LogEnd for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        buf.copy_from_slice(&self[at as usize..at as usize + buf.len()]);
        Ok(())
    }
}

/// No log (none yet, or it cannot be opened): nothing to read.
impl<L: LogEnd> LogEnd for Option<L> {
    fn len(&self) -> u64 {
        self.as_ref().map_or(0, L::len)
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            Some(l) => l.read_at(buf, at),
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }

    fn file_id(&self) -> Option<(u64, u64)> {
        self.as_ref().and_then(L::file_id)
    }
}

/// An open log, read up to the length it had.
pub(crate) struct FileEnd {
    pub(crate) file: File,
    pub(crate) len: u64,
    /// The file's identity, when it could be read.
    pub(crate) id: Option<(u64, u64)>,
}

impl LogEnd for FileEnd {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        crate::os::read_exact_at(&self.file, buf, at)
    }

    fn file_id(&self) -> Option<(u64, u64)> {
        self.id
    }
}

/// How a walk back ([`lines_back`]) ended.
pub(crate) struct Walk {
    /// Every line from its floor (or the log's start) on was visited: no
    /// read failed and no visit stopped it.
    pub(crate) whole: bool,
    /// Where the log's last whole line ends (0: none).
    pub(crate) end: u64,
}

/// Calls `visit` with the log's whole lines from its end backwards, a
/// stretch of them at a time (newest stretch first; each with its offset in
/// the log, ending with its last line's `\n`), until `visit` returns false
/// or a stretch reaches back past `floor`. A line still being written (no
/// `\n` yet) is never read. Holds one block and the longest line; an error
/// reading (the file shrank: rewritten) ends the walk.
pub(crate) fn lines_back<L: LogEnd + ?Sized>(
    log: &L,
    floor: u64,
    mut visit: impl FnMut(&[u8], u64) -> bool,
) -> Walk {
    let mut walk = Walk {
        whole: false,
        end: 0,
    };
    let mut pos = log.len();
    // The bytes [pos, pos + buf.len()) not yet visited: a line's end and
    // its `\n` (nothing before the log's last `\n` is found).
    let mut buf: Vec<u8> = Vec::new();
    let mut ended = false;
    let mut block = FIRST_BLOCK;
    while pos > 0 {
        let n = block.min(pos);
        let at = pos - n;
        let mut read = vec![0; n as usize];
        if log.read_at(&mut read, at).is_err() {
            return walk;
        }
        read.extend_from_slice(&buf);
        buf = read;
        pos = at;
        block = (block * 2).min(MAX_BLOCK);
        if !ended {
            match memchr::memrchr(b'\n', &buf) {
                Some(i) => {
                    buf.truncate(i + 1);
                    ended = true;
                    walk.end = pos + i as u64 + 1;
                }
                None => {
                    buf.clear();
                    continue;
                }
            }
        }
        // Whole lines: after the first `\n` (from the log's first byte).
        let start = match pos {
            0 => 0,
            _ => match memchr::memchr(b'\n', &buf) {
                Some(i) => i + 1,
                None => continue,
            },
        };
        if start < buf.len() && !visit(&buf[start..], pos + start as u64) {
            return walk;
        }
        buf.truncate(start);
        if pos <= floor {
            break;
        }
    }
    walk.whole = true;
    walk
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line `lines_back` visits, newest first, with its offset.
    fn all(log: &[u8], floor: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        lines_back(log, floor, |stretch, base| {
            let mut end = stretch.len();
            while end > 0 {
                let start = memchr::memrchr(b'\n', &stretch[..end - 1]).map_or(0, |i| i + 1);
                out.push((base + start as u64, stretch[start..end].to_vec()));
                end = start;
            }
            true
        });
        out
    }

    #[test]
    fn every_whole_line_is_visited_once_newest_first_with_its_offset() {
        // Lines short and longer than the blocks, across block bounds.
        let mut log = Vec::new();
        let mut want = Vec::new();
        for (i, len) in [10usize, 70_000, 3, 200_000, 1, 65_535, 65_536, 9]
            .iter()
            .enumerate()
        {
            let line = format!("{i}{}\n", "x".repeat(*len));
            want.push((log.len() as u64, line.clone().into_bytes()));
            log.extend_from_slice(line.as_bytes());
        }
        want.reverse();
        assert_eq!(all(&log, 0), want);
        // A line still being written is not read; nor is a log without a
        // whole line.
        let mut cut = log.clone();
        cut.extend_from_slice(&b"y".repeat(100_000));
        assert_eq!(all(&cut, 0), want);
        assert!(all(b"no newline yet", 0).is_empty());
        assert!(all(b"", 0).is_empty());
        // From a file alike.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, &cut).unwrap();
        let file = FileEnd {
            file: File::open(&path).unwrap(),
            len: cut.len() as u64,
            id: None,
        };
        let mut n = 0;
        lines_back(&file, 0, |s, _| {
            n += s.iter().filter(|&&b| b == b'\n').count();
            true
        });
        assert_eq!(n, want.len());
    }

    #[test]
    fn the_walk_ends_when_asked_or_past_its_floor() {
        let log = "zzzzzzzz\n".repeat(100_000);
        let mut read = 0;
        lines_back(log.as_bytes(), 0, |s, _| {
            read += s.len();
            false
        });
        assert!(read > 0 && read <= FIRST_BLOCK as usize, "{read}");
        // 900,000 bytes: the walk reads back past a floor 100,000 bytes
        // back, and ends within a block of it.
        let mut visits = Vec::new();
        let walk = lines_back(log.as_bytes(), 800_000, |_, base| {
            visits.push(base);
            true
        });
        let last = *visits.last().unwrap();
        assert!(
            last <= 800_000 && last + MAX_BLOCK + 9 > 800_000,
            "{visits:?}"
        );
        assert!(visits.windows(2).all(|w| w[1] < w[0]));
        assert!(walk.whole);
        assert_eq!(walk.end, log.len() as u64);
        // Asked to stop: not whole.
        assert!(!lines_back(log.as_bytes(), 0, |_, _| false).whole);
    }
}
