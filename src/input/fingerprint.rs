//! A fingerprint of a log's prefix: whether the bytes already read are
//! still the file's when it has grown (an append, or a rewrite in place).
//!
//! It is checked on every request that finds the file changed, so it reads
//! a bounded handful of small blocks, not the prefix: what it catches is a
//! rewrite that touches the prefix's start, its end, or one of its sampled
//! blocks, and any rewrite of a prefix of at most 64 KiB. A rewrite that
//! changes the length of the bytes before the position (an edit that adds or
//! removes bytes, then saves in place) shifts everything after it, so the
//! last block catches it wherever it is; a same-length change confined to
//! the middle of a longer prefix is caught only where a block covers it.

use std::fs::File;

/// Prefixes up to this long are fingerprinted whole.
const FINGERPRINT_WHOLE: u64 = 64 << 10;
/// Longer ones: their first and last block, and [`FINGERPRINT_SAMPLES`]
/// blocks spread evenly between (the middle one at the prefix's middle).
const FINGERPRINT_BLOCK: u64 = 4096;
/// Sampled blocks between the first and the last; odd, so one is centred.
const FINGERPRINT_SAMPLES: u64 = 15;

/// The byte ranges a fingerprint of a `len`-byte prefix covers: at most
/// 17 blocks of 4 KiB (68 KiB), whatever `len`.
fn fingerprint_ranges(len: u64) -> Vec<(u64, u64)> {
    if len <= FINGERPRINT_WHOLE {
        return vec![(0, len)];
    }
    let b = FINGERPRINT_BLOCK;
    let mut r = vec![(0, b)];
    // From just after the first block to just before the last.
    let span = len - 3 * b;
    for k in 0..FINGERPRINT_SAMPLES {
        let step = u128::from(span) * u128::from(k) / u128::from(FINGERPRINT_SAMPLES - 1);
        r.push((b + step as u64, b));
    }
    r.push((len - b, b));
    r
}

/// A fingerprint of a log's first bytes, to tell whether a prefix already
/// read is still the same when the file has grown: the whole prefix when it
/// is at most 64 KiB; for a longer one, its first and last 4 KiB and 15
/// blocks of 4 KiB spread evenly between them (68 KiB, whatever the log's
/// size: tens of microseconds from the page cache). See the module docs
/// for what it catches.
pub(crate) fn fingerprint_bytes(prefix: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    h.update(&(prefix.len() as u64).to_le_bytes());
    for (at, n) in fingerprint_ranges(prefix.len() as u64) {
        h.update(&prefix[at as usize..(at + n) as usize]);
    }
    h.digest()
}

/// [`fingerprint_bytes`] of the first `len` bytes of `file`, read with
/// positioned reads; `None` if the file has fewer bytes.
pub(crate) fn fingerprint_file(file: &File, len: u64) -> std::io::Result<Option<u64>> {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    h.update(&len.to_le_bytes());
    let mut buf = Vec::new();
    for (at, n) in fingerprint_ranges(len) {
        buf.resize(n as usize, 0);
        FINGERPRINTED.with(|c| c.set(c.get() + n));
        if !read_exact_at(file, &mut buf, at)? {
            return Ok(None);
        }
        h.update(&buf);
    }
    Ok(Some(h.digest()))
}

thread_local! {
    /// Bytes this thread has read to fingerprint files.
    static FINGERPRINTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bytes the calling thread has read from files to fingerprint their
/// prefixes: what tests hold a live refresh's check to.
#[doc(hidden)]
pub fn fingerprinted_bytes() -> u64 {
    FINGERPRINTED.with(std::cell::Cell::get)
}

/// Fills `buf` from `offset`; false if the file ends first.
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<bool> {
    Ok(crate::os::read_at(file, buf, offset)? == buf.len())
}

/// Reads `len` bytes at `offset` (fewer if the file is shorter by then).
pub(crate) fn read_from(
    file: &File,
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.take(len).read_to_end(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_a_few_blocks_inside_the_prefix_with_its_ends_and_middle() {
        for len in [
            0,
            1,
            4096,
            64 << 10,
            (64 << 10) + 1,
            100_000,
            1 << 30,
            u64::MAX / 2,
        ] {
            let r = fingerprint_ranges(len);
            let read: u64 = r.iter().map(|&(_, n)| n).sum();
            assert!(read <= 17 * 4096, "{len}: {read}");
            assert!(r.iter().all(|&(at, n)| at + n <= len), "{len}: {r:?}");
            let covered = |x: u64| r.iter().any(|&(at, n)| (at..at + n).contains(&x));
            if len > 0 {
                assert!(covered(0) && covered(len - 1) && covered(len / 2), "{len}");
            }
            if len <= 64 << 10 {
                assert_eq!(r, vec![(0, len)]);
            }
        }
    }

    #[test]
    fn a_file_and_its_bytes_fingerprint_alike() {
        let dir = std::env::temp_dir().join(format!("wmreplay-fp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let f = File::open(&path).unwrap();
        for len in [0, 10, 64 << 10, 70_000, 300_000] {
            let want = fingerprint_bytes(&data[..len]);
            assert_eq!(fingerprint_file(&f, len as u64).unwrap(), Some(want));
        }
        assert_eq!(fingerprint_file(&f, 300_001).unwrap(), None);
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
