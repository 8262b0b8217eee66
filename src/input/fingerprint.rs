//! A fingerprint of a log's prefix: whether the bytes already read are
//! still the file's when it has grown (an append, or a rewrite in place).

use std::fs::File;

/// Prefixes up to this long are fingerprinted whole.
const FINGERPRINT_WHOLE: u64 = 8 << 20;
/// Longer ones: this much at each end...
const FINGERPRINT_EDGE: u64 = 1 << 20;
/// ...and this many blocks of [`FINGERPRINT_BLOCK`] spread between them.
const FINGERPRINT_SAMPLES: u64 = 64;
const FINGERPRINT_BLOCK: u64 = 4096;

/// The byte ranges a fingerprint of a `len`-byte prefix covers.
fn fingerprint_ranges(len: u64) -> Vec<(u64, u64)> {
    if len <= FINGERPRINT_WHOLE {
        return vec![(0, len)];
    }
    let mut r = vec![(0, FINGERPRINT_EDGE)];
    let span = len - 2 * FINGERPRINT_EDGE - FINGERPRINT_BLOCK;
    for k in 0..FINGERPRINT_SAMPLES {
        let at = FINGERPRINT_EDGE + span * k / (FINGERPRINT_SAMPLES - 1);
        r.push((at, FINGERPRINT_BLOCK));
    }
    r.push((len - FINGERPRINT_EDGE, FINGERPRINT_EDGE));
    r
}

/// A fingerprint of a log's first bytes, to tell whether a prefix already
/// read is still the same when the file has grown: the whole prefix when it
/// is at most 8 MiB (about a millisecond to read and hash); for a longer
/// one, its first and last MiB and 64 blocks of 4 KiB spread evenly between
/// them (2.25 MiB read, whatever the log's size). A rewrite of a log up to
/// 8 MiB anywhere, or of a longer one's start or end, always changes it; a
/// rewrite confined to the middle of a longer log is caught only where a
/// sampled block covers it.
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
        if !read_exact_at(file, &mut buf, at)? {
            return Ok(None);
        }
        h.update(&buf);
    }
    Ok(Some(h.digest()))
}

/// Fills `buf` from `offset`; false if the file ends first.
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<bool> {
    let mut done = 0;
    while done < buf.len() {
        #[cfg(unix)]
        let n = std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], offset + done as u64);
        #[cfg(not(unix))]
        let n = {
            use std::io::Seek;
            let mut f = file;
            f.seek(std::io::SeekFrom::Start(offset + done as u64))
                .and_then(|_| f.read(&mut buf[done..]))
        };
        match n {
            Ok(0) => return Ok(false),
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
