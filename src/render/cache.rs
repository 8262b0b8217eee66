//! Prompt-cache breakpoints for an append-only replay.
//!
//! Anthropic caches a request's prefix only up to blocks marked with
//! `cache_control`, and finds an earlier entry only if it sits at one of
//! the request's breakpoints or within about 20 blocks before one
//! (<https://docs.claude.com/en/docs/build-with-claude/prompt-caching>):
//! at most 4 breakpoints, an identical prefix through the marked block, a
//! minimum length (1,024 to 4,096 tokens by model), a 5-minute lifetime
//! refreshed by each hit (or 1 hour), writes at 1.25× (2× for 1 hour) and
//! reads at 0.1× of the input price.
//!
//! A replay only grows at its end, so each turn's request starts with the
//! previous turn's replayed messages, byte for byte. [`place`] marks:
//! - **the last replayed message**, which the next turn finds within its
//!   lookback when fewer than ~20 messages were appended in between;
//! - **the previous request's last mark**, when more were (an agent's burst
//!   of events): an exact hit on the entry the previous turn wrote,
//!   however far back it is. [`CacheMemory`] remembers it, with the
//!   identity of its message, so a late record placed before it (which
//!   changes every prefix after it) or a moved window is noticed;
//! - **stable positions**: the last message of every full group of
//!   [`CachePolicy::stride`] messages, at most two, which recur across
//!   turns and so still hit after a restart, a failed request, or a turn
//!   whose memory is gone.
//!
//! The `CURRENT_USER_REQUEST` message is never marked: the next turn
//! replays it as a `WM_KIND=text_input` message instead, so an entry there
//! would never be read. Positions are message indices within the request
//! (after any window), so a window whose start stays put keeps its marks.

/// How long a breakpoint's entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheTtl {
    /// 5 minutes: `{"type":"ephemeral"}`.
    #[default]
    FiveMinutes,
    /// 1 hour: `{"type":"ephemeral","ttl":"1h"}`.
    OneHour,
}

impl std::str::FromStr for CacheTtl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "5m" => Ok(CacheTtl::FiveMinutes),
            "1h" => Ok(CacheTtl::OneHour),
            _ => Err(format!("unknown cache TTL {s:?} (expected 5m or 1h)")),
        }
    }
}

impl CacheTtl {
    /// The `cache_control` member written into a marked block (with its
    /// leading comma).
    pub fn member(self) -> &'static [u8] {
        match self {
            CacheTtl::FiveMinutes => br#","cache_control":{"type":"ephemeral"}"#,
            CacheTtl::OneHour => br#","cache_control":{"type":"ephemeral","ttl":"1h"}"#,
        }
    }
}

/// Where breakpoints go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CachePolicy {
    /// The lifetime of every entry written.
    pub ttl: CacheTtl,
    /// Messages per group for the stable positions.
    pub stride: usize,
    /// Blocks the provider looks back from a breakpoint.
    pub lookback: usize,
    /// Breakpoints allowed.
    pub max_breakpoints: usize,
}

impl Default for CachePolicy {
    fn default() -> Self {
        CachePolicy {
            ttl: CacheTtl::FiveMinutes,
            stride: 64,
            lookback: 20,
            max_breakpoints: 4,
        }
    }
}

/// What [`place`] remembers between requests: the last request's last mark
/// (its index in the request's messages, and the identity of the message
/// there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheMemory {
    last: Option<(usize, (u64, u64))>,
}

impl CacheMemory {
    /// Forgets the last mark (a window moved, the log was replaced).
    pub fn forget(&mut self) {
        self.last = None;
    }
}

