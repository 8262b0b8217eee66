//! The log file as the local writer uses it: opened for appending (a
//! regular file only), its identity, the advisory lock, one byte read.

use std::fs::{File, OpenOptions};
use std::path::Path;

pub(super) fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    crate::os::file_id(m)
}

/// Opens a file for reading, refused (`ELOOP`) if it is a symbolic link
/// unless `follow`.
pub(super) fn open_read(path: &Path, follow: bool) -> std::io::Result<File> {
    crate::os::open(OpenOptions::new().read(true), path, !follow, false)
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
    let file = crate::os::open(
        OpenOptions::new().read(true).create(true).append(true),
        path,
        !follow,
        false,
    )?;
    if !existed && sync_dir {
        // The new file's directory entry is on disk before any append is
        // acknowledged.
        if let Some(dir) = path.parent() {
            let dir = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            };
            let _ = crate::os::sync_dir(dir);
        }
    }
    Ok(file)
}

/// Whether `path` no longer names the open `file` (rotated, replaced or
/// removed).
pub(super) fn moved(file: &File, path: &Path) -> bool {
    match (
        crate::os::open_file_id(file),
        crate::os::path_id(path, false),
    ) {
        (Ok(a), Ok(b)) => a != b,
        _ => true,
    }
}

/// The append lock on the log (`os::lock_log`: `flock(LOCK_EX)` on Unix, a
/// byte past any end on Windows; the lock `wmreplay::append` and other
/// cooperating writers take), released when dropped.
pub(super) struct Locked<'f>(&'f File);

impl<'f> Locked<'f> {
    pub(super) fn take(file: &'f File) -> std::io::Result<Locked<'f>> {
        loop {
            match crate::os::lock_log(file) {
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
        let _ = crate::os::unlock_log(self.0);
    }
}

pub(super) use crate::append::byte_at;
