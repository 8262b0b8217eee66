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
mod map;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::Error;
#[doc(hidden)]
pub use fingerprint::fingerprinted_bytes;
pub(crate) use fingerprint::{fingerprint_bytes, fingerprint_file};

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
    Owned(Vec<u8>),
    Mapped(map::Guarded),
}

/// The bytes of an opened log.
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
        let path = path.as_ref();
        let file = match open_nonblocking(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(LogBytes {
                    path: path.to_path_buf(),
                    bytes: Bytes::Empty,
                    identity: None,
                });
            }
            Err(e) => return Err(Error::io(path, "cannot open", e)),
        };
        let meta = file
            .metadata()
            .map_err(|e| Error::io(path, "cannot stat", e))?;
        check_regular(path, &meta)?;
        let identity = Some(identity_of(&meta));
        let bytes = if mode == ReadMode::Auto && meta.len() > 0 {
            match map::map(&file) {
                Ok(m) => Bytes::Mapped(map::Guarded::new(m, meta.modified().ok())),
                Err(_) => Bytes::Owned(read_file(&file, path, &meta)?),
            }
        } else {
            Bytes::Owned(read_file(&file, path, &meta)?)
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
            Bytes::Mapped(m) => &m.map,
        }
    }

    /// Checks that the bytes handed out were the file's: an error if the
    /// map hit a truncated page, or the file is now shorter than what was
    /// read. Call it after using [`bytes`](Self::bytes) and before trusting
    /// the result. Bytes that were read (not mapped) are always intact.
    pub fn verify(&self) -> Result<(), Error> {
        if let (Bytes::Owned(v), Some(id)) = (&self.bytes, self.identity) {
            // Read with read(): a read cut short by a truncation ends early;
            // otherwise the file must still be the one it was read from, no
            // shorter.
            if (v.len() as u64) < id.len {
                return Err(Error::Changed {
                    path: self.path.clone(),
                    what: "it was truncated while it was read",
                });
            }
            return match std::fs::metadata(&self.path) {
                Ok(now) if identity_of(&now).same_file(&id) && now.len() >= v.len() as u64 => {
                    Ok(())
                }
                Ok(now) if now.len() < v.len() as u64 => Err(Error::Changed {
                    path: self.path.clone(),
                    what: "it is now shorter",
                }),
                _ => Err(Error::Changed {
                    path: self.path.clone(),
                    what: "it was removed or replaced",
                }),
            };
        }
        let Bytes::Mapped(m) = &self.bytes else {
            return Ok(());
        };
        if m.faulted() {
            return Err(Error::Changed {
                path: self.path.clone(),
                what: "it was truncated",
            });
        }
        let changed = |what| {
            Err(Error::Changed {
                path: self.path.clone(),
                what,
            })
        };
        match std::fs::metadata(&self.path) {
            Ok(now) if now.len() < m.map.len() as u64 => changed("it is now shorter"),
            // Same length but modified: not an append, so a rewrite.
            Ok(now)
                if now.len() == m.map.len() as u64
                    && m.modified.is_some()
                    && now.modified().ok() != m.modified =>
            {
                changed("it was rewritten")
            }
            Ok(_) => Ok(()),
            Err(_) => changed("it was removed or replaced"),
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
}

/// Opens `path` for reading without blocking on a FIFO that has no writer
/// (the file is then refused as not regular); `O_NONBLOCK` changes nothing
/// for regular files.
fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NONBLOCK);
    }
    o.open(path)
}

/// Opens a log for reading: `None` if it does not exist, an error naming
/// the path if it is not a regular file (refused without blocking).
pub(crate) fn open_regular(path: &Path) -> Result<Option<(File, std::fs::Metadata)>, Error> {
    let file = match open_nonblocking(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, "cannot open", e)),
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
    let what = if meta.is_dir() {
        "it is a directory"
    } else {
        "it is not a regular file (a FIFO, a device or a socket)"
    };
    Err(Error::io(
        path,
        "cannot read",
        std::io::Error::new(std::io::ErrorKind::InvalidInput, what),
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

impl FileIdentity {
    /// Whether `other` is the same file (device and inode), whatever its
    /// length.
    pub fn same_file(&self, other: &FileIdentity) -> bool {
        self.dev == other.dev && self.inode == other.inode
    }
}

#[cfg(unix)]
pub(crate) fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    use std::os::unix::fs::MetadataExt;
    FileIdentity {
        dev: meta.dev(),
        inode: meta.ino(),
        len: meta.len(),
    }
}

#[cfg(not(unix))]
pub(crate) fn identity_of(meta: &std::fs::Metadata) -> FileIdentity {
    FileIdentity {
        dev: 0,
        inode: 0,
        len: meta.len(),
    }
}
