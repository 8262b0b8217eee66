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
//!
//! A third way to bound the context: compaction, as `serve --summaries
//! --compact-at 100000` (`--compact-to 0.5`) does it. The same session's
//! records, with a `wm_summary` appended whenever the records replayed after
//! the newest summary pass 100,000 tokens (`fold::plan`); the request
//! replays the summary first and the records it does not cover (checked
//! against the library's own replay after every fold). Each fold's request
//! (instructions, previous summary, folded records) is counted as uncached
//! input of its own. Last table: whole log, window and compaction under the
//! server's placement.

#[path = "../bench/cache/sim.rs"]
#[allow(dead_code)]
mod sim;

use std::hash::{BuildHasher, Hasher};

use sim::{Block, Cache, Rules, Ttl, Usage};
use wmreplay::__internals::cache::{CacheMemory, CachePolicy, CacheTtl};
use wmreplay::__internals::corpus::{GenOptions, generate};
use wmreplay::__internals::escape::JsNumber;
use wmreplay::__internals::fold::{Cover, INSTRUCTIONS, input, plan, record};
use wmreplay::__internals::order::{key_ts, ts_key};
use wmreplay::{ReplayOptions, Selection, Tokenizer, WindowStart};

/// A replayed message: its identity, content hash and tokens.
#[derive(Clone, Copy)]
struct Message {
    id: (u64, u64),
    hash: u64,
    tokens: u64,
    /// A `text_input` (where a `--start-on text_input` window may start).
    input: bool,
    /// A `wm_summary` (the generator writes some, without `covers`: once a
    /// valid summary is replayed, `--summaries` drops every other).
    summary: bool,
}

