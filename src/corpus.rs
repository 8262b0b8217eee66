//! A generator of realistic working-memory logs, for benchmarks and tests.
//!
//! The output is deterministic for a seed (whatever the thread count): the
//! log is made of fixed-size blocks, each generated in parallel from its own
//! RNG stream and written in order. Lines mimic an agent's log: chat turns
//! (`text_input`, `text_output`), `wm_event` records with nested objects and
//! arrays, `wm_insight`, tool calls and a few other kinds; non-ASCII text,
//! escapes and quotes; about 400-byte lines with a long tail; late arrivals
//! and exact timestamp ties; a small share of malformed lines of many kinds;
//! some CRLF endings and some lines with spaces after `:` and `,`.

use std::io::Write;

use rayon::prelude::*;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Bytes to write (the log ends at the first line end at or past this).
    pub size: u64,
    /// RNG seed: the same seed gives the same bytes.
    pub seed: u64,
    /// Share of records that arrive late, with an earlier `ts_ms`. Default 0.03.
    pub disorder: f64,
    /// Share of malformed lines. Default 0.002.
    pub bad: f64,
}

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            size: 1 << 20,
            seed: 1,
            disorder: 0.03,
            bad: 0.002,
        }
    }
}

/// What was generated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenSummary {
    /// Bytes written.
    pub bytes: u64,
    /// Lines written (blank ones included).
    pub lines: u64,
    /// Malformed lines written (blank lines included).
    pub bad_lines: u64,
}

/// Bytes per independently generated block.
const BLOCK: u64 = 4 << 20;

/// Milliseconds of log time per block: more than the lines of a block can
/// use at a mean step of 1 s (a 4 MiB block holds about 11,000 lines).
const BLOCK_SPAN_MS: u64 = 1 << 26;

/// Writes a log to `w`; `progress(bytes)` is called as blocks are written.
pub fn generate(
    options: &GenOptions,
    w: &mut dyn Write,
    progress: &dyn Fn(u64),
) -> std::io::Result<GenSummary> {
    let blocks = options.size.div_ceil(BLOCK);
    let mut summary = GenSummary::default();
    // Generate a few blocks per thread at a time, write them in order.
    let window = (rayon::current_num_threads() * 2).max(1) as u64;
    let mut next = 0u64;
    while next < blocks {
        let upto = (next + window).min(blocks);
        let out: Vec<(Vec<u8>, GenSummary)> = (next..upto)
            .into_par_iter()
            .map(|b| {
                let budget = if b + 1 == blocks {
                    options.size - b * BLOCK
                } else {
                    BLOCK
                };
                block(options, b, budget as usize)
            })
            .collect();
        for (bytes, s) in out {
            w.write_all(&bytes)?;
            summary.bytes += s.bytes;
            summary.lines += s.lines;
            summary.bad_lines += s.bad_lines;
            progress(s.bytes);
        }
        next = upto;
    }
    w.flush()?;
    Ok(summary)
}

/// Parses a size such as `100MiB`, `1GiB`, `64KB`, `1500000` with the
/// `parse-size` crate: `KiB`/`Ki` and the other IEC units are powers of
/// 1024, `KB`/`K`, `MB`/`M`… powers of 1000; case-insensitive, the `B`
/// optional, fractions rounded.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size::parse_size(s.trim())
        .map_err(|e| format!("invalid size {s:?}: {e} (expected e.g. 100MiB, 1GiB, 64KB, 5000000)"))
}

/// SplitMix64: a fast, well-mixed stream per block.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() >> 32) * n) >> 32
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Pieces of chat text: plain, quoted, escaped, non-ASCII.
const PHRASES: &[&str] = &[
    "Can you remind me what I was working on yesterday?",
    "Sure, here is a summary of the last session.",
    "the replay module needs tests for CRLF handling",
    r#"she said \"ship it\" and closed the laptop"#,
    r"the path is C:\\Users\\eva\\notes.txt",
    r"line one\nline two\n\ttabbed",
    "naïve café déjà vu — résumé",
    "日本語のテキストも含まれます",
    "emoji 🙂🚀 in the middle",
    r"unicode escapes \u00e9\u00e8 and \u4e2d\u6587",
    "prompt caching only works when the prefix is byte-stable",
    "remember to water the plants at 18:00",
    "The quick brown fox jumps over the lazy dog.",
    "Let's look at the benchmark table again.",
    "Ok. I'll keep answers short.",
    r"a slash \/ and a backslash \\ together",
    "Привет, как дела?",
    "values: 3.14159, 2.71828, 1.41421",
];

const WORDS: &[&str] = &[
    "desk", "laptop", "mug", "window", "door", "person", "cat", "phone", "book", "lamp", "plant",
    "chair", "screen", "keyboard",
];

const SOURCES: &[&str] = &["vision", "calendar", "fs", "audio", "clipboard"];
const EVENT_KINDS: &[&str] = &["scene_change", "reminder", "file_saved", "speech", "focus"];
const TOOLS: &[&str] = &["search", "read_file", "run_tests", "calendar.lookup"];
const OTHER_KINDS: &[&str] = &["wm_summary", "tool_result", "heartbeat"];

