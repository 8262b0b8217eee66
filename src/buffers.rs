//! Big buffers the kernel backs with transparent huge pages: one page fault
//! per 2 MiB instead of one per 4 KiB, for the parse's joined records, the
//! js arena and the render's batch buffer.

/// A transparent huge page on x86-64: 2 MiB.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

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

/// [`huge_buffer`] for `len` bytes that are kept (a chunk's rendered
/// messages, held by the live state): huge pages where whole ones fit, and
/// the rest, to the next 4 KiB, in small pages, even where the kernel uses
/// huge pages unasked (THP `always`), so that the buffer holds no more than
/// a small page it does not use.
pub(crate) fn huge_buffer_exact(len: usize) -> std::io::Result<memmap2::MmapMut> {
    // Whole huge pages long, so that Linux places it on a 2 MiB boundary;
    // the part past `len` is never touched, so never backed.
    let map = memmap2::MmapMut::map_anon(len.max(1).next_multiple_of(HUGE_PAGE))?;
    #[cfg(target_os = "linux")]
    {
        // Hints: a failure (THP off, an old kernel) leaves the memory as it
        // was.
        let whole = len / HUGE_PAGE * HUGE_PAGE;
        if whole > 0 {
            let _ = map.advise_range(memmap2::Advice::HugePage, 0, whole);
        }
        if whole < map.len() {
            let _ = map.advise_range(memmap2::Advice::NoHugePage, whole, map.len() - whole);
        }
    }
    Ok(map)
}

/// An empty `Vec` with room for `n` elements, with the same huge-page hint
/// as [`huge_buffer`] on its reserved memory: for a buffer filled by
/// appending, whose pages are touched (2 MiB at a time) only as it grows.
///
/// `n` is an estimate from the input's size (a record per 256 bytes of the
/// log, the js arena a little larger than the log), not a need: where it
/// cannot be reserved (a sparse 40 GB file, an address-space limit) the
/// `Vec` starts empty and grows with what is actually appended, instead of
/// aborting the process.
pub(crate) fn huge_vec_with_capacity<T>(n: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::new();
    if v.try_reserve_exact(n).is_err() {
        return v;
    }
    advise_huge(
        v.as_mut_ptr().cast(),
        v.capacity() * std::mem::size_of::<T>(),
    );
    v
}

/// Room for `n` more elements in `v`, reserved fallibly: the usual
/// amortised growth, else exactly `n` more (what is left of an address
/// space may hold that, not double), else the [`AllocError`] of the size
/// it needed. For buffers that grow with the input (the parse's joined
/// records and js arena), whose growth failing must not abort the process.
///
/// [`AllocError`]: crate::AllocError
pub(crate) fn try_grow<T>(v: &mut Vec<T>, n: usize) -> Result<(), crate::AllocError> {
    if v.try_reserve(n).is_ok() || v.try_reserve_exact(n).is_ok() {
        return Ok(());
    }
    let bytes = v
        .len()
        .saturating_add(n)
        .saturating_mul(std::mem::size_of::<T>());
    Err(crate::AllocError {
        bytes: bytes as u64,
    })
}

/// Memory a buffer that grows with the input leaves for everything else
/// ([`try_grow_leaving`]): the parse workers' own buffers (a chunk of a few
/// MiB each, grown infallibly) and whatever the caller does next.
pub(crate) const SLACK: usize = 64 << 20;

/// [`try_grow`], then, when that made the buffer larger, the check that
/// `slack` more bytes could still be allocated (a probe, allocated and
/// freed at once, never touched). Under an address-space limit a buffer
/// grown to the last byte would leave the next small infallible allocation
/// of another thread to fail, which aborts the process; stopping `slack`
/// short turns that abort into this buffer's error, which the caller
/// reports.
pub(crate) fn try_grow_leaving<T>(
    v: &mut Vec<T>,
    n: usize,
    slack: usize,
) -> Result<(), crate::AllocError> {
    let before = v.capacity();
    try_grow(v, n)?;
    if v.capacity() != before {
        let mut probe: Vec<u8> = Vec::new();
        // black_box: an allocation nothing reads could be optimised away.
        if std::hint::black_box(probe.try_reserve_exact(slack)).is_err() {
            let held = v.capacity().saturating_mul(std::mem::size_of::<T>());
            return Err(crate::AllocError {
                bytes: held.saturating_add(slack) as u64,
            });
        }
        std::hint::black_box(&mut probe);
    }
    Ok(())
}