impl Message {
    /// The message of `text` (neither a `text_input` nor a summary).
    fn of(id: (u64, u64), output: bool, text: &str) -> Message {
        Message {
            id,
            hash: hash(output, text),
            tokens: Tokenizer::O200k.count(text),
            input: false,
            summary: false,
        }
    }
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
        const WORDS: &str = "the model replay cache token agent vision desk coffee calendar \
            meeting refactor tests window prefix answer remind tomorrow deploy latency \
            ü café naïve 日本 \"quoted\"";
        let w: Vec<&str> = WORDS.split_whitespace().collect();
        (0..n)
            .map(|_| w[self.below(w.len() as u64) as usize])
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

/// The replayed messages of `log[from..]`, appended to `out` (their texts
/// to `texts`).
fn absorb(log: &[u8], from: usize, out: &mut Vec<Message>, texts: &mut Vec<String>) {
    let r = wmreplay::replay(&log[from..], &ReplayOptions::default());
    let data = r.data();
    for rec in r.records() {
        let mut text = String::new();
        wmreplay::__internals::render::message_text(rec, data, &mut text);
        let id = (ts_key(rec.ts_ms()), r.source_offset(rec) + from as u64);
        out.push(Message {
            input: rec.kind_is(data, "text_input"),
            summary: rec.kind_is(data, "wm_summary"),
            ..Message::of(id, rec.is_output(), &text)
        });
        texts.push(text);
    }
}

/// One turn of the session: when, what the log holds then (messages in
/// replay order), and the current request's text.
struct Turn {
    at_ms: u64,
    messages: usize,
    /// The log's length then.
    log_len: usize,
    request: Message,
}

struct Trace {
    messages: Vec<Message>,
    /// Their texts.
    texts: Vec<String>,
    turns: Vec<Turn>,
    system: Message,
    log: Vec<u8>,
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
    let (mut messages, mut texts) = (Vec::new(), Vec::new());
    absorb(&log, 0, &mut messages, &mut texts);
    let mut rng = Rng(seed ^ 0x5eed);
    let mut now = 0u64;
    // Timestamps after the generated log's.
    let mut ts = 1_800_000_000_000u64;
    let mut out = Vec::with_capacity(turns);
    let system = wmreplay::system_prompt(None);
    let system = Message::of((0, 0), false, &system);
    for t in 0..turns {
        let text = rng.words_in(5, 60);
        let current = wmreplay::current_user_request_text(&text, Some("s-1"));
        out.push(Turn {
            at_ms: now,
            messages: messages.len(),
            log_len: log.len(),
            request: Message::of((u64::MAX, t as u64), false, &current),
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
        absorb(&log, from, &mut messages, &mut texts);
        now += pause(&mut rng);
    }
    Trace {
        messages,
        texts,
        turns: out,
        system,
        log,
    }
}

/// `--compact-at`, and the tokens a fold keeps (`--compact-to 0.5`).
const COMPACT_AT: u64 = 100_000;
const COMPACT_KEEP: u64 = 50_000;
/// The size of a summary's text, in tokens (uniform; a real summary's).
const SUMMARY_TOKENS: (u64, u64) = (2_000, 4_000);

/// The session under compaction: the same records, with summaries.
#[derive(Default)]
struct Compacted {
    /// Per turn: the first of `Trace::messages` replayed, and the summary
    /// replayed before it.
    turns: Vec<(usize, Option<Message>)>,
    /// Each message's identity in the log with the summaries in it.
    ids: Vec<(u64, u64)>,
    folds: usize,
    /// Input tokens of the fold requests.
    input: u64,
    /// Tokens of the summaries' texts (the fold requests' output).
    output: u64,
}

/// The messages `from..to` of `tr` a replay with summaries on keeps, by
/// index: with a valid summary, no other `wm_summary`.
fn kept(tr: &Trace, from: usize, to: usize, summarised: bool) -> Vec<usize> {
    (from..to)
        .filter(|&i| !(summarised && tr.messages[i].summary))
        .collect()
}

/// Replays the session with summaries on, folding as the server does.
fn compact(tr: &Trace, seed: u64) -> Compacted {
    let count = |t: &str| Tokenizer::O200k.count(t);
    // Its own RNG: the session's records are the other traces' records.
    let mut rng = Rng(seed ^ 0xf01d);
    let mut c = Compacted::default();
    let (mut log, mut copied, mut max_ts) = (Vec::new(), 0, f64::MIN);
    let (mut start, mut summary): (usize, Option<(Message, String)>) = (0, None);
    let mut sel = Selection::default();
    sel.summaries = true;
    for turn in &tr.turns {
        // What arrived since the last turn, after the summaries written.
        let shift = (log.len() - copied) as u64;
        log.extend_from_slice(&tr.log[copied..turn.log_len]);
        copied = turn.log_len;
        for m in &tr.messages[c.ids.len()..turn.messages] {
            c.ids.push((m.id.0, m.id.1 + shift));
            max_ts = max_ts.max(key_ts(m.id.0));
        }
        // The server folds in the background and the summary lands a
        // little after the turn that triggered it; here it is appended
        // before that turn's request (at most one fold per turn, as the
        // server runs one fold per log at a time).
        let live = kept(tr, start, turn.messages, summary.is_some());
        let tokens: Vec<u64> = live.iter().map(|&i| tr.messages[i].tokens).collect();
        if let Some(k) = plan(&tokens, COMPACT_AT, COMPACT_KEEP, COMPACT_AT) {
            let last = live[k - 1];
            let previous = summary.as_ref().map(|s| s.1.as_str());
            let folded: Vec<&str> = live[..k].iter().map(|&i| tr.texts[i].as_str()).collect();
            let folded = folded.join("\n\n");
            c.input += count(INSTRUCTIONS) + count(&input(previous, &folded));
            let target = rng.range(SUMMARY_TOKENS.0, SUMMARY_TOKENS.1);
            let mut text = rng.words(1_000);
            while count(&text) < target {
                text.push(' ');
                text.push_str(&rng.words(100));
            }
            c.output += count(&text);
            let cover = Cover {
                ts_ms: key_ts(tr.messages[last].id.0),
                offset: c.ids[last].1,
                records: k,
                tokens: tokens[..k].iter().sum(),
            };
            // The writer stamps it with the log's newest `ts_ms`.
            let rec = record(&cover, &text, "bench-model");
            let ts = JsNumber::new(max_ts);
            let ts = std::str::from_utf8(ts.as_bytes()).expect("ASCII");
            let line = format!("{{\"ts_ms\":{ts},{}\n", &rec[1..]);
            let at = log.len() as u64;
            log.extend_from_slice(line.as_bytes());
            let mut one = Vec::new();
            absorb(line.as_bytes(), 0, &mut one, &mut Vec::new());
            let mut m = one[0];
            m.id.1 = at;
            summary = Some((m, text));
            start = last + 1;
            c.folds += 1;
            // The library's replay agrees: the summary, then the rest.
            let mut r = wmreplay::replay(&log, &ReplayOptions::default());
            r.select(&sel, None);
            let ids: Vec<_> = r
                .records()
                .iter()
                .map(|rec| (ts_key(rec.ts_ms()), r.source_offset(rec)))
                .collect();
            assert_eq!(ids[0], m.id, "the summary is replayed first");
            let want: Vec<_> = kept(tr, start, turn.messages, true)
                .iter()
                .map(|&i| c.ids[i])
                .collect();
            assert!(
                ids[1..] == want,
                "then the records it does not cover, in order"
            );
        }
        c.turns.push((start, summary.as_ref().map(|s| s.0)));
    }
    c
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

/// What each request replays.
#[derive(Clone, Copy)]
enum Replayed<'a> {
    WholeLog,
    Window(&'a Selection),
    Compacted(&'a Compacted),
}

/// Runs the session under `strategy`: the usage, and the largest request.
fn simulate(tr: &Trace, strategy: Strategy, replayed: Replayed, rules: &Rules) -> (Usage, u64) {
    let mut cache = Cache::default();
    let mut memory = CacheMemory::default();
    let mut start: Option<WindowStart> = None;
    let mut total = Usage::default();
    let mut largest = 0;
    let mut blocks: Vec<Block> = Vec::new();
    let mut msgs: Vec<Message> = Vec::new();
    for (t, turn) in tr.turns.iter().enumerate() {
        let all = &tr.messages[..turn.messages];
        msgs.clear();
        match replayed {
            Replayed::WholeLog => msgs.extend_from_slice(all),
            Replayed::Compacted(c) => {
                let (from, summary) = c.turns[t];
                msgs.extend(summary);
                let kept = kept(tr, from, all.len(), summary.is_some());
                msgs.extend(kept.into_iter().map(|i| Message {
                    id: c.ids[i],
                    ..all[i]
                }));
            }
            Replayed::Window(sel) => {
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
                msgs.extend_from_slice(&all[range]);
            }
        }
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
        largest = largest.max(u.total());
    }
    (total, largest)
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
    let compacted = compact(&tr, seed);
    println!(
        "| trace | placement | input tokens | read from cache | written | cost vs no caching |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let on_turns = {
        let mut o = windowed.clone();
        o.start_on = Some("text_input".into());
        o
    };
    // (trace, its usage under the server's placement, largest request, fold
    // requests' input tokens).
    let mut server = Vec::new();
    for (name, replayed, policy) in [
        ("whole log", Replayed::WholeLog, Some("whole log")),
        (
            "--max-tokens 100000 --trim-to 0.8",
            Replayed::Window(&windowed),
            Some("window (--max-tokens 100000 --trim-to 0.8)"),
        ),
        (
            "--max-tokens 100000 --trim-to 0.8 --start-on text_input",
            Replayed::Window(&on_turns),
            None,
        ),
        (
            "--summaries --compact-at 100000 (fold requests included, uncached)",
            Replayed::Compacted(&compacted),
            Some("compaction (--summaries --compact-at 100000)"),
        ),
    ] {
        let folds = match replayed {
            Replayed::Compacted(c) => c.input,
            _ => 0,
        };
        for s in [
            Strategy::None,
            Strategy::Automatic,
            Strategy::LastRecord,
            Strategy::Wmreplay(CacheTtl::FiveMinutes),
            Strategy::Wmreplay(CacheTtl::OneHour),
            Strategy::Bound,
        ] {
            let (u, largest) = simulate(&tr, s, replayed, &rules);
            let total = (u.total() + folds) as f64;
            println!(
                "| {name} | {} | {} | {:.1}% | {:.1}% | {:.3}× |",
                s.name(),
                u.total() + folds,
                100.0 * u.cache_read as f64 / total,
                100.0 * (u.cache_write_5m + u.cache_write_1h) as f64 / total,
                (u.cost(&rules) + folds as f64) / total
            );
            if let Some(policy) = policy
                && s == Strategy::Wmreplay(CacheTtl::FiveMinutes)
            {
                server.push((policy, u, largest, folds));
            }
        }
    }
    println!(
        "\nUnder the server's placement ({}), per turn (compaction: --compact-to 0.5, \
         summaries of {}–{} tokens of text, its fold requests included):\n",
        Strategy::Wmreplay(CacheTtl::FiveMinutes).name(),
        SUMMARY_TOKENS.0,
        SUMMARY_TOKENS.1
    );
    println!(
        "| policy | input tokens per turn | largest turn request | read from cache | cost vs no caching | cost per turn | compactions | compaction input tokens |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let n = turns as f64;
    for (name, u, largest, folds) in &server {
        let total = (u.total() + folds) as f64;
        let cost = u.cost(&rules) + *folds as f64;
        let (compactions, fold_tokens) = match folds {
            0 => ("–".into(), "–".into()),
            f => (
                compacted.folds.to_string(),
                format!("{f} ({:.0} per turn)", *f as f64 / n),
            ),
        };
        println!(
            "| {name} | {:.0} | {largest} | {:.1}% | {:.3}× | {:.0} | {compactions} | {fold_tokens} |",
            total / n,
            100.0 * u.cache_read as f64 / total,
            cost / total,
            cost / n,
        );
    }
    if let Some((_, u, _, folds)) = server.last() {
        let read = u.cache_read as f64;
        let share = 100.0 * read / (u.total() + folds) as f64;
        println!();
        println!(
            "Compaction: {share:.1}% of all input tokens read from the cache ({:.1}% of the turns' requests alone); target ≥ 85%: {}. Cost per turn in base input-token units (reads 0.1, writes 1.25); the summaries' {} output tokens are not priced.",
            100.0 * read / u.total() as f64,
            if share >= 85.0 { "met" } else { "missed" },
            compacted.output
        );
    }
}
