//! The few file operations spelled differently on Unix and Windows:
//! positional reads and writes, opening without following a symbolic link,
//! a file's identity and its change times. Everything else is std.
//!
//! What Windows lacks is said where it matters: no status-change time (a
//! rewrite that sets the modification time back is caught by the prefix
//! fingerprint alone), no file identity (a replaced file likewise), no
//! `O_NONBLOCK` (a named pipe is refused as not a regular file by its
//! metadata before it is read), and no directory to sync.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::path::Path;

/// The error a refused symbolic link gives: `ELOOP` from `O_NOFOLLOW` on
/// Unix; on Windows `ERROR_CANT_RESOLVE_FILENAME`, which [`open`] returns
/// itself when the file it opened is a link.
#[cfg(unix)]
const LINK_REFUSED: i32 = libc::ELOOP;
#[cfg(windows)]
const LINK_REFUSED: i32 = 1921;

/// Whether `e` is a symbolic link refused by [`open`].
pub(crate) fn is_link_refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(LINK_REFUSED)
}

/// Opens `path` with `options`. With `refuse_links`, a symbolic link is
/// refused (see [`is_link_refused`]) instead of followed, without a window
/// between a check and the open: Unix opens with `O_NOFOLLOW`; Windows opens
/// the link itself (`FILE_FLAG_OPEN_REPARSE_POINT`) and refuses it if it is
/// one. With `nonblocking` (Unix only), a FIFO without a writer is opened
/// at once, to be refused as not regular by the caller.
pub(crate) fn open(
    options: &mut OpenOptions,
    path: &Path,
    refuse_links: bool,
    nonblocking: bool,
) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut flags = 0;
        if refuse_links {
            flags |= libc::O_NOFOLLOW;
        }
        if nonblocking {
            flags |= libc::O_NONBLOCK;
        }
        options.custom_flags(flags);
        options.open(path)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
        let _ = nonblocking;
        if !refuse_links {
            return options.open(path);
        }
        options.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT);
        let file = options.open(path)?;
        if file.metadata()?.file_type().is_symlink() {
            return Err(io::Error::from_raw_os_error(LINK_REFUSED));
        }
        Ok(file)
    }
}

/// Sets the permissions a created file gets (`0o644` and the like) where
/// files have modes; Windows has none to set.
pub(crate) fn create_mode(options: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(windows)]
    let _ = mode;
    options
}

/// Takes the log's append lock on `file`, waiting while another writer
/// holds it. On Unix it is `flock(LOCK_EX)` (advisory: readers never see
/// it). Windows's locks are mandatory, so a lock on the whole file would
/// refuse other processes' reads of the log while a batch is written: the
/// lock there is on one byte at [`LOCK_BYTE`], far past any end the log can
/// have, which every writer of this crate (the CLI, the server, the
/// packages) takes.
pub(crate) fn lock_log(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    return file.lock();
    #[cfg(windows)]
    return windows_lock::lock(file, LOCK_BYTE);
}

/// Releases what [`lock_log`] took (closing the file releases it too).
pub(crate) fn unlock_log(file: &File) -> io::Result<()> {
    #[cfg(unix)]
    return file.unlock();
    #[cfg(windows)]
    return windows_lock::unlock(file, LOCK_BYTE);
}

/// The offset of the byte Windows writers lock: 2^63 - 2, far past the
/// largest file NTFS allows (2^53 bytes).
#[cfg(windows)]
pub(crate) const LOCK_BYTE: u64 = (1 << 63) - 2;

#[cfg(windows)]
mod windows_lock {
    use std::fs::File;
    use std::io;
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::{
        LOCKFILE_EXCLUSIVE_LOCK, LockFileEx, UnlockFileEx,
    };
    use windows_sys::Win32::System::IO::OVERLAPPED;

    fn at(offset: u64) -> OVERLAPPED {
        // SAFETY: OVERLAPPED is plain data (integers, a handle, a union of
        // integers and a pointer) for which all-zero bytes are valid.
        let mut o: OVERLAPPED = unsafe { std::mem::zeroed() };
        o.Anonymous.Anonymous.Offset = offset as u32;
        o.Anonymous.Anonymous.OffsetHigh = (offset >> 32) as u32;
        o
    }