/// The message indices to mark in a request replaying `n` messages, in
/// ascending order. `id_of(i)` is message `i`'s identity (its sort key and
/// file offset). Updates `memory` with this request's last mark.
pub fn place(
    n: usize,
    id_of: impl Fn(usize) -> (u64, u64),
    policy: &CachePolicy,
    memory: &mut CacheMemory,
) -> Vec<usize> {
    if n == 0 || policy.max_breakpoints == 0 {
        return Vec::new();
    }
    let last = n - 1;
    let mut marks = vec![last];
    // The previous request's last mark, if the messages through it are the
    // same and the lookback from here does not reach it anyway.
    if let Some((i, id)) = memory.last
        && policy.max_breakpoints >= 2
        && i < last
        && last - i > policy.lookback
        && id_of(i) == id
    {
        marks.push(i);
    }
    // Up to two stable positions below the newest mark: the last message
    // of each full group, newest first.
    let stride = policy.stride.max(1);
    let room = (policy.max_breakpoints - marks.len()).min(2);
    let mut g = (n / stride) * stride;
    let mut added = 0;
    while added < room && g >= stride {
        let pos = g - 1;
        if !marks.contains(&pos) {
            marks.push(pos);
            added += 1;
        }
        g -= stride;
    }
    marks.sort_unstable();
    marks.dedup();
    marks.truncate(policy.max_breakpoints);
    memory.last = Some((last, id_of(last)));
    marks
}

/// Bytes from a marked Anthropic message's end (its separator included) back
/// to where its `cache_control` member goes: before `}]}` and the `,`, so
/// the member lands after the text's closing quote, in its text block.
pub(crate) const MARKER_FROM_END: usize = 3 + 1;

/// Puts `member` into the rendered message that ends (separator included)
/// at `out[end]`, just before its closing `}]}`, so that it lands in the
/// message's text block: the message's last [`MARKER_FROM_END`] bytes move
/// after it, into room the caller left. Returns the message's new end.
pub(crate) fn mark_in_place(out: &mut [u8], end: usize, member: &[u8]) -> usize {
    let at = end - MARKER_FROM_END;
    out.copy_within(at..end, at + member.len());
    out[at..at + member.len()].copy_from_slice(member);
    end + member.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(i: usize) -> (u64, u64) {
        (i as u64, i as u64 * 100)
    }

    #[test]
    fn a_first_request_marks_its_last_message_and_stable_positions() {
        let mut m = CacheMemory::default();
        let p = CachePolicy::default();
        assert_eq!(place(10, id, &p, &mut m), vec![9]);
        let mut m = CacheMemory::default();
        assert_eq!(place(200, id, &p, &mut m), vec![127, 191, 199]);
    }

    #[test]
    fn a_burst_past_the_lookback_marks_the_last_request_again() {
        let p = CachePolicy::default();
        let mut m = CacheMemory::default();
        place(100, id, &p, &mut m);
        // 150 messages later: the old last mark (99) is marked again.
        let marks = place(250, id, &p, &mut m);
        assert!(marks.contains(&99) && marks.contains(&249), "{marks:?}");
        assert!(marks.len() <= 4);
        // A small step: the lookback from the last message finds it.
        let marks = place(260, id, &p, &mut m);
        assert!(!marks.contains(&249), "{marks:?}");
    }

    #[test]
    fn a_changed_prefix_is_not_marked_again() {
        let p = CachePolicy::default();
        let mut m = CacheMemory::default();
        place(100, id, &p, &mut m);
        // A late record moved message 99 to index 100.
        let shifted = |i: usize| if i < 50 { id(i) } else { id(i - 1) };
        let marks = place(250, shifted, &p, &mut m);
        assert!(!marks.contains(&99), "{marks:?}");
    }

    #[test]
    fn never_more_than_allowed_and_always_sorted() {
        for max in 0..6 {
            let p = CachePolicy {
                max_breakpoints: max,
                stride: 3,
                ..CachePolicy::default()
            };
            let mut m = CacheMemory::default();
            for n in [0, 1, 5, 50, 51, 400] {
                let marks = place(n, id, &p, &mut m);
                assert!(marks.len() <= max, "{max} {n} {marks:?}");
                assert!(marks.windows(2).all(|w| w[0] < w[1]));
                assert!(marks.iter().all(|&i| i < n));
            }
        }
    }

    #[test]
    fn markers_land_before_each_marked_messages_close() {
        let m =
            |t: &str| format!(r#"{{"role":"user","content":[{{"type":"text","text":"{t}"}}]}},"#);
        let member = CacheTtl::FiveMinutes.member();
        let msg = m("a");
        let mut out = msg.clone().into_bytes();
        out.resize(msg.len() + member.len(), b'?');
        assert_eq!(mark_in_place(&mut out, msg.len(), member), out.len());
        let want = msg.replace(r#""a"}"#, r#""a","cache_control":{"type":"ephemeral"}}"#);
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
