//! A simulator of Anthropic's prompt cache, as its documentation describes
//! it, for measuring where cache breakpoints should go.
//!
//! A request is a sequence of content blocks (tools, then the system
//! blocks, then each message's blocks); some carry a `cache_control`
//! breakpoint. The rules simulated:
//! - **At most 4 breakpoints** per request (more is an error).
//! - **A hit needs the identical prefix** through a block: the cache is
//!   keyed by the whole prefix, not by a block's own content.
//! - **Lookback**: for each breakpoint, the blocks from the breakpoint back
//!   to [`Rules::lookback`] blocks before it are checked for an entry, and
//!   the longest prefix found is read. Entries exist only where an earlier
//!   request put a breakpoint.
//! - **Minimum length**: a prefix shorter than [`Rules::min_tokens`] is not
//!   cached (its breakpoint writes nothing).
//! - **Lifetime**: an entry lives 5 minutes (or 1 hour, for a `1h`
//!   breakpoint) and each hit refreshes it.
//! - **Prices**, relative to base input tokens: writes 1.25× (2× for 1 h),
//!   reads 0.1×; tokens after the last breakpoint are plain input.
//!
//! Tokens up to the longest hit are read; tokens from there to the last
//! cacheable breakpoint are written (each span priced by the TTL of the
//! breakpoint that ends it); the rest is input. Every breakpoint's prefix
//! is then in the cache, with its TTL from now.

use std::collections::HashMap;

/// How long a breakpoint's entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// 5 minutes (the default `{"type":"ephemeral"}`).
    FiveMinutes,
    /// 1 hour (`"ttl":"1h"`).
    OneHour,
}

impl Ttl {
    /// Milliseconds.
    pub fn ms(self) -> u64 {
        match self {
            Ttl::FiveMinutes => 5 * 60_000,
            Ttl::OneHour => 60 * 60_000,
        }
    }
}

/// One content block of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// A hash of the block's own bytes.
    pub hash: u64,
    /// Its tokens.
    pub tokens: u64,
    /// Its breakpoint, if it has one.
    pub breakpoint: Option<Ttl>,
}

/// The provider's rules and prices.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Blocks checked before each breakpoint (the docs: about 20).
    pub lookback: usize,
    /// Breakpoints allowed in one request.
    pub max_breakpoints: usize,
    /// The shortest cacheable prefix, in tokens (1,024 to 4,096 by model).
    pub min_tokens: u64,
    /// Price of a 5-minute cache write, per token, relative to input.
    pub write_5m: f64,
    /// Price of a 1-hour cache write.
    pub write_1h: f64,
    /// Price of a cache read.
    pub read: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            lookback: 20,
            max_breakpoints: 4,
            min_tokens: 1024,
            write_5m: 1.25,
            write_1h: 2.0,
            read: 0.1,
        }
    }
}

/// What one request cost, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input tokens at the base price (after the last breakpoint, or in a
    /// prefix too short to cache).
    pub input: u64,
    /// Tokens read from the cache.
    pub cache_read: u64,
    /// Tokens written with a 5-minute lifetime.
    pub cache_write_5m: u64,
    /// Tokens written with a 1-hour lifetime.
    pub cache_write_1h: u64,
}

impl Usage {
    /// All input tokens of the request.
    pub fn total(&self) -> u64 {
        self.input + self.cache_read + self.cache_write_5m + self.cache_write_1h
    }

    /// The request's input cost, in base-token units.
    pub fn cost(&self, r: &Rules) -> f64 {
        self.input as f64
            + self.cache_read as f64 * r.read
            + self.cache_write_5m as f64 * r.write_5m
            + self.cache_write_1h as f64 * r.write_1h
    }

    /// Adds another request's usage.
    pub fn add(&mut self, o: &Usage) {
        self.input += o.input;
        self.cache_read += o.cache_read;
        self.cache_write_5m += o.cache_write_5m;
        self.cache_write_1h += o.cache_write_1h;
    }
}

/// A request the provider would refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// More breakpoints than allowed.
    TooManyBreakpoints(usize),
}

/// The cache of one organisation (one API key).
#[derive(Debug, Default)]
pub struct Cache {
    /// Prefix hash → (expiry time, tokens of the prefix).
    entries: HashMap<u64, (u64, u64)>,
}

