//! Shared test helpers: a deterministic generator of hostile working-memory
//! logs, and a runner for the Node.js oracle.
#![allow(dead_code)]

pub mod jsgen;

use std::path::Path;
use std::process::Command;

/// A small deterministic RNG (xorshift64*), so failures reproduce from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

const KINDS: &[&str] = &[
    "text_input",
    "text_output",
    "text_output",
    "wm_event",
    "wm_insight",
    "tool_call",
    r"text\u005foutput",
    r"wm\/event",
    r"k\u00e9ind",
    r"lone\ud800surrogate",
    r"pair\ud83d\ude00",
    r"ctl\u0001\t\n",
    "naïve_日本",
    r#"quote\"back\\slash"#,
    "",
];

const TEXTS: &[&str] = &[
    "hello",
    "Can you remind me what I was working on?",
    r#"she said \"hi\" and left"#,
    r"back\\slash and \/ slash",
    r"tab\there\nnewline\r\n",
    "naïve café — 日本語 🙂",
    r"\u00e9\u4e2d\ud83d\ude00",
    r"lone \udc00 low and \ud800 high",
    r"\u0000\u001f controls",
    "",
];

fn ts_text(rng: &mut Rng, base: &mut i64) -> String {
    match rng.below(40) {
        0 => "-0".into(),
        1 => "1e3".into(),
        2 => "1.5".into(),
        3 => "12345678901234567890".into(),
        4 => "1e400".into(),
        5 => "-1e400".into(),
        6 => "1E+2".into(),
        7 => "1e21".into(),
        8 => "5e-324".into(),
        9 => "0.1".into(),
        10 => "-17".into(),
        11 => format!("{}.{}", *base, rng.below(1000)),
        12 => "123456789012345678901234567890".into(),
        13 => "0".into(),
        14..=17 => base.to_string(),                             // ties
        18..=19 => (*base - rng.below(5000) as i64).to_string(), // late arrival
        _ => {
            *base += rng.below(3000) as i64;
            base.to_string()
        }
    }
}

fn sep(rng: &mut Rng) -> &'static str {
    if rng.chance(0.1) { " " } else { "" }
}

