//! Opening a log: the bytes of the file as one slice, memory-mapped ([`map`])
//! or read into memory, plus its identity.
//!
//! A missing file is an empty log (the contract's rule 1); every other I/O
//! failure is an [`Error`] naming the path. Only regular files are logs: a
//! FIFO, a device or a socket is refused at once. The engine itself only
//! ever sees `&[u8]`: mapping and reading are just two ways to get that
//! slice. [`LogBytes::verify`] tells whether the file changed while its
//! bytes were in use (truncated under the map or during the read, replaced,
//! rewritten), so a caller never presents a result read from a file that
//! changed under it. The live state reads appended bytes with `read()`,
//! which never faults, and checks the prefix it holds with a
//! [`fingerprint`](fingerprint::fingerprint_bytes).
//!
//! [`lines`] splits the bytes into lines and the parallel parse's chunks.

mod fingerprint;
pub(crate) mod lines;
pub(crate) mod map;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::Error;
#[doc(hidden)]
pub use fingerprint::fingerprinted_bytes;
pub(crate) use fingerprint::{fingerprint_bytes, fingerprint_file, read_from};

/// How to get the bytes of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Map the file (read it when it cannot be mapped).
    #[default]
    Auto,
    /// Always read the file into memory with `read()`.
    Read,
}

/// Which file a log was: enough to notice a rotation or truncation later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileIdentity {
    /// Device number (0 where the platform has none).
    pub dev: u64,
    /// Inode number (0 where the platform has none).
    pub inode: u64,
    /// Length in bytes when opened.
    pub len: u64,
}

enum Bytes {
    Empty,
    /// Bytes from a reader or the caller: nothing to check them against.
    Owned(Vec<u8>),
    /// A file read with `read()`, kept open to check what was read against
    /// it (see [`LogBytes::verify`]).
    Read(ReadFile),
    Mapped(map::Guarded),
}

/// A regular file's bytes, read with `read()`.
struct ReadFile {
    bytes: Vec<u8>,
    /// The file they were read from.
    file: File,
    /// When it last changed, when opened.
    stamp: Stamp,
}

impl ReadFile {
    /// Reads `file` (opened from `path`, with metadata `meta`) whole.
    fn read(file: File, path: &Path, meta: &std::fs::Metadata) -> Result<ReadFile, Error> {
        let bytes = read_file(&file, path, meta)?;
        Ok(ReadFile {
            bytes,
            file,
            stamp: Stamp::of(meta),
        })
    }
}

/// The bytes of an opened log.
///
/// ```
/// use wmreplay::{LogBytes, ReadMode, ReplayOptions, replay};
///
/// let dir = std::env::temp_dir().join(format!("wmreplay-doc-logbytes-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("working_memory.log");
/// std::fs::write(&path, "{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n")?;
///
/// let log = LogBytes::open(&path, ReadMode::Auto)?;
/// let replayed = replay(log.bytes(), &ReplayOptions::default());
/// assert_eq!(replayed.stats().parsed_entries, 1);
/// // Whether the file was rewritten under the replay (a map can change).
/// log.verify()?;
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LogBytes {
    path: PathBuf,
    bytes: Bytes,
    identity: Option<FileIdentity>,
}

impl LogBytes {
    /// Opens `path`. A missing file gives an empty log with no identity.
    /// Only regular files are logs: a FIFO, a device or a socket is refused
    /// at once (it would block, or never end), without waiting for a
    /// writer. A file read with `read()` is checked as it is read: if it
    /// shrinks or is replaced meanwhile, the result is [`Error::Changed`].
    pub fn open(path: impl AsRef<Path>, mode: ReadMode) -> Result<LogBytes, Error> {
        LogBytes::open_with(path.as_ref(), mode, false)
    }

    /// [`open`](Self::open), refusing a symbolic link when `refuse_links`
    /// ([`ReplayOptions::refuse_links`](crate::ReplayOptions::refuse_links)).
    pub(crate) fn open_with(
        path: &Path,
        mode: ReadMode,
        refuse_links: bool,
    ) -> Result<LogBytes, Error> {
        let Some((file, meta)) = open_regular(path, refuse_links)? else {
            return Ok(LogBytes {
                path: path.to_path_buf(),
                bytes: Bytes::Empty,
                identity: None,
            });
        };
        LogBytes::of_file(path, file, &meta, mode)
    }

