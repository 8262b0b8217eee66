//! The vectors file kept beside the lexical index (`LOG.wmreplay.idx.vec`)
//! and its copy in memory.
//!
//! Format (little-endian), version [`FORMAT`]:
//!
//! - a 256-byte header: `b"wmrvec\0\0"`, the format (u32), the dimensions
//!   (u32; 0 before the first vector), a generation (u64, new at each
//!   reset), the log's device and inode, how far into the log every record
//!   has an entry (`covered`, just past a `\n`), the log's prefix
//!   fingerprint up to there, the number of entries, the line depth its
//!   records were read with, the model (up to 160 bytes, longer names by
//!   hash), and an xxh3 checksum of all that;
//! - then one entry per record embedded, in log order, `16 + dims` bytes
//!   each: the line's offset (u64), the scale (f32; 0 for a record the
//!   model refused, kept without a vector), `dims` i8 values (`quant.rs`),
//!   and a checksum (u32, xxh3 of the rest).
//!
//! 1536 dimensions take 1552 bytes a record; 768, 784; 384, 400.
//!
//! Writers hold the file's exclusive `flock` (readers a shared one),
//! append entries, sync them, then rewrite the header: a crash leaves
//! entries past the header's count, which are ignored and cut. A header
//! or an entry whose checksum fails, another model, another log, or a log
//! rewritten before `covered` make the file start over (a reset: a new
//! generation, no entries).

use crate::os::FileStamp;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Bumped whenever the file's layout, or what a record's text is, changes.
pub(crate) const FORMAT: u32 = 2;
const MAGIC: &[u8; 8] = b"wmrvec\0\0";
const HEADER: u64 = 256;
const MAX_MODEL: usize = 160;
/// Entries read per piece when loading.
const READ_PIECE: usize = 4096;

/// What the header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) dims: u32,
    pub(crate) generation: u64,
    pub(crate) dev: u64,
    pub(crate) inode: u64,
    pub(crate) covered: u64,
    pub(crate) fingerprint: u64,
    pub(crate) count: u64,
    pub(crate) max_depth: u64,
    /// The model's key as written (see [`model_key`]).
    pub(crate) model: String,
}

/// The name a model is recorded by: itself, or its hash when too long.
pub(crate) fn model_key(model: &str) -> String {
    if model.len() <= MAX_MODEL {
        model.to_string()
    } else {
        format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(model.as_bytes()))
    }
}