struct Line<'a> {
    out: &'a mut Vec<u8>,
    spaced: bool,
}

impl Line<'_> {
    fn raw(&mut self, s: &str) {
        self.out.extend_from_slice(s.as_bytes());
    }
    /// `"key":` (or `"key": ` when spaced), preceded by `,` (or `, `) unless first.
    fn key(&mut self, k: &str, first: bool) {
        if !first {
            self.raw(if self.spaced { ", " } else { "," });
        }
        self.out.push(b'"');
        self.raw(k);
        self.raw(if self.spaced { "\": " } else { "\":" });
    }
    fn str(&mut self, k: &str, v: &str, first: bool) {
        self.key(k, first);
        self.out.push(b'"');
        self.raw(v);
        self.out.push(b'"');
    }
    fn int(&mut self, k: &str, v: u64, first: bool) {
        self.key(k, first);
        self.raw(itoa::Buffer::new().format(v));
    }
    fn session(&mut self, rng: &mut Rng) {
        self.key("session_id", false);
        self.raw("\"s-");
        let n = rng.below(64);
        self.out
            .extend_from_slice(&[b'0' + (n / 10) as u8, b'0' + (n % 10) as u8, b'"']);
    }
    fn text(&mut self, k: &str, rng: &mut Rng) {
        self.key(k, false);
        self.out.push(b'"');
        // Mostly a few phrases; 1% of lines get a long text (the long tail).
        let n = if rng.chance(0.01) {
            20 + rng.below(300)
        } else {
            3 + rng.below(10)
        };
        for i in 0..n {
            if i > 0 {
                self.out.push(b' ');
            }
            self.raw(rng.pick(PHRASES));
        }
        self.out.push(b'"');
    }
    fn list(&mut self, k: &str, rng: &mut Rng, words: &[&str]) {
        self.key(k, false);
        self.out.push(b'[');
        for i in 0..1 + rng.below(4) {
            if i > 0 {
                self.raw(if self.spaced { ", " } else { "," });
            }
            self.out.push(b'"');
            self.raw(rng.pick(words));
            self.out.push(b'"');
        }
        self.out.push(b']');
    }
}

fn record(rng: &mut Rng, ts: u64, out: &mut Vec<u8>) {
    let spaced = rng.chance(0.10);
    let mut l = Line { out, spaced };
    l.raw("{");
    let roll = rng.below(100);
    match roll {
        0..=24 => {
            l.str("type", "text_input", true);
            l.int("ts_ms", ts, false);
            l.session(rng);
            l.text("text", rng);
        }
        25..=49 => {
            l.str("type", "text_output", true);
            l.int("ts_ms", ts, false);
            l.session(rng);
            l.text("text", rng);
            l.key("usage", false);
            l.raw("{");
            l.int("input_tokens", rng.below(200_000), true);
            l.int("output_tokens", rng.below(4000), false);
            l.raw("}");
        }
        50..=74 => {
            l.str("type", "wm_event", true);
            l.int("ts_ms", ts, false);
            l.str("source", rng.pick(SOURCES), false);
            l.key("event", false);
            l.raw("{");
            l.str("kind", rng.pick(EVENT_KINDS), true);
            l.list("objects", rng, WORDS);
            l.key("confidence", false);
            l.raw("0.");
            l.raw(itoa::Buffer::new().format(10 + rng.below(89)));
            l.key("bbox", false);
            l.raw("[");
            for i in 0..4 {
                if i > 0 {
                    l.raw(",");
                }
                l.raw(itoa::Buffer::new().format(rng.below(1920)));
            }
            l.raw("]");
            l.key("meta", false);
            l.raw("{");
            l.key("frame", true);
            l.raw(itoa::Buffer::new().format(rng.below(1_000_000)));
            l.key("ok", false);
            l.raw(if rng.chance(0.9) { "true" } else { "false" });
            l.key("note", false);
            l.raw("null");
            l.raw("}}");
        }
        75..=84 => {
            l.str("type", "wm_insight", true);
            l.int("ts_ms", ts, false);
            l.text("insight", rng);
            l.list("tags", rng, WORDS);
        }
        85..=94 => {
            l.str("type", "tool_call", true);
            l.int("ts_ms", ts, false);
            l.str("tool", rng.pick(TOOLS), false);
            l.key("args", false);
            l.raw("{");
            l.str("q", rng.pick(PHRASES), true);
            l.int("limit", 1 + rng.below(20), false);
            l.raw("}");
        }
        _ => {
            // ts_ms first, type second: key order varies in real logs.
            l.int("ts_ms", ts, true);
            l.str("type", rng.pick(OTHER_KINDS), false);
            l.text("text", rng);
        }
    }
    l.raw("}");
}