    /// The bytes of a log already open (`file`, its metadata `meta` as
    /// read after opening it): a reader that must read the very file it
    /// looked at, not whatever the path names by then.
    pub(crate) fn of_file(
        path: &Path,
        file: std::fs::File,
        meta: &std::fs::Metadata,
        mode: ReadMode,
    ) -> Result<LogBytes, Error> {
        let meta = meta.clone();
        let identity = Some(identity_of(&meta));
        let bytes = if mode == ReadMode::Auto && meta.len() > 0 {
            match map::map(&file, meta.len()) {
                Ok(m) => Bytes::Mapped(map::Guarded::new(m, Stamp::of(&meta))),
                Err(_) => Bytes::Read(ReadFile::read(file, path, &meta)?),
            }
        } else {
            Bytes::Read(ReadFile::read(file, path, &meta)?)
        };
        Ok(LogBytes {
            path: path.to_path_buf(),
            bytes,
            identity,
        })
    }

    /// Reads a log from any reader (a pipe, a socket, a decompressor), as
    /// `ReadMode::Read` reads a file: interrupted reads are retried, and any
    /// other error is an [`Error::Io`] naming `path`.
    pub fn from_reader(path: impl Into<PathBuf>, reader: impl Read) -> Result<LogBytes, Error> {
        let path = path.into();
        let bytes = read_to_end(reader, &path, 0)?;
        Ok(LogBytes {
            path,
            bytes: Bytes::Owned(bytes),
            identity: None,
        })
    }

    /// Wraps bytes already in memory (tests, callers with their own I/O).
    pub fn from_vec(path: impl Into<PathBuf>, bytes: Vec<u8>) -> LogBytes {
        LogBytes {
            path: path.into(),
            bytes: Bytes::Owned(bytes),
            identity: None,
        }
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Empty => &[],
            Bytes::Owned(v) => v,
            Bytes::Read(r) => &r.bytes,
            Bytes::Mapped(m) => &m.map,
        }
    }

    /// Checks that the bytes handed out were the file's: an error
    /// ([`Error::Changed`]) if the file changed while they were in use, so
    /// a result read from them is not to be trusted. Call it after using
    /// [`bytes`](Self::bytes) and before presenting the result.
    ///
    /// A map: it hit a truncated page, or the file is now shorter, or has
    /// its length and a new modification time (rewritten), or is gone.
    /// Bytes read with `read()`: the read ended short of the length the file
    /// had when opened (truncated while read), the file is now shorter, gone
    /// or another file, it kept its length but was modified, or its first
    /// bytes no longer match what was read (rewritten during or after the
    /// read; compared by the prefix fingerprint of the bytes read, the
    /// live state's: whole up to 64 KiB, 17 blocks of 4 KiB beyond). Bytes
    /// from a reader or a `Vec` are not checked.
    pub fn verify(&self) -> Result<(), Error> {
        let what = match (&self.bytes, self.identity) {
            (Bytes::Read(r), Some(id)) => r.changed(&self.path, id),
            (Bytes::Mapped(m), _) => map_changed(m, &self.path),
            _ => None,
        };
        match what {
            None => Ok(()),
            Some(what) => Err(Error::Changed {
                path: self.path.clone(),
                what,
            }),
        }
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's identity when opened; `None` for a missing file.
    pub fn identity(&self) -> Option<FileIdentity> {
        self.identity
    }

    /// Whether the file did not exist when opened: a missing file is an
    /// empty log, not an error, and this tells it from an empty file (a
    /// typo in the path). Always `false` for [`from_vec`](Self::from_vec)
    /// and [`from_reader`](Self::from_reader).
    /// ```
    /// let missing = wmreplay::LogBytes::open("/no/such/wm.log", wmreplay::ReadMode::Auto)?;
    /// assert!(missing.bytes().is_empty() && missing.is_missing());
    /// # Ok::<(), wmreplay::Error>(())
    /// ```
    pub fn is_missing(&self) -> bool {
        matches!(self.bytes, Bytes::Empty)
    }

    /// Whether the bytes are memory-mapped (as opposed to read).
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, Bytes::Mapped(_))
    }

    /// Hands a mapped log's pages back, in parallel (one part per thread
    /// of rayon's pool): for when the bytes are no longer needed, such as
    /// just before a command exits.
    ///
    /// Unmapping a 1 GiB map tears down its 262,144 page-table entries on one
    /// core (about 30 ms here, at exit, with the other cores idle), and two
    /// `munmap`s cannot run at once (each takes the address space's lock
    /// exclusively). `MADV_DONTNEED` takes it shared, so the parts are
    /// dropped together and the final unmap finds nothing left to tear down.
    /// The bytes stay readable: reading them again faults them back in from
    /// the page cache. Does nothing for a log that was read.
    pub fn release_pages(&self) {
        if let Bytes::Mapped(m) = &self.bytes {
            map::release(&m.map);
        }
    }

    /// [`release_pages`](Self::release_pages) for `range` of the bytes,
    /// from the start of the huge page it starts in.
    pub fn release_range(&self, range: std::ops::Range<usize>) {
        if let Bytes::Mapped(m) = &self.bytes {
            map::release_range(&m.map, range);
        }
    }
}

