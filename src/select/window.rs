//! The window: which of the newest records fit `tail` and `max_tokens`,
//! kept cache-stable by `trim_to` and moved to a turn's start by
//! `start_on`. Works on indices and callbacks, so the one-shot replay and
//! the live state share it.

use std::ops::Range;

use super::{Selection, WindowStart};

/// The window over `n` items in replay order: `key_of(i)` is item i's
/// (`ts_key`, offset) and `tokens_of(i)` its message's tokens (called only
/// for items from the newest back, each at most once). `prev` is the start
/// remembered from the last turn (used with `trim_to`). Returns the range
/// kept, its tokens (with `max_tokens`) and whether the start jumped.
///
/// `least_tokens_of(i)` is a cheap lower bound of item i's tokens: an item
/// whose bound alone overflows what is left of the budget ends the window
/// without being counted, so a window's cost depends on its budget, not on
/// the size of the records it leaves out. `starts_turn(i)` says whether item
/// i is of the kind [`Selection::start_on`] names.
pub fn window(
    n: usize,
    sel: &Selection,
    prev: Option<WindowStart>,
    key_of: impl Fn(usize) -> (u64, u64),
    least_tokens_of: impl Fn(usize) -> u64,
    mut tokens_of: impl FnMut(usize) -> u64,
    starts_turn: impl Fn(usize) -> bool,
) -> (Range<usize>, Option<u64>, bool) {
    // The remembered start, if its record is still there (a log replaced
    // since has no such record: start afresh).
    let remembered = || {
        prev.and_then(|p| {
            let target = (p.key, p.offset);
            let s = partition(n, &key_of, target);
            (s < n && key_of(s) == target).then_some(s)
        })
    };
    // `start_on`: the first item of that kind at or after `start`, when the
    // window cuts the log at all.
    let turn_start = |start: usize| -> usize {
        if sel.start_on.is_none() || start == 0 {
            return start;
        }
        (start..n).find(|&i| starts_turn(i)).unwrap_or(start)
    };
    // `tail`, cache-stable with `trim_to`: the remembered start while the
    // window holds at most N items, else a jump to hold F × N.
    let (lo, tail_trimmed) = match (sel.tail, sel.trim_to) {
        (None, _) => (0, false),
        (Some(t), None) => (turn_start(n - t.min(n)), false),
        (Some(t), Some(share)) => match remembered() {
            Some(p) if n - p <= t => (p, false),
            Some(_) => {
                let keep = ((t as f64 * share).floor() as usize).clamp(1, t.max(1));
                (turn_start(n - keep.min(n)), true)
            }
            None => (turn_start(n - t.min(n)), false),
        },
    };
    let Some(budget) = sel.max_tokens else {
        return (lo..n, None, tail_trimmed);
    };
    // Tokens of items from the newest back, counted once each.
    let mut counted: Vec<u64> = Vec::new();
    let mut tokens = |i: usize, counted: &mut Vec<u64>| -> u64 {
        let back = n - 1 - i;
        while counted.len() <= back {
            let j = n - 1 - counted.len();
            counted.push(tokens_of(j));
        }
        counted[back]
    };
    // The newest items fitting `limit`, not before `from`.
    let mut fit = |limit: u64, from: usize, counted: &mut Vec<u64>| -> (usize, u64) {
        let mut start = n;
        let mut sum = 0u64;
        while start > from {
            let back = n - start;
            if back >= counted.len() && sum + least_tokens_of(start - 1) > limit {
                break;
            }
            let t = tokens(start - 1, counted);
            if sum + t > limit {
                break;
            }
            sum += t;
            start -= 1;
        }
        (start, sum)
    };
    // Moves a fitted window's start to a turn's start, less the tokens of
    // the items it leaves (all counted: they were inside).
    let on_turn = |(start, sum): (usize, u64), counted: &mut Vec<u64>| -> (usize, u64) {
        let moved = turn_start(start);
        let less: u64 = (start..moved).map(|i| counted[n - 1 - i]).sum();
        (moved, sum - less)
    };
    match sel.trim_to {
        None => {
            let fitted = fit(budget, lo, &mut counted);
            let (start, sum) = on_turn(fitted, &mut counted);
            (start..n, Some(sum), tail_trimmed)
        }
        Some(share) => {
            let from = remembered().map_or(lo, |s| s.max(lo));
            let (start, sum) = fit(budget, from, &mut counted);
            if start == from {
                return (from..n, Some(sum), tail_trimmed);
            }
            let limit = (budget as f64 * share).floor() as u64;
            let fitted = fit(limit, lo, &mut counted);
            let (start, sum) = on_turn(fitted, &mut counted);
            (start..n, Some(sum), true)
        }
    }
}

