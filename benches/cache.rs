//! How much of each request a provider's prompt cache serves, by where the
//! cache breakpoints go: `cargo bench --bench cache` (options after `--`:
//! `--turns N`, `--seed N`, `--base-size SIZE`, `--min-tokens N`).
//!
//! A log made by the generator (`wmreplay gen`), then a session of turns:
//! each appends the user's `text_input`, the model's `text_output` and a
//! burst of 0 to 200 other records (heavy-tailed: most turns a few, some
//! hundreds), with pauses between turns (most under a minute, some over 5
//! minutes). Each turn's request replays the whole log (or a token window,
//! `--max-tokens 100000 --trim-to 0.8`), tokens counted with o200k_base, and
//! goes through the cache simulator (`bench/cache/sim.rs`) under each
//! placement strategy. Printed: the share of input tokens read from the
//! cache and the input cost relative to no caching.

#[path = "../bench/cache/sim.rs"]
#[allow(dead_code)]
mod sim;

use std::hash::{BuildHasher, Hasher};

use sim::{Block, Cache, Rules, Ttl, Usage};
use wmreplay::__internals::cache::{CacheMemory, CachePolicy, CacheTtl};
use wmreplay::__internals::corpus::{GenOptions, generate};
use wmreplay::{ReplayOptions, Selection, Tokenizer, WindowStart};

/// A replayed message: its identity, content hash and tokens.
#[derive(Clone, Copy)]
struct Message {
    id: (u64, u64),
    hash: u64,
    tokens: u64,
    /// A `text_input` (where a `--start-on text_input` window may start).
    input: bool,
}

