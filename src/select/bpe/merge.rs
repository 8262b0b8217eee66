//! Byte-pair merging of one pre-tokenized piece, counted: the piece starts
//! as single bytes and the adjacent pair whose concatenation has the lowest
//! rank is merged, leftmost first on a tie, until no pair is a token.
//!
//! This is tiktoken's merge, in its two forms and with its threshold (a
//! scan of a vector below 100 bytes, a heap with lazy invalidation from
//! 100 on), so a count is the length of what tiktoken-rs's `encode_ordinary`
//! returns for the piece. `tests/tokens_oracle.rs` holds it to that.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Pieces at least this long are merged with a heap (tiktoken's threshold).
const HEAP_FROM: usize = 100;

/// "No token": ranks are below it.
const NONE: u32 = u32::MAX;

/// Tokens in `piece` (2 bytes or more, not itself a token), where `rank`
/// gives the rank of a byte string that is a token.
pub(super) fn count(piece: &[u8], rank: impl Fn(&[u8]) -> Option<u32>) -> usize {
    let rank = |bytes: &[u8]| rank(bytes).unwrap_or(NONE);
    if piece.len() < HEAP_FROM {
        count_by_scan(piece, rank)
    } else {
        count_by_heap(piece, rank)
    }
}

/// O(n × merges): `parts[i]` is (where part i starts, the rank of part i
/// merged with part i + 1); the lowest rank is found by a scan.
fn count_by_scan(piece: &[u8], rank: impl Fn(&[u8]) -> u32) -> usize {
    let mut parts: Vec<(usize, u32)> = Vec::with_capacity(piece.len() + 1);
    let mut min = (NONE, usize::MAX);
    for i in 0..piece.len() - 1 {
        let r = rank(&piece[i..i + 2]);
        if r < min.0 {
            min = (r, i);
        }
        parts.push((i, r));
    }
    parts.push((piece.len() - 1, NONE));
    parts.push((piece.len(), NONE));
    // The rank of part i merged with the part after it, read before the
    // part between them is removed (hence i + 3).
    let pair = |parts: &[(usize, u32)], i: usize| {
        if i + 3 < parts.len() {
            rank(&piece[parts[i].0..parts[i + 3].0])
        } else {
            NONE
        }
    };
    while min.0 != NONE {
        let i = min.1;
        if i > 0 {
            parts[i - 1].1 = pair(&parts, i - 1);
        }
        parts[i].1 = pair(&parts, i);
        parts.remove(i + 1);
        min = (NONE, usize::MAX);
        for (i, &(_, r)) in parts[..parts.len() - 1].iter().enumerate() {
            if r < min.0 {
                min = (r, i);
            }
        }
    }
    parts.len() - 1
}

/// A possible merge of the part starting at `start` with the next one.
#[derive(PartialEq, Eq)]
struct Merge {
    start: usize,
    rank: u32,
}

/// The heap pops the lowest rank first, then the leftmost start.
impl Ord for Merge {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.start.cmp(&self.start))
    }
}

impl PartialOrd for Merge {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One part of the piece, kept at the index of its first byte.
#[derive(Clone, Copy)]
struct Part {
    /// Where the previous part starts (`usize::MAX` for the first).
    prev: usize,
    /// Where this part ends, i.e. the next one starts.
    end: usize,
    /// Where the next part ends.
    next_end: usize,
    /// The rank of this part merged with the next, or [`NONE`]; a popped
    /// merge whose rank is no longer this one is stale.
    next_rank: u32,
}

/// O(n log n) for long pieces (runs of spaces, long words): merges come off
/// a heap, and those made stale by an earlier merge are skipped.
fn count_by_heap(piece: &[u8], rank: impl Fn(&[u8]) -> u32) -> usize {
    let n = piece.len();
    let mut parts: Vec<Part> = (0..n)
        .map(|i| Part {
            prev: i.wrapping_sub(1),
            end: i + 1,
            next_end: i + 2,
            next_rank: NONE,
        })
        .collect();
    let mut heap = BinaryHeap::with_capacity(n);
    for i in 0..n - 1 {
        let r = rank(&piece[i..i + 2]);
        if r != NONE {
            heap.push(Merge { start: i, rank: r });
            parts[i].next_rank = r;
        }
    }
    // The part at `start` now reaches up to `next_end`: record the merge
    // with its new neighbour, if that is a token.
    let offer =
        |parts: &mut Vec<Part>, heap: &mut BinaryHeap<Merge>, start: usize, next_end: usize| {
            parts[start].next_end = next_end;
            parts[start].next_rank = NONE;
            if next_end <= n {
                let r = rank(&piece[start..next_end]);
                if r != NONE {
                    heap.push(Merge { start, rank: r });
                    parts[start].next_rank = r;
                }
            }
        };
    let mut tokens = n;
    while let Some(left) = heap.pop() {
        if left.rank != parts[left.start].next_rank {
            continue;
        }
        let left_start = left.start;
        let right_start = parts[left_start].end;
        let right_end = parts[left_start].next_end;
        let right_next_end = parts[right_start].next_end;
        parts[left_start].end = right_end;
        offer(&mut parts, &mut heap, left_start, right_next_end);
        if right_end < n {
            parts[right_end].prev = left_start;
        }
        if left_start > 0 {
            let prev_start = parts[left_start].prev;
            offer(&mut parts, &mut heap, prev_start, right_end);
        }
        parts[right_start].next_rank = NONE;
        tokens -= 1;
    }
    tokens
}