/// The lowest index any window of `sel` over these `n` items can read
/// (its start, a turn start it looks for, a remembered start it keeps),
/// whatever start is remembered: items before it are never replayed, nor
/// looked at, while items are only added after it. The item just before it
/// is asked for its tokens at most, to learn that it does not fit (a
/// caller that let it go answers with more than any budget). With
/// `max_tokens`, `tokens_of` is called from the newest item back.
pub(crate) fn floor(
    n: usize,
    sel: &Selection,
    least_tokens_of: impl Fn(usize) -> u64,
    mut tokens_of: impl FnMut(usize) -> u64,
) -> usize {
    let tail = sel.tail.map(|t| n.saturating_sub(t));
    let budget = sel.max_tokens.map(|limit| {
        let (mut start, mut sum) = (n, 0u64);
        while start > 0 {
            if sum.saturating_add(least_tokens_of(start - 1)) > limit {
                break;
            }
            let t = tokens_of(start - 1);
            if sum.saturating_add(t) > limit {
                break;
            }
            sum += t;
            start -= 1;
        }
        start
    });
    match (tail, budget) {
        // A turn start is looked for from the tail's start; without one,
        // the budget's fit stops at the tail's start or later.
        (Some(t), Some(b)) if sel.start_on.is_some() => t.min(b),
        (Some(t), Some(b)) => t.max(b),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => 0,
    }
}