/// `n` zero bytes, or `None` when the allocator cannot give them: for a
/// buffer whose size comes from the input and that is written whole (the
/// live state's rendered messages). Like `vec![0; n]`, fresh memory from the
/// kernel is not written to zero it.
pub(crate) fn try_zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: the layout's size is not zero (checked above). A non-null
    // pointer is an allocation of the global allocator with exactly this
    // layout (size `n`, alignment 1, as `Vec<u8>` allocates), whose `n`
    // bytes are initialised (zeroed): a `Vec` of length and capacity `n`
    // owns it and frees it with the same layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
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

#[cfg(test)]
pub(crate) mod tests {
    use super::{huge_buffer, huge_vec_with_capacity, try_zeroed};

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

    /// The parse reserves its records and js arena from the log's length:
    /// for a sparse 40 GB log (or under an address-space limit) that
    /// reservation failed and aborted the process ("memory allocation of
    /// 45634027520 bytes failed", SIGABRT). An estimate that cannot be
    /// reserved is now no reservation: the buffer grows as it is filled.
    #[test]
    fn an_estimate_too_large_to_reserve_is_not_an_abort() {
        // More than any address space holds (but a valid layout).
        let mut v: Vec<u8> = huge_vec_with_capacity(1 << 62);
        assert!(v.is_empty());
        v.extend_from_slice(b"still usable");
        assert_eq!(v, b"still usable");
        let v: Vec<[u64; 4]> = huge_vec_with_capacity((1 << 62) / 32);
        assert!(v.is_empty());
    }

    #[test]
    fn growth_beyond_memory_is_an_error_and_leaves_the_buffer_usable() {
        let mut v: Vec<u64> = vec![1, 2, 3];
        assert_eq!(super::try_grow(&mut v, 5), Ok(()));
        assert!(v.capacity() >= 8);
        let e = super::try_grow(&mut v, 1 << 58).unwrap_err();
        assert_eq!(e.bytes, ((1u64 << 58) + 3) * 8);
        v.push(4);
        assert_eq!(v, [1, 2, 3, 4]);
    }

    #[test]
    fn growth_leaving_slack_fails_when_the_slack_cannot_be_had() {
        let mut v: Vec<u8> = Vec::new();
        assert_eq!(super::try_grow_leaving(&mut v, 100, 1 << 20), Ok(()));
        // No growth, no probe: the slack is not looked at.
        assert_eq!(super::try_grow_leaving(&mut v, 10, 1 << 62), Ok(()));
        let e = super::try_grow_leaving(&mut v, 1000, 1 << 62).unwrap_err();
        assert!(e.bytes >= (1 << 62) + 1000);
        v.push(1);
    }

    #[test]
    fn zeroed_buffers_are_fallible() {
        assert_eq!(try_zeroed(0), Some(Vec::new()));
        let v = try_zeroed(5 << 20).unwrap();
        assert!(v.len() == 5 << 20 && v.iter().all(|&b| b == 0));
        assert_eq!(try_zeroed(1 << 62), None);
    }

    /// The value of `field` (such as `VmFlags` or `Rss`) of the mapping that
    /// holds address `probe`, from /proc/self/smaps.
    /// A kept buffer: zeroed and writable for its length; huge pages asked
    /// for where whole ones fit, and refused (VmFlags `nh`) for the rest,
    /// so that a kernel using them unasked does not back the tail with one.
    #[test]
    fn exact_buffers_ask_for_huge_pages_only_where_whole_ones_fit() {
        for n in [1usize, 4095, (2 << 20) - 1, 2 << 20, (5 << 20) + 3] {
            let mut v = super::huge_buffer_exact(n).unwrap();
            assert!(v.len() >= n);
            assert!(v[..n].iter().all(|&x| x == 0), "{n} bytes not all zero");
            v[..n].fill(7);
            #[cfg(target_os = "linux")]
            {
                let base = v.as_ptr() as usize;
                let whole = n / super::HUGE_PAGE * super::HUGE_PAGE;
                if whole > 0 {
                    assert_huge_advised(base);
                }
                if whole < n {
                    let flags = smaps_field(base + whole, "VmFlags").unwrap();
                    assert!(
                        flags.split_whitespace().any(|f| f == "nh"),
                        "{n}: VmFlags:{flags}"
                    );
                }
            }
        }
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn smaps_field(probe: usize, field: &str) -> Option<String> {
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

    #[cfg(target_os = "linux")]
    pub(crate) fn assert_huge_advised(probe: usize) {
        let flags =
            smaps_field(probe, "VmFlags").expect("the buffer's mapping in /proc/self/smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "hg"),
            "VmFlags:{flags}"
        );
    }
}