impl ReadFile {
    /// What changed in the file at `path`, opened as `id`, since its
    /// bytes were read, if anything.
    fn changed(&self, path: &Path, id: FileIdentity) -> Option<&'static str> {
        let read = self.bytes.len() as u64;
        // A read cut short by a truncation ends early.
        if read < id.len {
            return Some("it was truncated while it was read");
        }
        let Ok(now) = std::fs::metadata(path) else {
            return Some("it was removed or replaced");
        };
        if !identity_of(&now).same_file(&id) {
            return Some("it was removed or replaced");
        }
        if now.len() < read {
            return Some("it is now shorter");
        }
        // The length it had when opened, but modified: not an append. (A
        // read that took appended bytes too is checked by content below.)
        if rewritten_in_place(path, &now, id.len, &self.stamp) {
            return Some("it was rewritten");
        }
        // Truncated and written again while it was read (or since): the
        // bytes read mix two versions, or are no longer the file's.
        match fingerprint_file(&self.file, read) {
            Ok(Some(fp)) if fp == fingerprint_bytes(&self.bytes) => None,
            Ok(Some(_)) => Some("it was rewritten while it was read"),
            Ok(None) => Some("it is now shorter"),
            Err(_) => Some("it can no longer be read"),
        }
    }
}

/// Whether the file at `path`, found as `now`, was rewritten in place since
/// it was `len` bytes long with `stamp`: the same length under a new time,
/// and not an append under way.
fn rewritten_in_place(path: &Path, now: &std::fs::Metadata, len: u64, stamp: &Stamp) -> bool {
    now.len() == len && Stamp::of(now) != *stamp && !grows(path, len)
}

