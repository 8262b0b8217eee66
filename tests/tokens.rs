//! The compiled tokenizers (`src/select/bpe/`) against their oracle,
//! tiktoken-rs's `count_ordinary`: the same count for every text of a large,
//! varied corpus, with both vocabularies. And a smoke check that a token
//! window no longer pays for loading a vocabulary.
#![cfg(feature = "tiktoken")]

use std::process::Command;
use std::time::{Duration, Instant};

use tiktoken_rs::CoreBPE;
use wmreplay::__internals::corpus::{GenOptions, generate};
use wmreplay::Tokenizer;

/// Both vocabularies with their oracle.
fn vocabularies() -> [(Tokenizer, &'static CoreBPE); 2] {
    [
        (Tokenizer::O200k, tiktoken_rs::o200k_base_singleton()),
        (Tokenizer::Cl100k, tiktoken_rs::cl100k_base_singleton()),
    ]
}

/// Asserts every text counts the same as the oracle, with both vocabularies;
/// returns the texts' bytes.
fn assert_counts_match<'a>(texts: impl IntoIterator<Item = &'a str> + Clone) -> usize {
    let mut bytes = 0;
    for (tokenizer, oracle) in vocabularies() {
        bytes = 0;
        for text in texts.clone() {
            bytes += text.len();
            assert_eq!(
                tokenizer.count(text),
                oracle.count_ordinary(text) as u64,
                "{} counts {text:?} differently from tiktoken-rs",
                tokenizer.name()
            );
        }
    }
    bytes
}

/// SplitMix64, for reproducible random texts.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Texts that exercise each branch of both pre-tokenizer patterns.
const SAMPLES: &[&str] = &[
    "",
    "hello world",
    "tiktoken is great!",
    "Hello, World! HELLO world. hello WORLD",
    // Contractions, in every case, and the letters that fold to s and k.
    "don't I'll we've they're she's I'd I'm DON'T I'LL WE'VE THEY'RE SHE'S",
    "it\u{17f}s 'S 'ſ 'K 'k \u{212a} x's x'S x'Ll 're're''s 'sss",
    // Unicode letters, marks, numbers of other scripts.
    "Ünïcödé façade naïve coöperate Œuvre straße ǅemal",
    "日本語のテキストと漢字、ひらがな。中文文本，标点符号！한국어 텍스트입니다.",
    "العربية نص مع أرقام ١٢٣٤٥ وعلامات، ؟ עברית טקסט",
    "हिन्दी पाठ और देवनागरी अंक १२३ ภาษาไทยไม่มีช่องว่าง",
    "e\u{301}e\u{301}\u{301} a\u{308}\u{323} ḁ̶̷̸ combining: \u{300}\u{301}\u{302}x",
    "Ⅻ ⅷ ½ ¾ ² ³ ⁴ ① ② 𝟙𝟚𝟛 𝐀𝐁𝐂 𝔞𝔟𝔠",
    // Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
    "😀😃😄 👨‍👩‍👧‍👦 👍🏽👍🏿 🇫🇷🇯🇵🏳️‍🌈 1️⃣#️⃣ ❤️ ☺︎ 🤖🧠💾",
    "emoji🙂inside🙃words and🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀 runs",
    // Code.
    "fn main() {\n    let x: Vec<u8> = vec![1, 2, 3];\n    println!(\"{x:?}\");\n}\n",
    "def f(a, b=2, *args, **kw):\n\treturn {'a': a, \"b\": b}  # comment\r\n",
    "if(a&&b||!c){x+=1;}else{y-=2;}// i++ --j a->b a::b <<= >>= === !==",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%o%';",
    "<div class=\"x\">&nbsp;&amp;</div>\n<!-- c -->\n<?xml version=\"1.0\"?>",
    "https://example.com/path/to/file.json?q=1&r=two#frag //// ///x/ /\n/\r\n",
    "{\"type\":\"wm_event\",\"ts_ms\":1763700000000,\"event\":{\"a\":[1,2.5e-3,null,true]}}",
    "WM_KIND=text_input\nts_ms: 1763700005000\nWM_JSON: {\"text\":\"hi\"}",
    // Whitespace of every kind, alone and in runs.
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "a \n b \r\n c\t\td \u{a0}e\u{3000}f\u{2028}g\u{85}h\u{200b}i",
    "\n\n\n\n  \n\t\n \r\n\r\n\r \r\r\n\n x",
    "trailing spaces   ",
    "trailing newline\n",
    "   leading",
    "\u{3000}\u{3000}全角\u{3000}",
    // Digits and punctuation runs.
    "1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F 1_000_000",
    "!!! ??? ... --- *** ### $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} ||| ~~~",
    "a.b,c;d:e!f?g\"h'i`j(k)l[m]n{o}p<q>r/s\\t|u-v_w+x=y*z&^%$#@~",
];

#[test]
fn hand_picked_texts_count_as_tiktoken_counts_them() {
    assert_counts_match(SAMPLES.iter().copied());
}

