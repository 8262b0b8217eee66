//! Opening a log: the bytes of the file as one slice, memory-mapped when the
//! file is a regular file and read into memory otherwise, plus its identity.
//!
//! A missing file is an empty log (the contract's rule 1); every other I/O
//! failure is an [`Error`] naming the path. The engine itself only ever sees
//! `&[u8]`: mapping and reading are just two ways to get that slice.
//!
//! All of the crate's `unsafe` for the map lives in `LogBytes::map`, in this file.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::Error;

/// How to get the bytes of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadMode {
    /// Map regular files, read anything else (pipes, character devices).
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
    Mapped(memmap2::Mmap),
}

/// The bytes of an opened log.
pub struct LogBytes {
    path: PathBuf,
    bytes: Bytes,
    identity: Option<FileIdentity>,
}

impl LogBytes {
    /// Opens `path`. A missing file gives an empty log with no identity.
    pub fn open(path: impl AsRef<Path>, mode: ReadMode) -> Result<LogBytes, Error> {
        let path = path.as_ref();
        let file = match File::open(path) {
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
        if meta.is_dir() {
            return Err(Error::io(
                path,
                "cannot read",
                std::io::Error::new(std::io::ErrorKind::IsADirectory, "is a directory"),
            ));
        }
        let identity = Some(identity_of(&meta));
        let bytes = if mode == ReadMode::Auto && meta.is_file() && meta.len() > 0 {
            match Self::map(&file) {
                Ok(m) => Bytes::Mapped(m),
                Err(_) => Bytes::Owned(read_all(&file, path, meta.len())?),
            }
        } else {
            Bytes::Owned(read_all(&file, path, meta.len())?)
        };
        Ok(LogBytes {
            path: path.to_path_buf(),
            bytes,
            identity,
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

    fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
        // SAFETY: the map is read-only and private to this value. What can go
        // wrong is outside the process: if another process truncates the file
        // while it is mapped, touching the pages past the new end raises
        // SIGBUS, and if it rewrites bytes in place the slice changes under
        // us. Working-memory logs are append-only by contract (appends never
        // disturb mapped bytes: the map covers only the length at open time);
        // callers that must survive truncation under them use
        // `ReadMode::Read`. Rust's aliasing rules are not at risk because the
        // engine only reads the bytes and never keeps references across calls
        // that might observe a change.
        let map = unsafe { memmap2::Mmap::map(file)? };
        #[cfg(unix)]
        {
            // Replay reads the log front to back; tell the kernel to read ahead.
            let _ = map.advise(memmap2::Advice::Sequential);
        }
        Ok(map)
    }

    /// The log's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Empty => &[],
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
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
}

fn read_all(mut file: &File, path: &Path, hint: u64) -> Result<Vec<u8>, Error> {
    let mut v = Vec::with_capacity(hint as usize);
    file.read_to_end(&mut v)
        .map_err(|e| Error::io(path, "cannot read", e))?;
    Ok(v)
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