fn valid_record(rng: &mut Rng, base: &mut i64) -> String {
    let kind = *rng.pick(KINDS);
    let ts = ts_text(rng, base);
    let text = *rng.pick(TEXTS);
    let (s1, s2) = (sep(rng), sep(rng));
    match rng.below(12) {
        0 => format!(r#"{{"ts_ms":{s1}{ts},{s2}"type":"{kind}","text":"{text}"}}"#),
        1 => format!(r#"{{"type":"dup","ts_ms":"x","type":"{kind}",{s1}"ts_ms":{ts}}}"#),
        2 => format!(r#"{{"t\u0079pe":"{kind}","ts\u005fms":{ts}}}"#),
        3 => format!(
            r#"{{"type":"{kind}","ts_ms":{ts},"event":{{"type":1,"ts_ms":"nested","a":[1,{{"b":null}},true,false,-0.5e-3]}}}}"#
        ),
        4 => format!(r#"{{ "type" : "{kind}" , "ts_ms" : {ts} , "big" : 1e999 }}"#),
        5 => format!(
            "{{\"type\":\"{kind}\",\t\"ts_ms\":{ts},\"deep\":{}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        ),
        _ => format!(
            r#"{{"type":"{kind}",{s1}"ts_ms":{s2}{ts},"session_id":"s-{}","text":"{text}"}}"#,
            rng.below(4)
        ),
    }
}

fn bad_line(rng: &mut Rng, base: &mut i64) -> Vec<u8> {
    let good = valid_record(rng, base);
    let s: Vec<u8> = match rng.below(28) {
        0 => good.as_bytes()[..good.len() / 2].to_vec(), // truncated
        1 => format!("{good} x").into_bytes(),
        2 => format!("{good}{good}").into_bytes(),
        3 => b"{\"type\":\"a\x01b\",\"ts_ms\":1}".to_vec(),
        4 => b"{\"type\":\"a\tb\",\"ts_ms\":1}".to_vec(),
        5 => br#"{"type":"a\x","ts_ms":1}"#.to_vec(),
        6 => br#"{"type":"a","ts_ms":01}"#.to_vec(),
        7 => br#"{"type":"a","ts_ms":NaN}"#.to_vec(),
        8 => b"{'type':'a','ts_ms':1}".to_vec(),
        9 => b"{\"type\":\"\xff\",\"ts_ms\":1}".to_vec(),
        10 => b"{\"type\":\"\xc0\x80\",\"ts_ms\":1}".to_vec(),
        11 => b"{\"type\":\"\xed\xa0\x80\",\"ts_ms\":1}".to_vec(),
        12 => b"\xef\xbb\xbf{\"type\":\"bom\",\"ts_ms\":1}".to_vec(),
        13 => b"\0\0\0\0".to_vec(),
        14 => br#"[{"type":"a","ts_ms":1}]"#.to_vec(),
        15 => br#""just a string""#.to_vec(),
        16 => b"42".to_vec(),
        17 => b"null".to_vec(),
        18 => br#"{"ts_ms":1}"#.to_vec(),
        19 => br#"{"type":7,"ts_ms":1}"#.to_vec(),
        20 => br#"{"type":"a","ts_ms":"1"}"#.to_vec(),
        21 => br#"{"type":"a","ts_ms":null}"#.to_vec(),
        22 => br#"{"type":"a","ts_ms":1,}"#.to_vec(),
        23 => br#"{"type":"a","ts_ms":-}"#.to_vec(),
        24 => b"{\"type\":\"a\",\x0c\"ts_ms\":1}".to_vec(),
        25 => br#"{"type":"a","ts_ms":1.}"#.to_vec(),
        26 => br#"{"type":"a","ts_ms":Infinity}"#.to_vec(),
        _ => b"{\"type\":\"a\",\"ts_ms\":1}\x00".to_vec(),
    };
    s
}

/// A log of about `lines` lines: valid records of every shape the contract
/// names, malformed lines of many kinds, CRLF, blank and whitespace lines,
/// out-of-order and tied timestamps, non-ASCII text; sometimes a BOM and an
/// unterminated last line.
pub fn hostile_log(seed: u64, lines: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut base = 1_763_700_000_000i64;
    let mut out = Vec::new();
    if rng.chance(0.2) {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    for _ in 0..lines {
        let mut line: Vec<u8> = match rng.below(10) {
            0 => bad_line(&mut rng, &mut base),
            1 if rng.chance(0.3) => rng
                .pick(&[&b""[..], b"   ", b"\t", b"\r", b"\x0b\x0c "])
                .to_vec(),
            _ => valid_record(&mut rng, &mut base).into_bytes(),
        };
        if rng.chance(0.05) {
            line.splice(0..0, b"  \t".iter().copied());
        }
        if rng.chance(0.05) {
            line.extend_from_slice(b" \t\x0b");
        }
        out.extend_from_slice(&line);
        out.extend_from_slice(if rng.chance(0.1) { b"\r\n" } else { b"\n" });
    }
    if rng.chance(0.3) {
        out.extend_from_slice(valid_record(&mut rng, &mut base).as_bytes());
    }
    out
}

/// Output of the Node.js oracle: stdout and the stats line.
pub struct OracleOutput {
    pub body: Vec<u8>,
    pub stats: String,
}

/// Runs `node tests/oracle/replay.js ARGS`; panics with a clear message
/// when node is missing (the differential tests must not pass silently).
pub fn oracle(args: &[&str]) -> OracleOutput {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/replay.js");
    let out = Command::new("node")
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("the differential tests need Node.js (`node` on PATH) to run the oracle: {e}")
        });
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = String::from_utf8(out.stderr).unwrap().trim().to_string();
    OracleOutput {
        body: out.stdout,
        stats,
    }
}

/// The four contract counts of a stats object, as the oracle prints them.
pub fn contract_stats(s: &wmreplay::ReplayStats) -> String {
    format!(
        r#"{{"total_lines":{},"parsed_entries":{},"skipped_invalid_json":{},"skipped_invalid_shape":{}}}"#,
        s.total_lines, s.parsed_entries, s.skipped_invalid_json, s.skipped_invalid_shape
    )
}

/// Panics, showing where and around what, unless `got` and `want` (request
/// bodies) are byte-identical.
pub fn assert_same_body(context: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let from = at.saturating_sub(200);
    panic!(
        "{context}: bodies differ at byte {at}\n ours: {}\n node: {}",
        String::from_utf8_lossy(&got[from..(at + 200).min(got.len())]),
        String::from_utf8_lossy(&want[from..(at + 200).min(want.len())]),
    );
}

/// What `wmreplay COMMAND LOG FLAGS…` prints, as JSON (it must succeed,
/// or the test fails with its stderr).
pub fn cli_json(command: &str, log: &Path, flags: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_wmreplay"))
        .arg(command)
        .arg(log)
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The request `wmreplay respond` writes for `log` with the test servers'
/// model (`test-model`) and cache breakpoints, `--text text` and `flags`:
/// what a server's turn must send its model for the log as it stood.
pub fn respond_request(log: &Path, text: &str, flags: &[&str]) -> serde_json::Value {
    let fixed = ["--text", text, "--model", "test-model", "--cache", "auto"];
    cli_json("respond", log, &[&fixed[..], flags].concat())
}