#[test]
fn long_runs_count_as_tiktoken_counts_them() {
    // Pieces longer than 100 bytes take the heap merge; around 100 both.
    let mut texts = Vec::new();
    for n in [
        1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 64, 98, 99, 100, 101, 102, 127, 128, 255, 256, 1000, 4097,
    ] {
        for unit in [
            " ", "\t", "\n", "\r\n", "a", "ab", "x", "A", "é", "日", "😀", "1", "0", ".", "!", "/",
            "-", "=", "*", " a", "a ", "\u{a0}", "ha", "lol", "abc", "Ab", " 1", "\\",
        ] {
            texts.push(unit.repeat(n));
            texts.push(format!("{}x", unit.repeat(n)));
            texts.push(format!("word{}word", unit.repeat(n)));
        }
        texts.push(format!("{}\n{}", " ".repeat(n), "x"));
    }
    // Long words of letters that are not one token: random lowercase,
    // base64, hex, a long identifier.
    let mut rng = Rng(7);
    for len in [50, 99, 100, 101, 150, 300, 2000] {
        let lower: String = (0..len)
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect();
        texts.push(lower.clone());
        texts.push(format!(" {lower}"));
        let b64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        texts.push((0..len).map(|_| *rng.pick(b64) as char).collect());
        texts.push(
            (0..len)
                .map(|_| *rng.pick(b"0123456789abcdef") as char)
                .collect(),
        );
        texts.push(
            (0..len / 6)
                .map(|i| if i % 2 == 0 { "camelCase" } else { "_snake" })
                .collect(),
        );
    }
    let bytes = assert_counts_match(texts.iter().map(String::as_str));
    assert!(bytes > 100_000, "{bytes}");
}

#[test]
fn random_texts_count_as_tiktoken_counts_them() {
    // Fragments from every class the patterns tell apart, glued at random.
    let fragments: &[&str] = &[
        " ", "  ", "\t", "\n", "\r", "\r\n", "\u{a0}", "\u{3000}", "a", "Z", "é", "É", "ß", "ǅ",
        "ʰ", "\u{301}", "日", "ア", "한", "ب", "ह", "ไ", "1", "٣", "½", "Ⅻ", "'", "'s", "'T",
        "'ll", "'RE", "!", ".", ",", "/", "-", "_", "\"", "\\", "{", "}", "😀", "👍🏽", "🇫🇷",
        "\u{200d}", "\u{fe0f}", "€", "$", "%", "\u{0}", "\u{7f}", "the", " the", "The", "THE",
        "ing", "tion", "123", "2026", "http", "://", "wm_", "ts_ms", "json",
    ];
    let mut rng = Rng(44);
    let texts: Vec<String> = (0..3_000)
        .map(|_| {
            let n = 1 + rng.below(60);
            (0..n).map(|_| *rng.pick(fragments)).collect()
        })
        .collect();
    assert_counts_match(texts.iter().map(String::as_str));
}

#[test]
fn every_record_of_a_generated_log_counts_as_tiktoken_counts_it() {
    // `wmreplay gen OUT --size 10MiB`: chat turns, events with nested JSON,
    // non-ASCII text, escapes, CRLF endings, malformed lines.
    let options = GenOptions {
        size: 10 << 20,
        ..GenOptions::default()
    };
    let mut log = Vec::new();
    generate(&options, &mut log, &|_| {}).expect("generating in memory");
    let text = String::from_utf8_lossy(&log);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert!(lines.len() > 20_000, "{} lines", lines.len());
    let bytes = assert_counts_match(lines.iter().copied());
    assert_eq!(bytes, text.len());
    // Also in chunks of many lines, and as a window renders them, so pieces
    // that cross a line end are covered too.
    let chunks: Vec<String> = lines.chunks(97).map(|c| c.concat()).collect();
    assert_counts_match(chunks.iter().map(String::as_str));
    let rendered: Vec<String> = lines
        .iter()
        .take(5_000)
        .map(|l| {
            format!(
                "WM_KIND=text_input\nts_ms: 1763700005000\nWM_JSON: {}",
                l.trim_end()
            )
        })
        .collect();
    assert_counts_match(rendered.iter().map(String::as_str));
}

/// Regression: a token window paid for building tiktoken-rs's `CoreBPE`
/// (0.1–0.8 s a process, most of it the decoder, a sorted copy of the
/// vocabulary and parsing it) on every `respond --max-tokens`. The bound is
/// generous (a loaded machine, a debug build); BENCHMARKS.md has the
/// measured figure (≤ 50 ms in release).
#[test]
fn a_token_window_on_a_small_log_starts_in_well_under_a_second() {
    let log = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/working_memory.log");
    for tokenizer in ["o200k_base", "cl100k_base"] {
        let run = || {
            let start = Instant::now();
            let out = Command::new(env!("CARGO_BIN_EXE_wmreplay"))
                .args([
                    "respond",
                    log,
                    "--text",
                    "hi",
                    "--max-tokens",
                    "1000",
                    "--tokenizer",
                    tokenizer,
                ])
                .output()
                .expect("wmreplay runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            start.elapsed()
        };
        run(); // The binary's pages into the cache.
        let fastest = (0..3).map(|_| run()).min().unwrap();
        assert!(
            fastest < Duration::from_secs(2),
            "respond --max-tokens 1000 --tokenizer {tokenizer} took {fastest:?}"
        );
    }
}