    pub(super) fn lock(file: &File, offset: u64) -> io::Result<()> {
        let mut o = at(offset);
        // SAFETY: the handle is `file`'s, open for the call; `o` outlives
        // it, and the call is synchronous (std opens files without
        // FILE_FLAG_OVERLAPPED), so it waits for the lock before returning.
        let ok = unsafe {
            LockFileEx(
                file.as_raw_handle(),
                LOCKFILE_EXCLUSIVE_LOCK,
                0,
                1,
                0,
                &mut o,
            )
        };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub(super) fn unlock(file: &File, offset: u64) -> io::Result<()> {
        let mut o = at(offset);
        // SAFETY: as in `lock`: `file`'s handle, `o` outliving the
        // synchronous call.
        let ok = unsafe { UnlockFileEx(file.as_raw_handle(), 0, 1, 0, &mut o) };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// Syncs the file at `path` to disk. Windows flushes only through a handle
/// that may write.
pub(crate) fn sync_file(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    let file = File::open(path)?;
    #[cfg(windows)]
    let file = OpenOptions::new().write(true).open(path)?;
    file.sync_all()
}

/// Makes the entries of directory `dir` (a file created or renamed in it)
/// durable: `fsync` of the directory on Unix; nothing on Windows, where
/// NTFS journals them and a directory cannot be flushed like a file.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    return File::open(dir)?.sync_all();
    #[cfg(windows)]
    {
        let _ = dir;
        Ok(())
    }
}

/// Reads at `offset` once; Windows moves the file's position, Unix does
/// not (no caller relies on either).
fn read_once(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::read_at(file, buf, offset);
    #[cfg(windows)]
    return std::os::windows::fs::FileExt::seek_read(file, buf, offset);
}

/// Reads at `offset` as many bytes as the file has there, up to
/// `buf.len()`.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match read_once(file, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Fills `buf` from `offset`; `UnexpectedEof` if the file ends first.
pub(crate) fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    if read_at(file, buf, offset)? < buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file ends before the bytes to read",
        ));
    }
    Ok(())
}

/// Writes all of `buf` at `offset`.
pub(crate) fn write_all_at(file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    return std::os::unix::fs::FileExt::write_all_at(file, buf, offset);
    #[cfg(windows)]
    {
        let mut done = 0;
        while done < buf.len() {
            match std::os::windows::fs::FileExt::seek_write(
                file,
                &buf[done..],
                offset + done as u64,
            ) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Which file `meta` describes, as two numbers equal for the same file and
/// different for a file that replaced it: device and inode on Unix. On
/// Windows, whose metadata does not carry the file index on stable Rust,
/// both are 0: a log that replaced another is told by its prefix
/// fingerprint and length instead, as every reader checks those too; where
/// a handle or a path is at hand, [`open_file_id`] and [`path_id`] give the
/// real one.
pub(crate) fn file_id(meta: &Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(windows)]
    {
        let _ = meta;
        (0, 0)
    }
}

/// Which file the open `file` is: as [`file_id`] on Unix; on Windows the
/// volume and file index read through the handle, so a log renamed away
/// and replaced is told apart from the one held open.
pub(crate) fn open_file_id(file: &File) -> io::Result<(u64, u64)> {
    #[cfg(unix)]
    return Ok(file_id(&file.metadata()?));
    #[cfg(windows)]
    return windows_id::of(file);
}

/// Which file or directory `path` names now, following a symbolic link
/// unless `no_follow`: as [`open_file_id`] (Windows opens the path, with no
/// access asked for, to read its index).
pub(crate) fn path_id(path: &Path, no_follow: bool) -> io::Result<(u64, u64)> {
    #[cfg(unix)]
    {
        let meta = if no_follow {
            std::fs::symlink_metadata(path)?
        } else {
            std::fs::metadata(path)?
        };
        Ok(file_id(&meta))
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        // Directories open only with backup semantics; the link itself
        // with the reparse-point flag.
        const FILE_FLAG_BACKUP_SEMANTICS: u32 = 0x0200_0000;
        const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
        let mut flags = FILE_FLAG_BACKUP_SEMANTICS;
        if no_follow {
            flags |= FILE_FLAG_OPEN_REPARSE_POINT;
        }
        let file = OpenOptions::new()
            .access_mode(0)
            .custom_flags(flags)
            .open(path)?;
        windows_id::of(&file)
    }
}

#[cfg(windows)]
mod windows_id {
    use std::fs::File;
    use std::io;
    use std::os::windows::io::AsRawHandle;
    use windows_sys::Win32::Storage::FileSystem::{
        BY_HANDLE_FILE_INFORMATION, GetFileInformationByHandle,
    };

    pub(super) fn of(file: &File) -> io::Result<(u64, u64)> {
        // SAFETY: the struct is plain integers and FILETIMEs (integers),
        // valid as all zeroes.
        let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: `file`'s handle is open for the call and `info` is a
        // writable struct of the type the call fills.
        if unsafe { GetFileInformationByHandle(file.as_raw_handle(), &mut info) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((
            u64::from(info.dwVolumeSerialNumber),
            (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
        ))
    }
}

/// What identifies a file's bytes short of reading them: a change to them
/// changes its length, its times or (on Unix) its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
    inode: u64,
}

impl FileStamp {
    pub(crate) fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            len: meta.len(),
            modified: modified(meta),
            changed: changed(meta).unwrap_or_default(),
            inode: file_id(meta).1,
        }
    }
}

/// The modification time as seconds and nanoseconds.
fn modified(meta: &Metadata) -> (i64, i64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.mtime(), meta.mtime_nsec())
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        let t = meta.last_write_time();
        ((t / 10_000_000) as i64, (t % 10_000_000 * 100) as i64)
    }
}