/// The hash of a prefix extended by one block.
pub fn extend(prefix: u64, block: u64) -> u64 {
    // SplitMix64 of the pair: good enough to tell prefixes apart.
    let mut z = prefix ^ block.rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Cache {
    /// Entries alive at `now_ms`.
    pub fn live_entries(&self, now_ms: u64) -> usize {
        self.entries
            .values()
            .filter(|(exp, _)| *exp > now_ms)
            .count()
    }

    /// Sends `blocks` at `now_ms`: what it costs, and the cache after it.
    pub fn request(&mut self, blocks: &[Block], now_ms: u64, r: &Rules) -> Result<Usage, Refused> {
        let marks: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].breakpoint.is_some())
            .collect();
        if marks.len() > r.max_breakpoints {
            return Err(Refused::TooManyBreakpoints(marks.len()));
        }
        self.entries.retain(|_, (exp, _)| *exp > now_ms);
        let mut prefix = Vec::with_capacity(blocks.len());
        let mut tokens = Vec::with_capacity(blocks.len());
        let (mut h, mut t) = (0u64, 0u64);
        for b in blocks {
            h = extend(h, b.hash);
            t += b.tokens;
            prefix.push(h);
            tokens.push(t);
        }
        let total = t;
        // The longest prefix found from any breakpoint's lookback.
        let mut hit: Option<usize> = None;
        for &p in &marks {
            let lo = p.saturating_sub(r.lookback);
            if let Some(j) = (lo..=p)
                .rev()
                .find(|&j| self.entries.contains_key(&prefix[j]))
            {
                hit = Some(hit.map_or(j, |h: usize| h.max(j)));
            }
        }
        let read = hit.map_or(0, |j| tokens[j]);
        if let Some(j) = hit {
            // A hit refreshes the entry's lifetime.
            let ttl = self.entries[&prefix[j]].0.saturating_sub(now_ms);
            let ttl = if ttl > Ttl::FiveMinutes.ms() {
                Ttl::OneHour
            } else {
                Ttl::FiveMinutes
            };
            self.entries
                .insert(prefix[j], (now_ms + ttl.ms(), tokens[j]));
        }
        // Writes: from the hit to each cacheable breakpoint beyond it.
        let mut usage = Usage {
            cache_read: read,
            ..Usage::default()
        };
        let mut covered = read;
        for &p in &marks {
            if tokens[p] < r.min_tokens {
                continue;
            }
            let ttl = blocks[p].breakpoint.expect("a mark");
            if tokens[p] > covered {
                let span = tokens[p] - covered;
                match ttl {
                    Ttl::FiveMinutes => usage.cache_write_5m += span,
                    Ttl::OneHour => usage.cache_write_1h += span,
                }
                covered = tokens[p];
            }
            let keep = self
                .entries
                .get(&prefix[p])
                .map_or(0, |(exp, _)| *exp)
                .max(now_ms + ttl.ms());
            self.entries.insert(prefix[p], (keep, tokens[p]));
        }
        usage.input = total - covered;
        Ok(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of 100 tokens each, with breakpoints at `marks`.
    fn blocks(n: usize, marks: &[usize]) -> Vec<Block> {
        (0..n)
            .map(|i| Block {
                hash: i as u64 + 1,
                tokens: 100,
                breakpoint: marks.contains(&i).then_some(Ttl::FiveMinutes),
            })
            .collect()
    }

    fn rules() -> Rules {
        Rules::default()
    }

    #[test]
    fn a_second_identical_request_reads_what_the_first_wrote() {
        let mut c = Cache::default();
        let b = blocks(30, &[19]);
        // 20 blocks of 100 = 2,000 tokens written, 1,000 after it input.
        let u = c.request(&b, 0, &rules()).unwrap();
        assert_eq!(
            u,
            Usage {
                input: 1000,
                cache_read: 0,
                cache_write_5m: 2000,
                cache_write_1h: 0
            }
        );
        let u = c.request(&b, 1000, &rules()).unwrap();
        assert_eq!((u.cache_read, u.cache_write_5m, u.input), (2000, 0, 1000));
        // Cost: 2,000 × 0.1 + 1,000.
        assert!((u.cost(&rules()) - 1200.0).abs() < 1e-9);
    }

    #[test]
    fn a_hit_through_the_lookback() {
        let mut c = Cache::default();
        c.request(&blocks(30, &[19]), 0, &rules()).unwrap();
        // The same prefix, grown by 15 blocks; the breakpoint moved to 34:
        // the entry at 19 is 15 blocks back, within the 20 looked at.
        let u = c.request(&blocks(45, &[34]), 1000, &rules()).unwrap();
        assert_eq!(u.cache_read, 2000);
        assert_eq!(u.cache_write_5m, 1500);
        assert_eq!(u.input, 1000);
        // Exactly 20 back still hits.
        let mut c = Cache::default();
        c.request(&blocks(30, &[19]), 0, &rules()).unwrap();
        let u = c.request(&blocks(45, &[39]), 1000, &rules()).unwrap();
        assert_eq!(u.cache_read, 2000);
    }

    #[test]
    fn a_miss_past_twenty_blocks() {
        let mut c = Cache::default();
        c.request(&blocks(30, &[19]), 0, &rules()).unwrap();
        // 21 blocks back: not found; everything through 40 is written.
        let u = c.request(&blocks(45, &[40]), 1000, &rules()).unwrap();
        assert_eq!(u.cache_read, 0);
        assert_eq!(u.cache_write_5m, 4100);
        assert_eq!(u.input, 400);
        // A second breakpoint at the old place bridges any distance.
        let mut c = Cache::default();
        c.request(&blocks(30, &[19]), 0, &rules()).unwrap();
        let u = c.request(&blocks(200, &[19, 190]), 1000, &rules()).unwrap();
        assert_eq!((u.cache_read, u.cache_write_5m), (2000, 17100));
    }

    #[test]
    fn a_changed_block_breaks_every_prefix_after_it() {
        let mut c = Cache::default();
        c.request(&blocks(30, &[19]), 0, &rules()).unwrap();
        let mut b = blocks(30, &[19]);
        b[5].hash = 999;
        let u = c.request(&b, 1000, &rules()).unwrap();
        assert_eq!(u.cache_read, 0);
        assert_eq!(u.cache_write_5m, 2000);
    }

    #[test]
    fn entries_expire_after_five_minutes_unless_read() {
        let mut c = Cache::default();
        let b = blocks(30, &[19]);
        c.request(&b, 0, &rules()).unwrap();
        // Read at 4 minutes: refreshed until 9 minutes.
        let u = c.request(&b, 240_000, &rules()).unwrap();
        assert_eq!(u.cache_read, 2000);
        let u = c.request(&b, 480_000, &rules()).unwrap();
        assert_eq!(u.cache_read, 2000, "refreshed by the read at 4 minutes");
        // Then 5 minutes and 1 ms of silence: gone.
        let u = c.request(&b, 480_000 + 300_001, &rules()).unwrap();
        assert_eq!((u.cache_read, u.cache_write_5m), (0, 2000));
    }

    #[test]
    fn one_hour_entries_outlive_five_minute_ones_and_cost_more() {
        let mut c = Cache::default();
        let mut b = blocks(30, &[10, 19]);
        b[10].breakpoint = Some(Ttl::OneHour);
        // 1,100 tokens written for an hour, the next 900 for 5 minutes.
        let u = c.request(&b, 0, &rules()).unwrap();
        assert_eq!((u.cache_write_1h, u.cache_write_5m), (1100, 900));
        assert!((u.cost(&rules()) - (1100.0 * 2.0 + 900.0 * 1.25 + 1000.0)).abs() < 1e-9);
        // 30 minutes later only the hour-long entry is left.
        let u = c.request(&b, 1_800_000, &rules()).unwrap();
        assert_eq!((u.cache_read, u.cache_write_5m), (1100, 900));
    }

    #[test]
    fn prefixes_below_the_minimum_are_not_cached() {
        let mut c = Cache::default();
        // Breakpoint at block 4: 500 tokens, below 1,024.
        let b = blocks(30, &[4]);
        let u = c.request(&b, 0, &rules()).unwrap();
        assert_eq!((u.cache_write_5m, u.input), (0, 3000));
        let u = c.request(&b, 1000, &rules()).unwrap();
        assert_eq!(u.cache_read, 0, "nothing was written to read");
        // Minimum by model: at 2,048, block 14 (1,500 tokens) is too short.
        let r = Rules {
            min_tokens: 2048,
            ..Rules::default()
        };
        let u = c.request(&blocks(30, &[14]), 2000, &r).unwrap();
        assert_eq!(u.cache_write_5m, 0);
    }

    #[test]
    fn five_breakpoints_are_refused() {
        let mut c = Cache::default();
        assert_eq!(
            c.request(&blocks(30, &[1, 2, 3, 4, 5]), 0, &rules()),
            Err(Refused::TooManyBreakpoints(5))
        );
    }
}
