//! The memory map of a log, and the guard that keeps a truncation under it
//! from killing the process. All of the crate's `unsafe` for mapping files
//! is here.
//!
//! **Truncation under a map.** A mapped page past a file's new end raises
//! SIGBUS when touched. Each map is therefore registered with a SIGBUS
//! handler for its lifetime: a fault inside a registered map replaces that
//! page with a page of zeros (so the replay goes on, seeing NUL bytes, which
//! are invalid JSON) and marks the map as faulted; any other SIGBUS goes to
//! the handler that was there before (Rust's own, or the default).
//! [`LogBytes::verify`](super::LogBytes::verify) then reports
//! [`Error::Changed`](crate::Error::Changed) when the map faulted, so a
//! caller never presents a result read from a file that changed under it.

use std::fs::File;

/// A map registered with the SIGBUS guard for as long as it lives.
pub(super) struct Guarded {
    pub(super) map: memmap2::Mmap,
    /// When the file last changed, when mapped.
    pub(super) stamp: super::Stamp,
    #[cfg(unix)]
    slot: Option<guard::Slot>,
}

impl Guarded {
    pub(super) fn new(map: memmap2::Mmap, stamp: super::Stamp) -> Guarded {
        #[cfg(unix)]
        {
            let slot = guard::register(map.as_ptr() as usize, map.len());
            Guarded { map, stamp, slot }
        }
        #[cfg(not(unix))]
        Guarded { map, stamp }
    }

    pub(super) fn faulted(&self) -> bool {
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

/// A read-only map of a file the crate only reads but another may damage
/// (a search index's files), guarded like a log's: touching a page past a
/// truncation reads zeros and marks the map [`faulted`](Self::faulted)
/// instead of killing the process. The caller discards what it read from a
/// faulted map.
#[cfg(feature = "search")]
pub(crate) struct FileMap(Guarded);

#[cfg(feature = "search")]
impl FileMap {
    /// Maps `file` (which must not be empty: an empty map is not one).
    pub(crate) fn open(file: &File) -> std::io::Result<FileMap> {
        let meta = file.metadata()?;
        // SAFETY: as in `map`: read-only, private to this value, only ever
        // read as plain bytes; a truncation under it is caught by the
        // guard, a rewrite in place only changes what is read, which the
        // caller checks (the index verifies what it finds).
        let map = unsafe { map_len(file, meta.len())? };
        Ok(FileMap(Guarded::new(map, super::Stamp::of(&meta))))
    }

    /// Whether a page of the map was past the file's end when touched.
    pub(crate) fn faulted(&self) -> bool {
        self.0.faulted()
    }
}

/// A [`FileMap`] shared, readable as bytes: what a search index's reader
/// holds.
#[cfg(feature = "search")]
pub(crate) struct SharedFileMap(pub(crate) std::sync::Arc<FileMap>);

#[cfg(feature = "search")]
impl std::ops::Deref for SharedFileMap {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0.0.map
    }
}

// SAFETY: the bytes are the map's, which stays at one address for as long
// as the `Arc` it is in lives (a map is never moved or remapped; the guard
// only swaps a faulted page for a zero page in place). Moving the
// `SharedFileMap` moves the `Arc`, not the map.
#[cfg(feature = "search")]
unsafe impl stable_deref_trait::StableDeref for SharedFileMap {}

/// Maps the first `len` bytes of `file`.
///
/// The length is the one its caller's stamp was taken with (one `fstat`):
/// mapping the length at the time of the map instead (memmap2's own
/// `fstat`) would take in bytes an append wrote between the two, with the
/// stamp from before it, and the append would look like a rewrite.
///
/// # Safety
/// As [`map`]'s: the caller only reads the bytes, as plain bytes.
unsafe fn map_len(file: &File, len: u64) -> std::io::Result<memmap2::Mmap> {
    let len = usize::try_from(len)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::OutOfMemory, "too long to map"))?;
    // SAFETY: the caller's contract.
    unsafe { memmap2::MmapOptions::new().len(len).map(file) }
}

/// Maps the first `len` bytes of `file` (its length when its stamp was
/// taken) read-only, with the kernel told how it will be read.
pub(super) fn map(file: &File, len: u64) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this value. What can go
    // wrong is outside the process: if another process truncates the file
    // while it is mapped, touching the pages past the new end raises
    // SIGBUS, which the guard turns into zero pages and a
    // `Changed` error from `verify`; if it rewrites bytes in place the
    // slice changes under us. Working-memory logs are append-only by
    // contract (appends never disturb mapped bytes: the map covers only
    // the length at open time). The engine only reads the bytes, as
    // plain bytes with no invariants, so a change cannot break memory
    // safety, only the meaning of the result.
    let map = unsafe { map_len(file, len)? };
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