/// The status-change time (Unix's `ctime`: it moves on every write and
/// cannot be set back); Windows has none.
pub(crate) fn changed(meta: &Metadata) -> Option<(i64, i64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some((meta.ctime(), meta.ctime_nsec()))
    }
    #[cfg(windows)]
    {
        let _ = meta;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_reads_and_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        write_all_at(&file, b"hello world", 0).unwrap();
        write_all_at(&file, b"W", 6).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&file, &mut buf, 6).unwrap();
        assert_eq!(&buf, b"World");
        let mut long = [0u8; 8];
        assert_eq!(read_at(&file, &mut long, 6).unwrap(), 5);
        let e = read_exact_at(&file, &mut long, 6).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// The append lock keeps a second writer waiting, and never a reader:
    /// Windows's locks are mandatory, and one on the log's bytes would
    /// refuse reads of them (`ERROR_LOCK_VIOLATION`).
    #[test]
    fn the_log_lock_excludes_writers_not_readers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, b"{\"type\":\"a\",\"ts_ms\":1}\n").unwrap();
        let open = || {
            OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)
                .unwrap()
        };
        let (a, b) = (open(), open());
        lock_log(&a).unwrap();
        let reader = File::open(&path).unwrap();
        let mut buf = [0u8; 8];
        read_exact_at(&reader, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"{\"type\":");
        assert_eq!(std::fs::read(&path).unwrap().len(), 23);
        let taken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let taken = taken.clone();
            std::thread::spawn(move || {
                lock_log(&b).unwrap();
                taken.store(true, std::sync::atomic::Ordering::SeqCst);
                unlock_log(&b).unwrap();
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !taken.load(std::sync::atomic::Ordering::SeqCst),
            "both writers held the lock"
        );
        unlock_log(&a).unwrap();
        waiter.join().unwrap();
        assert!(taken.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[cfg(unix)]
    #[test]
    fn links_refused_only_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open(OpenOptions::new().read(true), &link, true, false).unwrap_err();
        assert!(is_link_refused(&e), "{e}");
        assert!(open(OpenOptions::new().read(true), &link, false, true).is_ok());
        assert!(open(OpenOptions::new().read(true), &target, true, true).is_ok());
        let replaced = dir.path().join("r");
        std::fs::write(&replaced, b"x").unwrap();
        let before = file_id(&std::fs::metadata(&target).unwrap());
        assert_eq!(before, file_id(&std::fs::metadata(&link).unwrap()));
        std::fs::rename(&replaced, &target).unwrap();
        assert_ne!(before, file_id(&std::fs::metadata(&target).unwrap()));
    }
}