impl Head {
    fn encode(&self) -> [u8; HEADER as usize] {
        let mut b = [0u8; HEADER as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        b[12..16].copy_from_slice(&self.dims.to_le_bytes());
        for (at, v) in [
            (16, self.generation),
            (24, self.dev),
            (32, self.inode),
            (40, self.covered),
            (48, self.fingerprint),
            (56, self.count),
            (64, self.max_depth),
        ] {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        let m = self.model.as_bytes();
        let n = m.len().min(MAX_MODEL);
        b[72..74].copy_from_slice(&(n as u16).to_le_bytes());
        b[74..74 + n].copy_from_slice(&m[..n]);
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..248]);
        b[248..256].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The header in `b`, if it is one, of this format, whole.
    fn decode(b: &[u8]) -> Option<Head> {
        if b.len() < HEADER as usize || &b[0..8] != MAGIC {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        if u64_at(248) != xxhash_rust::xxh3::xxh3_64(&b[..248]) || u32_at(8) != FORMAT {
            return None;
        }
        let n = usize::from(u16::from_le_bytes([b[72], b[73]]));
        if n > MAX_MODEL {
            return None;
        }
        Some(Head {
            dims: u32_at(12),
            generation: u64_at(16),
            dev: u64_at(24),
            inode: u64_at(32),
            covered: u64_at(40),
            fingerprint: u64_at(48),
            count: u64_at(56),
            max_depth: u64_at(64),
            model: String::from_utf8_lossy(&b[74..74 + n]).into_owned(),
        })
    }

    fn entry_len(&self) -> u64 {
        16 + u64::from(self.dims)
    }
}

/// A new generation: different from any before, in any process.
fn new_generation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{nanos}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    xxhash_rust::xxh3::xxh3_64(seed.as_bytes())
}

/// Vectors to add, made from the log's state `base` was taken at.
pub(crate) struct Batch {
    /// The store's generation, count and covered when the batch was
    /// started, and whether it was fresh (then `replaces` is the
    /// generation of the file judged unusable, if it had one).
    pub(crate) base: (u64, u64, u64, bool),
    pub(crate) replaces: Option<u64>,
    pub(crate) dev: u64,
    pub(crate) inode: u64,
    /// How far the log is covered with these, and its fingerprint there.
    pub(crate) covered: u64,
    pub(crate) fingerprint: u64,
    pub(crate) dims: u32,
    pub(crate) offsets: Vec<u64>,
    pub(crate) scales: Vec<f32>,
    pub(crate) data: Vec<i8>,
}

/// The vectors of one log, in memory, mirroring the file.
pub(crate) struct Store {
    path: PathBuf,
    refuse_links: bool,
    pub(crate) head: Head,
    /// The file is to be written afresh by the next commit: it is absent,
    /// damaged, or for another model, log or line depth.
    pub(crate) fresh: bool,
    /// When fresh: the generation of the unusable file it replaces.
    pub(crate) replaces: Option<u64>,
    pub(crate) offsets: Vec<u64>,
    pub(crate) scales: Vec<f32>,
    pub(crate) data: Vec<i8>,
    /// The file as last read or written here.
    stamp: Option<FileStamp>,
    /// The log's (length, change stamp) when last found to be the log
    /// these vectors are for.
    pub(crate) log_seen: Option<(u64, crate::input::Stamp)>,
}

impl Store {
    /// An empty store for `model` (nothing read until [`sync`](Self::sync)).
    pub(crate) fn new(path: PathBuf, model: &str, max_depth: u64, refuse_links: bool) -> Store {
        Store {
            path,
            refuse_links,
            head: Head {
                dims: 0,
                generation: new_generation(),
                dev: 0,
                inode: 0,
                covered: 0,
                fingerprint: 0,
                count: 0,
                max_depth,
                model: model_key(model),
            },
            fresh: true,
            replaces: None,
            offsets: Vec::new(),
            scales: Vec::new(),
            data: Vec::new(),
            stamp: None,
            log_seen: None,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Forgets every vector: the file is written afresh by the next
    /// commit (it replaces the one of generation `replaces`).
    pub(crate) fn start_over(&mut self) {
        let replaces = (!self.fresh).then_some(self.head.generation);
        self.head = Head {
            dims: 0,
            generation: new_generation(),
            dev: 0,
            inode: 0,
            covered: 0,
            fingerprint: 0,
            count: 0,
            max_depth: self.head.max_depth,
            model: std::mem::take(&mut self.head.model),
        };
        self.fresh = true;
        self.replaces = replaces.or(self.replaces);
        self.offsets = Vec::new();
        self.scales = Vec::new();
        self.data = Vec::new();
        self.log_seen = None;
    }

    fn open(&self, write: bool) -> io::Result<File> {
        let mut o = std::fs::OpenOptions::new();
        o.read(true);
        if write {
            crate::os::create_mode(o.write(true).create(true), 0o644);
        }
        crate::os::open(&mut o, &self.path, self.refuse_links, false)
    }

    /// Brings the memory up to date with the file when another process
    /// (or a person) changed it: the entries it added, or all of it again.
    /// A file that is damaged or not this store's starts over.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !self.fresh {
                    self.start_over();
                }
                self.stamp = None;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if self.stamp == Some(FileStamp::of(&meta)) {
            return Ok(());
        }
        let file = match self.open(false) {
            Ok(f) => f,
            Err(e) if crate::os::is_link_refused(&e) => {
                self.start_over();
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        file.lock_shared()?;
        let stamp = FileStamp::of(&file.metadata()?);
        let head = read_head(&file)?;
        let usable = head
            .as_ref()
            .is_some_and(|h| h.model == self.head.model && h.max_depth == self.head.max_depth);
        let Some(head) = head.filter(|_| usable) else {
            if !self.fresh {
                self.start_over();
            }
            // Judged by what it holds: replaced at the next commit.
            self.replaces = read_head(&file)?.map(|h| h.generation);
            self.stamp = Some(stamp);
            return Ok(());
        };
        let grown = !self.fresh
            && head.generation == self.head.generation
            && head.dims == self.head.dims
            && head.count >= self.head.count
            && head.covered >= self.head.covered;
        let from = if grown { self.head.count } else { 0 };
        let (mut offsets, mut scales, mut data) = if grown {
            (
                std::mem::take(&mut self.offsets),
                std::mem::take(&mut self.scales),
                std::mem::take(&mut self.data),
            )
        } else {
            Default::default()
        };
        match read_entries(&file, &head, from, &mut offsets, &mut scales, &mut data)? {
            true => {
                self.head = head;
                self.fresh = false;
                self.replaces = None;
                self.offsets = offsets;
                self.scales = scales;
                self.data = data;
                if !grown {
                    self.log_seen = None;
                }
            }
            false => {
                warn_damaged(&self.path);
                if !self.fresh {
                    self.start_over();
                }
                self.replaces = Some(head.generation);
            }
        }
        self.stamp = Some(stamp);
        Ok(())
    }

    /// Adds `b` to the file and to memory, if both are still as the batch
    /// found them (another process may have gone on meanwhile: then
    /// nothing is added, and the next [`sync`](Self::sync) reads its).
    pub(crate) fn commit(&mut self, b: Batch) -> io::Result<bool> {
        let (generation, count, covered, fresh) = b.base;
        if (
            self.head.generation,
            self.head.count,
            self.head.covered,
            self.fresh,
        ) != (generation, count, covered, fresh)
        {
            return Ok(false);
        }
        if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = self.open(true)?;
        file.lock()?;
        let on_disk = read_head(&file)?;
        let ours = |h: &Head| h.model == self.head.model && h.max_depth == self.head.max_depth;
        let fits = match (&on_disk, fresh) {
            // Fresh: over nothing, or over what was judged unusable.
            (None, true) => true,
            (Some(h), true) => !ours(h) || Some(h.generation) == self.replaces.or(b.replaces),
            (Some(h), false) => {
                ours(h) && (h.generation, h.count, h.covered) == (generation, count, covered)
            }
            (None, false) => false,
        };
        if !fits {
            // Read again at the next sync.
            self.stamp = None;
            return Ok(false);
        }
        let dims = if b.dims == 0 { self.head.dims } else { b.dims };
        if (!fresh && self.head.dims != 0 && dims != self.head.dims)
            || b.data.len() != b.offsets.len() * dims as usize
        {
            return Ok(false);
        }
        let head = Head {
            dims,
            generation,
            dev: b.dev,
            inode: b.inode,
            covered: b.covered,
            fingerprint: b.fingerprint,
            count: count + b.offsets.len() as u64,
            max_depth: self.head.max_depth,
            model: self.head.model.clone(),
        };
        if fresh {
            file.set_len(0)?;
        }
        let at = HEADER + count * head.entry_len();
        file.set_len(at)?;
        let mut bytes = Vec::with_capacity(b.offsets.len() * head.entry_len() as usize);
        let dims = dims as usize;
        for (i, (&o, &s)) in b.offsets.iter().zip(&b.scales).enumerate() {
            let start = bytes.len();
            bytes.extend_from_slice(&o.to_le_bytes());
            bytes.extend_from_slice(&s.to_le_bytes());
            bytes.extend(b.data[i * dims..(i + 1) * dims].iter().map(|v| *v as u8));
            let sum = xxhash_rust::xxh3::xxh3_64(&bytes[start..]) as u32;
            bytes.extend_from_slice(&sum.to_le_bytes());
        }
        crate::os::write_all_at(&file, &bytes, at)?;
        file.sync_data()?;
        crate::os::write_all_at(&file, &head.encode(), 0)?;
        self.stamp = Some(FileStamp::of(&file.metadata()?));
        drop(file);
        self.head = head;
        self.fresh = false;
        self.replaces = None;
        self.offsets.extend_from_slice(&b.offsets);
        self.scales.extend_from_slice(&b.scales);
        self.data.extend_from_slice(&b.data);
        Ok(true)
    }

    /// Removes the file (its log is gone) and forgets every vector.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        if !self.fresh || self.stamp.is_some() {
            self.start_over();
            self.stamp = None;
        }
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The file's header, if it has a whole one.
fn read_head(file: &File) -> io::Result<Option<Head>> {
    let mut b = vec![0u8; HEADER as usize];
    if crate::os::read_at(file, &mut b, 0)? < b.len() {
        return Ok(None);
    }
    Ok(Head::decode(&b))
}

/// Reads entries `from..head.count` onto the vectors given: false when one
/// is missing or its checksum fails.
fn read_entries(
    file: &File,
    head: &Head,
    from: u64,
    offsets: &mut Vec<u64>,
    scales: &mut Vec<f32>,
    data: &mut Vec<i8>,
) -> io::Result<bool> {
    let size = head.entry_len() as usize;
    let dims = head.dims as usize;
    if head.count > 0 && dims == 0 {
        return Ok(false);
    }
    let need = HEADER + head.count * head.entry_len();
    if file.metadata()?.len() < need {
        return Ok(false);
    }
    let mut buf = Vec::new();
    let mut i = from;
    while i < head.count {
        let n = (head.count - i).min(READ_PIECE as u64) as usize;
        buf.resize(n * size, 0);
        crate::os::read_exact_at(file, &mut buf, HEADER + i * head.entry_len())?;
        for e in buf.chunks_exact(size) {
            let sum = u32::from_le_bytes(e[size - 4..].try_into().expect("4 bytes"));
            if xxhash_rust::xxh3::xxh3_64(&e[..size - 4]) as u32 != sum {
                return Ok(false);
            }
            offsets.push(u64::from_le_bytes(e[0..8].try_into().expect("8 bytes")));
            scales.push(f32::from_le_bytes(e[8..12].try_into().expect("4 bytes")));
            data.extend(e[12..12 + dims].iter().map(|v| *v as i8));
        }
        i += n as u64;
    }
    // In log order, each once: otherwise not a file this code wrote.
    Ok(offsets.windows(2).all(|w| w[0] < w[1]))
}

/// Logs a vectors file found damaged.
fn warn_damaged(path: &Path) {
    #[cfg(feature = "server")]
    tracing::warn!(vectors = %path.display(), "the vectors file is damaged; embedding the log again");
    #[cfg(not(feature = "server"))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_any_changed_byte_is_caught() {
        let h = Head {
            dims: 64,
            generation: 7,
            dev: 1,
            inode: 2,
            covered: 300,
            fingerprint: 9,
            count: 4,
            max_depth: 64,
            model: "mock@64".into(),
        };
        let b = h.encode();
        assert_eq!(Head::decode(&b), Some(h));
        for i in [0, 9, 20, 75, 250] {
            let mut bad = b;
            bad[i] ^= 1;
            assert_eq!(Head::decode(&bad), None, "byte {i}");
        }
        assert_eq!(model_key(&"m".repeat(200)).len(), 21);
    }
}