/// The first index whose key is at least `target`.
fn partition(n: usize, key_of: &impl Fn(usize) -> (u64, u64), target: (u64, u64)) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if key_of(mid) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::tokens::Tokenizer;

    fn sel(tail: Option<usize>, max: Option<u64>, trim: Option<f64>) -> Selection {
        Selection {
            tail,
            max_tokens: max,
            trim_to: trim,
            tokenizer: Tokenizer::Bytes,
            ..Selection::default()
        }
    }

    /// Items with the given token counts; keys are their indices.
    fn win(
        tokens: &[u64],
        s: &Selection,
        prev: Option<WindowStart>,
    ) -> (Range<usize>, Option<u64>, bool) {
        win_turns(tokens, &[], s, prev)
    }

    #[test]
    fn tail_keeps_the_last_n() {
        let t = [1; 10];
        assert_eq!(win(&t, &sel(Some(3), None, None), None).0, 7..10);
        assert_eq!(win(&t, &sel(Some(0), None, None), None).0, 10..10);
        assert_eq!(win(&t, &sel(Some(99), None, None), None).0, 0..10);
    }

    #[test]
    fn max_tokens_keeps_the_newest_that_fit() {
        let t = [5, 5, 5, 5];
        assert_eq!(
            win(&t, &sel(None, Some(12), None), None),
            (2..4, Some(10), false)
        );
        // A budget smaller than the newest message keeps nothing.
        assert_eq!(
            win(&t, &sel(None, Some(4), None), None),
            (4..4, Some(0), false)
        );
        // Contiguous: an old small message does not sneak in past a big one.
        let t = [1, 100, 5];
        assert_eq!(win(&t, &sel(None, Some(50), None), None).0, 2..3);
    }

    #[test]
    fn only_the_tail_is_tokenized() {
        let mut calls = 0;
        let n = 1_000_000;
        let (r, _, _) = window(
            n,
            &sel(None, Some(100), None),
            None,
            |i| (i as u64, i as u64),
            |_| 0,
            |_| {
                calls += 1;
                10
            },
            |_| false,
        );
        assert_eq!(r, n - 10..n);
        assert_eq!(calls, 11);
    }

    /// A 40 MB newest record under a 100-token budget took 42 s and 2 GB
    /// to count: now a record whose lower bound overflows the budget ends
    /// the window uncounted, with the same answer.
    #[test]
    fn a_record_whose_bound_overflows_the_budget_is_not_counted() {
        let mut calls = 0;
        let t = [10u64, 10, 1_000_000, 10, 10];
        for budget in [25, 100, 2_000_000] {
            let exact = win(&t, &sel(None, Some(budget), None), None);
            let bounded = window(
                t.len(),
                &sel(None, Some(budget), None),
                None,
                |i| (i as u64, i as u64),
                |i| t[i] / 2,
                |i| {
                    calls += 1;
                    t[i]
                },
                |_| false,
            );
            assert_eq!(bounded, exact, "budget {budget}");
        }
        // Budget 25: counts 10, 10, then the big one is refused by its
        // bound; budget 100: the same; 2,000,000: counted, all five.
        assert_eq!(calls, 2 + 2 + 5);
    }

    #[test]
    fn trimming_keeps_its_start_until_overflow() {
        let s = sel(None, Some(100), Some(0.5));
        let mut tokens = vec![10u64; 8]; // 80: fits
        let (r, _, trimmed) = win(&tokens, &s, None);
        assert_eq!((r.clone(), trimmed), (0..8, false));
        let mut prev = Some(WindowStart { key: 0, offset: 0 });
        // Appends up to the budget keep the start.
        tokens.extend([10, 10]); // 100
        let (r, _, trimmed) = win(&tokens, &s, prev);
        assert_eq!((r, trimmed), (0..10, false));
        // One more overflows: the window shrinks to 50 tokens.
        tokens.push(10);
        let (r, t, trimmed) = win(&tokens, &s, prev);
        assert_eq!((r.clone(), t, trimmed), (6..11, Some(50), true));
        prev = Some(WindowStart {
            key: r.start as u64,
            offset: r.start as u64,
        });
        // And stays there while later appends fit.
        for k in 0..5 {
            tokens.push(10);
            let (r, _, trimmed) = win(&tokens, &s, prev);
            assert_eq!((r.start, trimmed), (6, false), "append {k}");
        }
    }

    /// Items with token counts; `turns` marks the items that start a turn.
    fn win_turns(
        tokens: &[u64],
        turns: &[usize],
        s: &Selection,
        prev: Option<WindowStart>,
    ) -> (Range<usize>, Option<u64>, bool) {
        window(
            tokens.len(),
            s,
            prev,
            |i| (i as u64, i as u64),
            |_| 0,
            |i| tokens[i],
            |i| turns.contains(&i),
        )
    }

    fn at(i: usize) -> Option<WindowStart> {
        Some(WindowStart {
            key: i as u64,
            offset: i as u64,
        })
    }

    #[test]
    fn start_on_moves_a_cutting_window_to_the_next_turn() {
        let t = [10u64; 10];
        let mut s = sel(Some(6), None, None);
        s.start_on = Some("text_input".into());
        // The last 6 start at 4, an answer; the next question is at 6.
        assert_eq!(win_turns(&t, &[0, 3, 6, 8], &s, None).0, 6..10);
        // A window that keeps the whole log is not cut: it stays.
        s.tail = Some(10);
        assert_eq!(win_turns(&t, &[3, 6], &s, None).0, 0..10);
        // No question inside: the window stays as it is.
        s.tail = Some(3);
        assert_eq!(win_turns(&t, &[0, 3], &s, None).0, 7..10);
        // Token windows: the moved start's tokens are taken off the sum.
        let mut s = sel(None, Some(55), None);
        s.start_on = Some("text_input".into());
        assert_eq!(win_turns(&t, &[0, 7], &s, None), (7..10, Some(30), false));
    }

    #[test]
    fn a_tail_window_with_trim_to_keeps_its_start_until_it_overflows() {
        let s = sel(Some(10), None, Some(0.5));
        let t = [1u64; 30];
        // First turn: the last 10.
        assert_eq!(win(&t[..20], &s, None), (10..20, None, false));
        // The remembered start holds while the window has at most 10.
        assert_eq!(win(&t[..20], &s, at(10)), (10..20, None, false));
        // 25 items, 15 from the start: over 10, so it jumps to hold 5.
        assert_eq!(win(&t[..25], &s, at(10)), (20..25, None, true));
        // And stays there while the window holds at most 10.
        assert_eq!(win(&t[..30], &s, at(20)), (20..30, None, false));
        // A start that no longer exists: the plain tail.
        assert_eq!(win(&t[..30], &s, at(99)).0, 20..30);
        // With start_on, the jump lands on a turn's start.
        let mut s = s.clone();
        s.start_on = Some("text_input".into());
        assert_eq!(win_turns(&t[..25], &[18, 22], &s, at(10)).0, 22..25);
    }
}
