//! The log file as the local writer uses it: opened for appending (a
//! regular file only), its identity, the advisory lock, one byte read.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub(super) fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino())
}

/// Options that read a file, and refuse it (`ELOOP`) if it is a symbolic
/// link unless `follow`.
pub(super) fn options(follow: bool) -> OpenOptions {
    let mut options = OpenOptions::new();
    options.read(true);
    if !follow {
        options.custom_flags(libc::O_NOFOLLOW);
    }
    options
}

/// Opens (creating if needed) the log for appending. A log that is there
/// must be a regular file: a FIFO or a device would block or never end.
/// Unless `follow`, a log that is a symbolic link is refused.
pub(super) fn open_log(path: &Path, sync_dir: bool, follow: bool) -> std::io::Result<File> {
    let meta = if follow {
        std::fs::metadata(path)
    } else {
        std::fs::symlink_metadata(path)
    };
    let existed = match meta {
        Ok(m) if !m.is_file() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    // A link swapped in after the check above is refused here (ELOOP), so
    // no write ever lands outside.
    let file = options(follow).create(true).append(true).open(path)?;
    if !existed && sync_dir {
        // The new file's directory entry is on disk before any append is
        // acknowledged.
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
    }
    Ok(file)
}

/// Whether `path` no longer names the open `file` (rotated, replaced or
/// removed).
pub(super) fn moved(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => identity(&a) != identity(&b),
        _ => true,
    }
}

/// The advisory lock on the log (`File::lock`: `flock(LOCK_EX)` on Linux,
/// the lock `wmreplay::append` and other cooperating writers take),
/// released when dropped.
pub(super) struct Locked<'f>(&'f File);

impl<'f> Locked<'f> {
    pub(super) fn take(file: &'f File) -> std::io::Result<Locked<'f>> {
        loop {
            match file.lock() {
                Ok(()) => return Ok(Locked(file)),
                // A signal arrived while waiting: wait again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

pub(super) use crate::append::byte_at;