/// Whether the file at `path`, seen `len` bytes long with a new
/// modification time, is being appended to: it grows within about 0.1 s.
///
/// A write stamps the file's times before it extends it (Linux updates
/// them, then copies the bytes and moves the end), so an append under way
/// shows its old length with its new time for a moment, which alone would
/// read as a rewrite of the same length. Asked only when a file kept its
/// length under a new time, which an append-only log sees only in that
/// moment; a file rewritten in place keeps its length and pays the wait.
fn grows(path: &Path, len: u64) -> bool {
    for wait_ms in [0, 1, 2, 4, 8, 16, 32, 64] {
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        match std::fs::metadata(path) {
            Ok(m) if m.len() > len => return true,
            Ok(m) if m.len() < len => return false,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// What changed in the mapped file at `path` since it was mapped, if
/// anything.
fn map_changed(m: &map::Guarded, path: &Path) -> Option<&'static str> {
    if m.faulted() {
        return Some("it was truncated");
    }
    match std::fs::metadata(path) {
        Ok(now) if now.len() < m.map.len() as u64 => Some("it is now shorter"),
        Ok(now) if rewritten_in_place(path, &now, m.map.len() as u64, &m.stamp) => {
            Some("it was rewritten")
        }
        Ok(_) => None,
        Err(_) => Some("it was removed or replaced"),
    }
}

/// Opens `path` for reading without blocking on a FIFO that has no writer
/// (the file is then refused as not regular); `O_NONBLOCK` changes nothing
/// for regular files.
fn open_nonblocking(path: &Path, refuse_links: bool) -> std::io::Result<File> {
    crate::os::open(
        std::fs::OpenOptions::new().read(true),
        path,
        refuse_links,
        true,
    )
}

/// Opens a log for reading: `None` if it does not exist, an error naming
/// the path if it is not a regular file (refused without blocking), or if
/// it is a symbolic link and `refuse_links` is set.
pub(crate) fn open_regular(
    path: &Path,
    refuse_links: bool,
) -> Result<Option<(File, std::fs::Metadata)>, Error> {
    let file = match open_nonblocking(path, refuse_links) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            // A socket cannot be opened at all (ENXIO): say what it is.
            if let Ok(meta) = std::fs::metadata(path) {
                check_regular(path, &meta)?;
            }
            return Err(Error::io(path, "cannot open", e));
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| Error::io(path, "cannot stat", e))?;
    check_regular(path, &meta)?;
    Ok(Some((file, meta)))
}

/// Refuses anything but a regular file: a directory, a FIFO, a character or
/// block device, a socket.
pub(crate) fn check_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), Error> {
    if meta.is_file() {
        return Ok(());
    }
    let (kind, what) = if meta.is_dir() {
        (std::io::ErrorKind::IsADirectory, "it is a directory")
    } else {
        (
            std::io::ErrorKind::InvalidInput,
            "it is not a regular file (a FIFO, a device or a socket)",
        )
    };
    Err(Error::io(
        path,
        "cannot read",
        std::io::Error::new(kind, what),
    ))
}

/// Reads a regular file whole. Whether it shrank or was replaced while it
/// was read is for [`LogBytes::verify`] to tell, as for a map.
fn read_file(file: &File, path: &Path, meta: &std::fs::Metadata) -> Result<Vec<u8>, Error> {
    read_to_end(file, path, meta.len())
}

/// Reads everything from `reader`: an interrupted read is retried, any other
/// error ends the read as an [`Error::Io`] naming `path`. Memory is reserved
/// fallibly: a log too large for memory is an [`Error::OutOfMemory`], not
/// an abort.
fn read_to_end(mut reader: impl Read, path: &Path, hint: u64) -> Result<Vec<u8>, Error> {
    let mut v: Vec<u8> = Vec::new();
    let want = usize::try_from(hint).map_err(|_| Error::out_of_memory(path, hint))?;
    v.try_reserve_exact(want)
        .map_err(|_| Error::out_of_memory(path, hint))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(v),
            Ok(n) => {
                v.try_reserve(n)
                    .map_err(|_| Error::out_of_memory(path, (v.len() + n) as u64))?;
                v.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(path, "cannot read", e)),
        }
    }
}

/// When a file last changed, as far as its metadata tells: its
/// modification time, and on Unix its status-change time (ctime). Both move
/// on every write; the modification time can also be set back after a
/// rewrite (`cp -p`, `rsync -t`, `touch -d`), the status-change time cannot
/// (it also moves on `chmod` and the like, which only costs a needless check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    modified: Option<std::time::SystemTime>,
    changed: Option<(i64, i64)>,
}

impl Stamp {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            modified: meta.modified().ok(),
            changed: crate::os::changed(meta),
        }
    }
}

impl FileIdentity {
    /// Whether `other` is the same file (device and inode), whatever its
    /// length.
    pub fn same_file(&self, other: &FileIdentity) -> bool {
        self.dev == other.dev && self.inode == other.inode
    }
}

pub(crate) fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    let (dev, inode) = crate::os::file_id(meta);
    FileIdentity {
        dev,
        inode,
        len: meta.len(),
    }
}

#[cfg(test)]
mod tests;