/// A small deterministic RNG (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn words_in(&mut self, lo: u64, hi: u64) -> String {
        let n = self.range(lo, hi);
        self.words(n)
    }

    fn words(&mut self, n: u64) -> String {
        const W: &[&str] = &[
            "the",
            "model",
            "replay",
            "cache",
            "token",
            "agent",
            "vision",
            "desk",
            "coffee",
            "calendar",
            "meeting",
            "refactor",
            "tests",
            "window",
            "prefix",
            "answer",
            "remind",
            "tomorrow",
            "deploy",
            "latency",
            "ü",
            "café",
            "naïve",
            "日本",
            "\"quoted\"",
        ];
        (0..n)
            .map(|_| W[self.below(W.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Records in a burst: most turns a few, some hundreds.
fn burst(rng: &mut Rng) -> u64 {
    match rng.below(100) {
        0..50 => rng.range(0, 3),
        50..80 => rng.range(4, 20),
        80..95 => rng.range(21, 80),
        _ => rng.range(81, 200),
    }
}

/// Milliseconds between turns: most under a minute, some over 5 minutes.
fn pause(rng: &mut Rng) -> u64 {
    match rng.below(100) {
        0..80 => rng.range(5_000, 60_000),
        80..93 => rng.range(60_000, 300_000),
        _ => rng.range(300_001, 1_800_000),
    }
}

fn hash(role: bool, text: &str) -> u64 {
    let mut h =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
            .build_hasher();
    h.write_u8(role as u8);
    h.write(text.as_bytes());
    h.finish()
}

/// The replayed messages of `log[from..]`, appended to `out`.
fn absorb(log: &[u8], from: usize, out: &mut Vec<Message>) {
    let r = wmreplay::replay(&log[from..], &ReplayOptions::default());
    let data = r.data();
    let mut text = String::new();
    for rec in r.records() {
        text.clear();
        wmreplay::__internals::render::message_text(rec, data, &mut text);
        out.push(Message {
            id: (
                wmreplay::__internals::order::ts_key(rec.ts_ms()),
                rec.offset() + from as u64,
            ),
            hash: hash(rec.is_output(), &text),
            tokens: Tokenizer::O200k.count(&text),
            input: rec.kind_is(data, "text_input"),
        });
    }
}

/// One turn of the session: when, what the log holds then (messages in
/// replay order), and the current request's text.
struct Turn {
    at_ms: u64,
    messages: usize,
    request: Message,
}

struct Trace {
    messages: Vec<Message>,
    turns: Vec<Turn>,
    system: Message,
}

fn trace(turns: usize, seed: u64, base_size: u64) -> Trace {
    let mut log = Vec::new();
    generate(
        &GenOptions {
            size: base_size,
            seed,
            ..GenOptions::default()
        },
        &mut log,
        &|_| {},
    )
    .expect("generates into memory");
    let mut messages = Vec::new();
    absorb(&log, 0, &mut messages);
    let mut rng = Rng(seed ^ 0x5eed);
    let mut now = 0u64;
    // Timestamps after the generated log's.
    let mut ts = 1_800_000_000_000u64;
    let mut out = Vec::with_capacity(turns);
    let system = wmreplay::system_prompt(None);
    let system = Message {
        id: (0, 0),
        hash: hash(false, &system),
        tokens: Tokenizer::O200k.count(&system),
        input: false,
    };
    for t in 0..turns {
        let text = rng.words_in(5, 60);
        let current = wmreplay::current_user_request_text(&text, Some("s-1"));
        out.push(Turn {
            at_ms: now,
            messages: messages.len(),
            request: Message {
                id: (u64::MAX, t as u64),
                hash: hash(false, &current),
                tokens: Tokenizer::O200k.count(&current),
                input: false,
            },
        });
        // The turn happened: its input, the answer, then the burst of
        // other records that arrive before the next turn.
        let from = log.len();
        let mut line = |kind: &str, body: String, ts: &mut u64, rng: &mut Rng| {
            *ts += rng.range(1, 2_000);
            log.extend_from_slice(
                format!("{{\"type\":\"{kind}\",\"ts_ms\":{ts},\"session_id\":\"s-1\",{body}}}\n")
                    .as_bytes(),
            );
        };
        line(
            "text_input",
            format!("\"text\":{:?}", text),
            &mut ts,
            &mut rng,
        );
        let answer = rng.words_in(30, 400);
        line(
            "text_output",
            format!("\"text\":{answer:?}"),
            &mut ts,
            &mut rng,
        );
        for _ in 0..burst(&mut rng) {
            let body = match rng.below(3) {
                0 => format!(
                    "\"source\":\"vision\",\"event\":{{\"kind\":\"scene\",\"objects\":{:?},\"confidence\":0.{}}}",
                    rng.words_in(2, 12),
                    rng.below(100)
                ),
                1 => format!("\"insight\":{:?}", rng.words_in(5, 50)),
                _ => format!(
                    "\"tool\":\"search\",\"args\":{{\"q\":{:?}}},\"result\":{:?}",
                    rng.words(3),
                    rng.words_in(10, 120)
                ),
            };
            let kind = ["wm_event", "wm_insight", "tool_call"][rng.below(3) as usize];
            line(kind, body, &mut ts, &mut rng);
        }
        absorb(&log, from, &mut messages);
        now += pause(&mut rng);
    }
    Trace {
        messages,
        turns: out,
        system,
    }
}

/// Where one strategy puts breakpoints.
#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    None,
    /// Anthropic's automatic mode: the last block (the current request).
    Automatic,
    /// One marker on the last replayed message.
    LastRecord,
    /// wmreplay's placement.
    Wmreplay(CacheTtl),
    /// Not a strategy: every message marked, nothing ever expires, no limit
    /// on breakpoints or lookback. What no placement can beat: the writes
    /// of new messages and of every new window start.
    Bound,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::None => "no caching",
            Strategy::Automatic => "automatic (top-level cache_control)",
            Strategy::LastRecord => "one marker on the last replayed record",
            Strategy::Wmreplay(CacheTtl::FiveMinutes) => "wmreplay (--cache auto, 5m)",
            Strategy::Wmreplay(CacheTtl::OneHour) => "wmreplay (--cache auto --cache-ttl 1h)",
            Strategy::Bound => "(bound: every message marked, no expiry)",
        }
    }
}

/// Runs the session under `strategy`; `window`: the token window.
fn simulate(tr: &Trace, strategy: Strategy, window: Option<&Selection>, rules: &Rules) -> Usage {
    let mut cache = Cache::default();
    let mut memory = CacheMemory::default();
    let mut start: Option<WindowStart> = None;
    let mut total = Usage::default();
    let mut blocks: Vec<Block> = Vec::new();
    for turn in &tr.turns {
        let all = &tr.messages[..turn.messages];
        let range = match window {
            None => 0..all.len(),
            Some(sel) => {
                let (range, _, _) = wmreplay::__internals::select::window(
                    all.len(),
                    sel,
                    start,
                    |i| all[i].id,
                    |_| 0,
                    |i| all[i].tokens,
                    |i| all[i].input,
                );
                let new_start = all.get(range.start).map(|m| WindowStart {
                    key: m.id.0,
                    offset: m.id.1,
                });
                if new_start != start {
                    memory.forget();
                }
                start = new_start;
                range
            }
        };
        let msgs = &all[range];
        blocks.clear();
        let block = |m: &Message| Block {
            hash: m.hash,
            tokens: m.tokens,
            breakpoint: None,
        };
        blocks.push(block(&tr.system));
        blocks.extend(msgs.iter().map(block));
        blocks.push(block(&turn.request));
        let last_block = blocks.len() - 1;
        match strategy {
            Strategy::None => {}
            Strategy::Bound => {
                for b in &mut blocks[1..=msgs.len()] {
                    b.breakpoint = Some(Ttl::FiveMinutes);
                }
            }
            Strategy::Automatic => blocks[last_block].breakpoint = Some(Ttl::FiveMinutes),
            Strategy::LastRecord => {
                if !msgs.is_empty() {
                    blocks[msgs.len()].breakpoint = Some(Ttl::FiveMinutes);
                }
            }
            Strategy::Wmreplay(ttl) => {
                let policy = {
                    let mut o = CachePolicy::default();
                    o.ttl = ttl;
                    o
                };
                let sim_ttl = match ttl {
                    CacheTtl::FiveMinutes => Ttl::FiveMinutes,
                    CacheTtl::OneHour => Ttl::OneHour,
                };
                let marks = wmreplay::__internals::cache::place(
                    msgs.len(),
                    |i| msgs[i].id,
                    &policy,
                    &mut memory,
                );
                for &i in &marks {
                    // Message i is block i + 1 (the system block is first).
                    blocks[i + 1].breakpoint = Some(sim_ttl);
                }
                // A breakpoint left over goes on the system block, as the
                // server places it.
                if marks.len() < policy.max_breakpoints {
                    blocks[0].breakpoint = Some(sim_ttl);
                }
            }
        }
        let u = if strategy == Strategy::Bound {
            let unbounded = Rules {
                max_breakpoints: usize::MAX,
                lookback: usize::MAX,
                ..*rules
            };
            // Time stands still: nothing expires.
            cache.request(&blocks, 0, &unbounded)
        } else {
            cache.request(&blocks, turn.at_ms, rules)
        }
        .expect("never more than 4 breakpoints");
        total.add(&u);
    }
    total
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let turns: usize = arg(&args, "--turns").map_or(1000, |v| v.parse().expect("--turns N"));
    let seed: u64 = arg(&args, "--seed").map_or(1, |v| v.parse().expect("--seed N"));
    let base = arg(&args, "--base-size").map_or(400 << 10, |v| {
        wmreplay::__internals::corpus::parse_size(&v).expect("--base-size SIZE")
    });
    let rules = Rules {
        min_tokens: arg(&args, "--min-tokens").map_or(1024, |v| v.parse().expect("--min-tokens N")),
        ..Rules::default()
    };
    Tokenizer::O200k.warm_up();
    let t = std::time::Instant::now();
    let tr = trace(turns, seed, base);
    let base_tokens: u64 = tr.messages[..tr.turns[0].messages]
        .iter()
        .map(|m| m.tokens)
        .sum();
    let all_tokens: u64 = tr.messages.iter().map(|m| m.tokens).sum();
    eprintln!(
        "{turns} turns over a {base} B generated log ({base_tokens} tokens, {} records) growing to {} records ({all_tokens} tokens); trace built in {:.1} s",
        tr.turns[0].messages,
        tr.messages.len(),
        t.elapsed().as_secs_f64()
    );
    let windowed = {
        let mut o = Selection::default();
        o.max_tokens = Some(100_000);
        o.trim_to = Some(0.8);
        o
    };
    println!(
        "| trace | placement | input tokens | read from cache | written | cost vs no caching |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let on_turns = {
        let mut o = windowed.clone();
        o.start_on = Some("text_input".into());
        o
    };
    for (name, window) in [
        ("whole log", None),
        ("--max-tokens 100000 --trim-to 0.8", Some(&windowed)),
        (
            "--max-tokens 100000 --trim-to 0.8 --start-on text_input",
            Some(&on_turns),
        ),
    ] {
        for s in [
            Strategy::None,
            Strategy::Automatic,
            Strategy::LastRecord,
            Strategy::Wmreplay(CacheTtl::FiveMinutes),
            Strategy::Wmreplay(CacheTtl::OneHour),
            Strategy::Bound,
        ] {
            let u = simulate(&tr, s, window, &rules);
            let total = u.total() as f64;
            println!(
                "| {name} | {} | {} | {:.1}% | {:.1}% | {:.3}× |",
                s.name(),
                u.total(),
                100.0 * u.cache_read as f64 / total,
                100.0 * (u.cache_write_5m + u.cache_write_1h) as f64 / total,
                u.cost(&rules) / total
            );
        }
    }
}
