//! Opening a log: the bytes of the file as one slice, memory-mapped when the
//! file is a regular file and read into memory otherwise, plus its identity.
//!
//! A missing file is an empty log (the contract's rule 1); every other I/O
//! failure is an [`Error`] naming the path. The engine itself only ever sees
//! `&[u8]`: mapping and reading are just two ways to get that slice.
//!
//! All of the crate's `unsafe` for the map lives in this file: taking the map
//! (`LogBytes::map`) and the guard that keeps a truncation under the map from
//! killing the process (`guard`); so does the one other call about paging,
//! the huge-page hint for the engine's big buffers ([`huge_buffer`],
//! [`huge_vec_with_capacity`]).
//!
//! **Truncation under a map.** A mapped page past a file's new end raises
//! SIGBUS when touched. The map is therefore registered with a SIGBUS handler
//! for its lifetime: a fault inside a registered map replaces that page with a
//! page of zeros (so the replay goes on, seeing NUL bytes, which are invalid
//! JSON) and marks the map as faulted; any other SIGBUS goes to the handler
//! that was there before (Rust's own, or the default). [`LogBytes::verify`]
//! then reports [`Error::Changed`] when the map faulted or the file is now
//! shorter than the map, so a caller never presents a result read from a file
//! that changed under it. (A same-length rewrite in place cannot be noticed by
//! any reader without locking; append-only logs never do that.) The live
//! state reads appended bytes with `read()`, which never faults.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::Error;

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
    Mapped(Guarded),
}

/// A map registered with the SIGBUS guard for as long as it lives.
struct Guarded {
    map: memmap2::Mmap,
    /// The file's modification time when mapped.
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    slot: Option<guard::Slot>,
}

impl Guarded {
    fn new(map: memmap2::Mmap, modified: Option<std::time::SystemTime>) -> Guarded {
        #[cfg(unix)]
        {
            let slot = guard::register(map.as_ptr() as usize, map.len());
            Guarded {
                map,
                modified,
                slot,
            }
        }
        #[cfg(not(unix))]
        Guarded { map, modified }
    }

    fn faulted(&self) -> bool {
        #[cfg(unix)]
        {
            self.slot.is_some_and(guard::faulted)
        }
        #[cfg(not(unix))]
        false
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(slot) = self.slot.take() {
            guard::unregister(slot);
        }
    }
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
            match Self::map(&file) {
                Ok(m) => Bytes::Mapped(Guarded::new(m, meta.modified().ok())),
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

    fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
        // SAFETY: the map is read-only and private to this value. What can go
        // wrong is outside the process: if another process truncates the file
        // while it is mapped, touching the pages past the new end raises
        // SIGBUS, which the guard below turns into zero pages and a
        // `Changed` error from `verify`; if it rewrites bytes in place the
        // slice changes under us. Working-memory logs are append-only by
        // contract (appends never disturb mapped bytes: the map covers only
        // the length at open time). The engine only reads the bytes, as
        // plain bytes with no invariants, so a change cannot break memory
        // safety, only the meaning of the result.
        let map = unsafe { memmap2::Mmap::map(file)? };
        #[cfg(unix)]
        {
            // Replay reads the log front to back; tell the kernel to read ahead.
            let _ = map.advise(memmap2::Advice::Sequential);
        }
        #[cfg(target_os = "linux")]
        {
            // Where the kernel reads the file in for this map (a log not in
            // the page cache), it then reads 2 MiB folios instead of small
            // ones, on file systems that have large folios. They stay
            // cached: every later replay maps them a folio per fault and
            // unmaps them a folio at a time, about 20 times less kernel
            // time than 4 KiB pages (BENCHMARKS.md, session 9). Pages
            // already cached are not changed.
            let _ = map.advise(memmap2::Advice::HugePage);
        }
        Ok(map)
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
        let Bytes::Mapped(m) = &self.bytes else {
            return;
        };
        #[cfg(target_os = "linux")]
        {
            use rayon::prelude::*;
            let len = m.map.len();
            let parts = rayon::current_num_threads().max(1);
            let part = len.div_ceil(parts).next_multiple_of(HUGE_PAGE);
            (0..len.div_ceil(part)).into_par_iter().for_each(|k| {
                let at = k * part;
                // SAFETY: the map is a private, read-only map of a file that
                // this process never writes to, so `MADV_DONTNEED` discards
                // nothing: it only drops page-table entries, and a later read
                // of the range faults the file's pages in again (for private
                // mappings of files, Linux repopulates from the file). No
                // reference into the map is invalidated: the bytes stay
                // mapped and readable.
                let _ = unsafe {
                    m.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        at,
                        part.min(len - at),
                    )
                };
            });
        }
        #[cfg(not(target_os = "linux"))]
        let _ = m;
    }
}