/// A malformed line of one of many kinds.
fn bad_line(rng: &mut Rng, ts: u64, out: &mut Vec<u8>) {
    let start = out.len();
    match rng.below(8) {
        0 | 1 => {
            // Truncated: a crash mid-write.
            record(rng, ts, out);
            let len = out.len() - start;
            out.truncate(start + 1 + rng.below(len as u64 - 1) as usize);
        }
        2 => {
            record(rng, ts, out);
            out.extend_from_slice(if rng.chance(0.5) { b" garbage" } else { b"}" });
        }
        3 => {
            out.extend_from_slice(b"{\"type\":\"text_input\",\"text\":\"no timestamp\"}");
        }
        4 => {
            out.extend_from_slice(b"{\"type\":\"wm_event\",\"ts_ms\":\"");
            out.extend_from_slice(itoa::Buffer::new().format(ts).as_bytes());
            out.extend_from_slice(b"\"}");
        }
        5 => out.extend_from_slice(b"[\"not\",\"an\",\"object\"]"),
        6 => out.extend_from_slice(b"   "),
        _ => out.resize(start + 1 + rng.below(64) as usize, 0),
    }
}

fn block(options: &GenOptions, index: u64, budget: usize) -> (Vec<u8>, GenSummary) {
    let mut rng = Rng(options.seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
    // Blocks own disjoint time ranges, so the only disorder is the late
    // arrivals asked for: a block starts BLOCK_SPAN_MS after the previous
    // one, and its timestamps never pass its own range.
    let base = 1_763_700_000_000u64 + index * BLOCK_SPAN_MS;
    let end = base + BLOCK_SPAN_MS - 1;
    let mut ts = base;
    let mut out = Vec::with_capacity(budget + 64 * 1024);
    let mut summary = GenSummary::default();
    while out.len() < budget {
        // Frequent exact ties; otherwise a step of up to 2 s.
        if !rng.chance(0.05) {
            ts = (ts + 1 + rng.below(2000)).min(end);
        }
        if rng.chance(options.bad) {
            bad_line(&mut rng, ts, &mut out);
            summary.bad_lines += 1;
        } else {
            let t = if rng.chance(options.disorder) {
                ts.saturating_sub(1 + rng.below(120_000))
            } else {
                ts
            };
            record(&mut rng, t, &mut out);
        }
        out.extend_from_slice(if rng.chance(0.01) { b"\r\n" } else { b"\n" });
        summary.lines += 1;
    }
    summary.bytes = out.len() as u64;
    (out, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("100MiB").unwrap(), 100 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5Ki").unwrap(), 1536);
        assert_eq!(parse_size("1.5k").unwrap(), 1500);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("42").unwrap(), 42);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
    }

    fn gen_bytes(o: &GenOptions) -> Vec<u8> {
        let mut v = Vec::new();
        generate(o, &mut v, &|_| {}).unwrap();
        v
    }

    #[test]
    fn same_seed_same_bytes_and_about_the_size_asked() {
        let o = GenOptions {
            size: 9 << 20,
            seed: 7,
            ..GenOptions::default()
        };
        let a = gen_bytes(&o);
        assert_eq!(a, gen_bytes(&o));
        assert!(a.len() as u64 >= o.size && (a.len() as u64) < o.size + 3 * 64 * 1024);
        assert_ne!(a, gen_bytes(&GenOptions { seed: 8, ..o }));
    }

    #[test]
    fn corpus_has_what_the_benchmarks_need() {
        let o = GenOptions {
            size: 8 << 20,
            ..GenOptions::default()
        };
        let log = gen_bytes(&o);
        let r = crate::replay(&log, &crate::ReplayOptions::default());
        let s = r.stats();
        let bad = (s.skipped_invalid_json + s.skipped_invalid_shape) as f64;
        let share = bad / s.total_lines as f64;
        assert!(share > 0.0005 && share < 0.005, "bad share {share}");
        assert!(!s.already_ordered, "late arrivals put the log out of order");
        // Late records (below the running maximum) are about `disorder`.
        let mut max = f64::MIN;
        let mut late = 0usize;
        let mut file_order: Vec<_> = r.records().to_vec();
        file_order.sort_by_key(|x| x.offset);
        for x in &file_order {
            if x.ts < max {
                late += 1;
            } else {
                max = x.ts;
            }
        }
        let late_share = late as f64 / file_order.len() as f64;
        assert!(
            (0.02..0.04).contains(&late_share),
            "late share {late_share}"
        );
        let avg = log.len() as f64 / s.total_lines as f64;
        assert!((250.0..600.0).contains(&avg), "average line {avg} bytes");
        let crlf = log.windows(2).filter(|w| w == b"\r\n").count() as f64;
        assert!(crlf / s.total_lines as f64 > 0.005);
        let text = String::from_utf8_lossy(&log);
        for needle in [
            "text_output",
            "wm_event",
            "wm_insight",
            "tool_call",
            "日本語",
            "\\\"",
            "\": ",
        ] {
            assert!(text.contains(needle), "{needle}");
        }
    }
}