/// Drops the page-table entries of `map` in parallel (see
/// [`LogBytes::release_pages`](super::LogBytes::release_pages)).
pub(super) fn release(map: &memmap2::Mmap) {
    use rayon::prelude::*;
    let len = map.len();
    let parts = rayon::current_num_threads().max(1);
    let part = len
        .div_ceil(parts)
        .max(1)
        .next_multiple_of(crate::buffers::HUGE_PAGE);
    (0..len.div_ceil(part))
        .into_par_iter()
        .for_each(|k| release_range(map, k * part..(k * part + part).min(len)));
}

/// [`release`] for `range` of the map, on the calling thread, widened to
/// the huge page it starts in (a part the caller is done with while other
/// threads still read the rest; one of them reading the page shared with it
/// faults the bytes in again).
pub(super) fn release_range(map: &memmap2::Mmap, range: std::ops::Range<usize>) {
    #[cfg(target_os = "linux")]
    {
        let page = crate::buffers::HUGE_PAGE;
        let start = (range.start / page * page).min(map.len());
        // The map's last page, partial, goes too when the range reaches it.
        let end = if range.end >= map.len() {
            map.len()
        } else {
            range.end / page * page
        }
        .max(start);
        if start == end {
            return;
        }
        // SAFETY: the map is a shared, read-only map of a file that this
        // process never writes to, so `MADV_DONTNEED` discards nothing: it
        // only drops page-table entries, and a later read of the range
        // faults the file's pages in again from the page cache (or, for a
        // file truncated since, meets the SIGBUS guard like any read). No
        // reference into the map is invalidated: the bytes stay mapped and
        // readable.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (map, range);
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
    /// The guard's chain is the process's: its tests run one at a time, so
    /// one's maps do not grow the chain under another's count.
    #[cfg(unix)]
    static GUARD_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The guard had 64 slots: a 65th map was unguarded, and a truncation
    /// under it killed the process (the server died by SIGBUS with ~66
    /// concurrent prepares). Now 200 maps of one file, truncated, each
    /// touched past the new end: every one reads zeros and reports the
    /// change, and the process lives.
    #[cfg(unix)]
    #[test]
    fn more_maps_than_one_block_of_slots_are_all_guarded() {
        use super::super::{LogBytes, ReadMode};
        use crate::Error;
        let _one_at_a_time = GUARD_TESTS.lock().unwrap_or_else(|p| p.into_inner());
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

    /// The same with the maps registered from many threads at once (the
    /// server's concurrent prepares): threads racing to chain a new block
    /// all end in the one chain, and every map is guarded.
    #[cfg(unix)]
    #[test]
    fn maps_registered_from_many_threads_at_once_are_all_guarded() {
        use super::super::{LogBytes, ReadMode};
        use crate::Error;
        use std::sync::{Arc, Barrier};
        let _one_at_a_time = GUARD_TESTS.lock().unwrap_or_else(|p| p.into_inner());
        let dir = std::env::temp_dir().join(format!("wmreplay-guard-mt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        std::fs::write(&path, vec![b'x'; 3 * 4096]).unwrap();
        let (threads, each) = (8, 40);
        let start = Arc::new(Barrier::new(threads));
        let maps: Vec<LogBytes> = (0..threads)
            .map(|_| {
                let (start, path) = (Arc::clone(&start), path.clone());
                std::thread::spawn(move || {
                    start.wait();
                    (0..each)
                        .map(|_| LogBytes::open(&path, ReadMode::Auto).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(maps.len(), threads * each);
        assert!(maps.iter().all(LogBytes::is_mapped));
        assert!(super::guard::blocks() * super::guard::SLOTS >= threads * each);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(10)
            .unwrap();
        // Touched from other threads too: the handler runs on the thread
        // that faults.
        std::thread::scope(|s| {
            for part in maps.chunks(each) {
                s.spawn(move || {
                    for m in part {
                        let b = m.bytes();
                        assert_eq!(b[b.len() - 1], 0);
                        assert!(matches!(m.verify(), Err(Error::Changed { .. })));
                    }
                });
            }
        });
        drop(maps);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Releasing a mapped log's pages empties its resident set, and its
    /// bytes read the same afterwards.
    #[cfg(target_os = "linux")]
    #[test]
    fn released_pages_leave_the_map_readable() {
        use super::super::{LogBytes, ReadMode};
        use crate::buffers::tests::{assert_huge_advised, smaps_field};
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
}