/// A transparent huge page on x86-64: 2 MiB.
const HUGE_PAGE: usize = 2 << 20;

/// A zeroed buffer of at least `len` bytes in fresh memory that the kernel
/// is asked to back with transparent huge pages (`MADV_HUGEPAGE`) before
/// anything touches it, so filling it costs one page fault per 2 MiB instead
/// of one per 4 KiB. For the render's batch buffer, allocated once and reused
/// (the parse's joined records and js arena use [`huge_vec_with_capacity`]).
/// It is a mapping of its own, a whole number of 2 MiB pages long, which
/// Linux places on a 2 MiB boundary, so all of it can be huge pages; a `Vec`
/// from the allocator has its header written before the hint, which leaves
/// its first 2 MiB in 4 KiB pages (about 500 faults). Only a hint: where THP
/// is off, or off Linux, this is plain zeroed memory.
pub(crate) fn huge_buffer(len: usize) -> std::io::Result<memmap2::MmapMut> {
    let map = memmap2::MmapMut::map_anon(len.max(1).next_multiple_of(HUGE_PAGE))?;
    #[cfg(target_os = "linux")]
    {
        // A failure (THP disabled, an old kernel) leaves the memory as it was.
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    Ok(map)
}

/// An empty `Vec` with room for `n` elements, with the same huge-page hint
/// as [`huge_buffer`] on its reserved memory: for a buffer filled by
/// appending, whose pages are touched (2 MiB at a time) only as it grows.
pub(crate) fn huge_vec_with_capacity<T>(n: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    advise_huge(
        v.as_mut_ptr().cast(),
        v.capacity() * std::mem::size_of::<T>(),
    );
    v
}

/// Advises `MADV_HUGEPAGE` for the whole pages of the `len` bytes at `start`,
/// an allocation the caller owns, when they span at least one huge page.
#[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
fn advise_huge(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let end = start as usize + len;
        // Whole pages inside the buffer only: the hint must not reach memory
        // the allocator gave to anything else.
        let from = (start as usize).next_multiple_of(PAGE);
        let to = end / PAGE * PAGE;
        if to >= from + HUGE_PAGE {
            // SAFETY: `[from, to)` is page-aligned and lies inside an
            // allocation the caller owns. MADV_HUGEPAGE changes only how the
            // kernel backs those pages (their contents and their mapping stay
            // the same); a failure (THP disabled, an old kernel) leaves the
            // memory as it was.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
            }
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

/// The SIGBUS guard for maps (see the module docs).
///
/// Every map is registered, however many exist at once: slots come in
/// blocks of [`SLOTS`](guard::SLOTS), chained into a list that only grows.
/// A block is allocated (outside the signal handler) when all slots are
/// taken and is never freed, so the handler can walk the list with plain
/// atomic loads: no lock, no allocation, nothing that is not
/// async-signal-safe.
#[cfg(unix)]
mod guard {
    use std::sync::Once;
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

    /// Slots per block.
    pub(super) const SLOTS: usize = 64;

    /// A block of slots: a map's `[start, end)` and whether it faulted.
    /// `start` is 0 for a free slot and `usize::MAX` while being filled.
    struct Block {
        starts: [AtomicUsize; SLOTS],
        ends: [AtomicUsize; SLOTS],
        faulted: [AtomicBool; SLOTS],
        next: AtomicPtr<Block>,
    }

    impl Block {
        const fn new() -> Block {
            Block {
                starts: [const { AtomicUsize::new(0) }; SLOTS],
                ends: [const { AtomicUsize::new(0) }; SLOTS],
                faulted: [const { AtomicBool::new(false) }; SLOTS],
                next: AtomicPtr::new(std::ptr::null_mut()),
            }
        }

        /// The next block, if there is one.
        fn next(&self) -> Option<&'static Block> {
            let p = self.next.load(Ordering::Acquire);
            // SAFETY: `next` is either null or a pointer from
            // `Box::leak`, published with Release after the block was
            // fully built, and blocks are never freed.
            unsafe { p.as_ref() }
        }
    }

    /// The first block; the others hang off it.
    static FIRST: Block = Block::new();
    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    static INSTALL: Once = Once::new();
    /// The handler that was installed before ours, written once before ours
    /// is installed and only read afterwards.
    static mut PREVIOUS: Option<libc::sigaction> = None;

    /// A registered map's place in the guard.
    #[derive(Debug, Clone, Copy)]
    pub struct Slot {
        block: &'static Block,
        index: usize,
    }

    impl std::fmt::Debug for Block {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Block")
        }
    }

    /// Registers `[start, start + len)`; `None` only for an empty map.
    pub fn register(start: usize, len: usize) -> Option<Slot> {
        if len == 0 {
            return None;
        }
        install();
        let mut block: &'static Block = &FIRST;
        loop {
            for index in 0..SLOTS {
                if block.starts[index]
                    .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    block.faulted[index].store(false, Ordering::Relaxed);
                    block.ends[index].store(start + len, Ordering::Release);
                    block.starts[index].store(start, Ordering::Release);
                    return Some(Slot { block, index });
                }
            }
            block = match block.next() {
                Some(b) => b,
                None => {
                    // Every slot is taken: chain a new block (or take the one
                    // another thread chained first).
                    let fresh: &'static mut Block = Box::leak(Box::new(Block::new()));
                    match block.next.compare_exchange(
                        std::ptr::null_mut(),
                        fresh,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => fresh,
                        Err(theirs) => {
                            // SAFETY: `fresh` was never published; it came
                            // from `Box::leak` just above.
                            drop(unsafe { Box::from_raw(fresh as *mut Block) });
                            // SAFETY: as in `Block::next`.
                            unsafe { &*theirs }
                        }
                    }
                }
            };
        }
    }

    /// Blocks chained so far (for tests).
    #[cfg(test)]
    pub fn blocks() -> usize {
        let mut n = 1;
        let mut b = &FIRST;
        while let Some(next) = b.next() {
            n += 1;
            b = next;
        }
        n
    }

    pub fn faulted(slot: Slot) -> bool {
        slot.block.faulted[slot.index].load(Ordering::Acquire)
    }

    pub fn unregister(slot: Slot) {
        slot.block.ends[slot.index].store(0, Ordering::Release);
        slot.block.starts[slot.index].store(0, Ordering::Release);
    }

    /// The slot whose map holds `addr`, if any (signal-safe: loads only).
    fn find(addr: usize) -> Option<(&'static Block, usize)> {
        let mut block: &'static Block = &FIRST;
        loop {
            for i in 0..SLOTS {
                let start = block.starts[i].load(Ordering::Acquire);
                if start == 0 || start == usize::MAX {
                    continue;
                }
                if addr >= start && addr < block.ends[i].load(Ordering::Acquire) {
                    return Some((block, i));
                }
            }
            block = block.next()?;
        }
    }

    fn install() {
        INSTALL.call_once(|| {
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            // SAFETY: `sigaction` structs are plain data, zero is a valid
            // (empty) value for every field; the call reads `action` and
            // writes `old`, both valid for the call. `PREVIOUS` is written
            // here, inside `call_once`, before our handler can run, and only
            // read by the handler afterwards.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handler as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) == 0 {
                    PREVIOUS = Some(old);
                    libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
                }
            }
        });
    }

    extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
        let addr = unsafe { (*info).si_addr() } as usize;
        if let Some((block, i)) = find(addr) {
            let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
            // SAFETY: the page lies inside a live read-only map this
            // process owns (registered for the map's lifetime); replacing
            // it with a private zero page keeps the range mapped, and the
            // map's owner unmaps the whole range, this page included.
            let r = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    PAGE.load(Ordering::Relaxed),
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if r != libc::MAP_FAILED {
                block.faulted[i].store(true, Ordering::Release);
                return;
            }
        }
        // Not ours: hand it to the previous handler, or to the default
        // action (re-raised when the faulting instruction runs again).
        // SAFETY: PREVIOUS was written before this handler was installed.
        let previous = unsafe { *std::ptr::addr_of!(PREVIOUS) };
        match previous {
            Some(old) if old.sa_sigaction == libc::SIG_IGN => {}
            Some(old) if old.sa_sigaction != libc::SIG_DFL => {
                if old.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: an SA_SIGINFO handler has this signature.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(old.sa_sigaction) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: a plain handler has this signature.
                    let f: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(old.sa_sigaction) };
                    f(sig);
                }
            }
            _ => {
                // SAFETY: resetting to the default action is always valid.
                unsafe {
                    libc::signal(libc::SIGBUS, libc::SIG_DFL);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{huge_buffer, huge_vec_with_capacity};

    /// The guard had 64 slots: a 65th map was unguarded, and a truncation
    /// under it killed the process (the server died by SIGBUS with ~66
    /// concurrent prepares). Now 200 maps of one file, truncated, each
    /// touched past the new end: every one reads zeros and reports the
    /// change, and the process lives.
    #[cfg(unix)]
    #[test]
    fn more_maps_than_one_block_of_slots_are_all_guarded() {
        use super::{LogBytes, ReadMode};
        use crate::Error;
        let dir = std::env::temp_dir().join(format!("wmreplay-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        std::fs::write(&path, vec![b'x'; 3 * 4096]).unwrap();
        let maps: Vec<LogBytes> = (0..200)
            .map(|_| LogBytes::open(&path, ReadMode::Auto).unwrap())
            .collect();
        assert!(maps.iter().all(LogBytes::is_mapped));
        assert!(super::guard::blocks() >= 200 / super::guard::SLOTS);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        for m in &maps {
            // Past the new end: SIGBUS without the guard.
            let b = m.bytes();
            assert_eq!(b[b.len() - 1], 0);
            assert!(matches!(m.verify(), Err(Error::Changed { .. })));
        }
        drop(maps);
        // Slots are reused: many more maps than ever existed at once do not
        // grow the chain without bound.
        let before = super::guard::blocks();
        std::fs::write(&path, vec![b'y'; 4096]).unwrap();
        for _ in 0..1000 {
            let m = LogBytes::open(&path, ReadMode::Auto).unwrap();
            assert_eq!(m.bytes()[0], b'y');
        }
        assert_eq!(super::guard::blocks(), before);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn huge_buffers_are_zeroed_and_writable() {
        for n in [0usize, 1, 4095, 1 << 20, (5 << 20) + 3] {
            let mut v = huge_buffer(n).unwrap();
            assert!(v.len() >= n && v.len().is_multiple_of(2 << 20));
            assert!(v.iter().all(|&x| x == 0), "{n} bytes not all zero");
            for (i, x) in v.iter_mut().enumerate() {
                *x = i as u8;
            }
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u8));
        }
    }

    /// The hint reaches the kernel: the mapping that holds a big buffer
    /// (zeroed, or only reserved) is flagged `hg` (huge pages advised) in
    /// /proc/self/smaps.
    #[cfg(target_os = "linux")]
    #[test]
    fn big_buffers_are_advised_huge_pages() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return; // A kernel without THP: nothing to ask for.
        }
        let zeroed = huge_buffer(16 << 20).unwrap();
        // From its first byte: no part of it is left out of the hint.
        assert_huge_advised(zeroed.as_ptr() as usize);
        assert_huge_advised(zeroed.as_ptr() as usize + (8 << 20));
        let reserved: Vec<u64> = huge_vec_with_capacity(2 << 20);
        assert!(reserved.is_empty() && reserved.capacity() >= 2 << 20);
        assert_huge_advised(reserved.as_ptr() as usize + (8 << 20));
    }

    /// The value of `field` (such as `VmFlags` or `Rss`) of the mapping that
    /// holds address `probe`, from /proc/self/smaps.
    fn smaps_field(probe: usize, field: &str) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut value = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((a, b)) = range.split_once('-')
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&probe);
            } else if inside
                && let Some(v) = line.strip_prefix(field).and_then(|l| l.strip_prefix(':'))
            {
                value = Some(v.trim().to_string());
            }
        }
        value
    }

    /// Releasing a mapped log's pages empties its resident set, and its
    /// bytes read the same afterwards.
    #[cfg(target_os = "linux")]
    #[test]
    fn released_pages_leave_the_map_readable() {
        use super::{LogBytes, ReadMode};
        let dir = std::env::temp_dir().join(format!("wmreplay-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        let data: Vec<u8> = (0..(5 << 20) + 123).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let log = LogBytes::open(&path, ReadMode::Auto).unwrap();
        assert!(log.is_mapped());
        assert_eq!(log.bytes(), &data[..]);
        let probe = log.bytes().as_ptr() as usize;
        // The map asks for huge pages (2 MiB folios when the file is read in).
        if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            assert_huge_advised(probe);
        }
        let rss = || smaps_field(probe, "Rss").expect("the map in /proc/self/smaps");
        assert_ne!(rss(), "0 kB");
        log.release_pages();
        assert_eq!(rss(), "0 kB");
        assert_eq!(log.bytes(), &data[..]);
        drop(log);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn assert_huge_advised(probe: usize) {
        let flags =
            smaps_field(probe, "VmFlags").expect("the buffer's mapping in /proc/self/smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "hg"),
            "VmFlags:{flags}"
        );
    }
}
