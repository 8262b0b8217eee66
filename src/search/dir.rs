//! The index's directory: tantivy's memory-mapped directory, with the
//! syncs of a catch-up's commit left out. The index is made from the log
//! and can always be made again, so a catch-up costs no `fsync`: its commit
//! is marked with the boot it was written in, and an index whose last
//! commit was not synced is built again after a reboot (a crash of the
//! process alone loses nothing the kernel already holds). A rebuild syncs
//! everything once, at its end.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use tantivy::directory::OwnedBytes;

use crate::input::map::{FileMap, SharedFileMap};

use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, TerminatingWrite,
    WatchCallback, WatchHandle, WritePtr,
};

/// This boot's id (`/proc/sys/kernel/random/boot_id`), or `""` where there
/// is none (then every unsynced index is built again at its next open).
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The directory: tantivy's for everything but reading the index's files,
/// which are mapped through the crate's SIGBUS guard (a file truncated
/// under a search reads zeros and marks its map, instead of killing the
/// process), and writing them (without a sync).
#[derive(Clone)]
pub(crate) struct Unsynced {
    inner: MmapDirectory,
    root: PathBuf,
    /// The files mapped, to tell whether one faulted.
    maps: Arc<Mutex<Vec<Weak<FileMap>>>>,
}

impl std::fmt::Debug for Unsynced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsynced")
            .field("root", &self.root)
            .finish()
    }
}

impl Unsynced {
    pub(crate) fn open(root: &Path) -> tantivy::Result<Unsynced> {
        Ok(Unsynced {
            inner: MmapDirectory::open(root)?,
            root: root.to_path_buf(),
            maps: Arc::default(),
        })
    }

    /// Whether a file still mapped was truncated under a read: what was
    /// read from it since it was mapped cannot be trusted.
    pub(crate) fn faulted(&self) -> bool {
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        maps.retain(|m| m.strong_count() > 0);
        maps.iter()
            .any(|m| m.upgrade().is_some_and(|m| m.faulted()))
    }
}

/// A file written without a sync when it is done.
struct Plain(std::fs::File);

impl Write for Plain {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TerminatingWrite for Plain {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.0.flush()
    }
}

impl Directory for Unsynced {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        let full = self.root.join(path);
        let file = std::fs::File::open(&full).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                OpenReadError::FileDoesNotExist(path.to_path_buf())
            } else {
                OpenReadError::wrap_io_error(e, path.to_path_buf())
            }
        })?;
        let len = file
            .metadata()
            .map_err(|e| OpenReadError::wrap_io_error(e, path.to_path_buf()))?
            .len();
        if len == 0 {
            return Ok(Arc::new(OwnedBytes::empty()));
        }
        let map = Arc::new(
            FileMap::open(&file)
                .map_err(|e| OpenReadError::wrap_io_error(e, path.to_path_buf()))?,
        );
        self.maps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(&map));
        Ok(Arc::new(OwnedBytes::new(SharedFileMap(map))))
    }
    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }
    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }
    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        let full = self.root.join(path);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&full)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    OpenWriteError::FileAlreadyExists(path.to_path_buf())
                } else {
                    OpenWriteError::wrap_io_error(e, path.to_path_buf())
                }
            })?;
        Ok(io::BufWriter::new(Box::new(Plain(file))))
    }
    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }
    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let full = self.root.join(path);
        let tmp = self
            .root
            .join(format!(".{}.tmp-{}", path.display(), std::process::id()));
        std::fs::write(&tmp, data)?;
        std::fs::rename(&tmp, &full)
    }
    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        match self.inner.acquire_lock(lock) {
            // A reader that may not write the index's directory cannot make
            // the lock file that keeps a writer's clean-up from deleting
            // files while it reads `meta.json` (the one blocking lock): it
            // reads without it. A writer deleting them meanwhile makes the
            // open fail, and the search is tried again.
            Err(LockError::IoError(e))
                if lock.is_blocking
                    && matches!(
                        e.kind(),
                        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
                    ) =>
            {
                Ok(DirectoryLock::from(Box::new(())))
            }
            other => other,
        }
    }
    fn watch(&self, callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(callback)
    }
    fn sync_directory(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Syncs every file of the index directory, then the directory.
pub(crate) fn sync_all(root: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            crate::os::sync_file(&entry.path())?;
        }
    }
    crate::os::sync_dir(root)
}
