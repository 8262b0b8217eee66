//! The naive replay: the original TypeScript replay algorithm written the obvious way in Rust —
//! serde_json line by line on one thread, a stable `sort_by`, and
//! serde_json to render. It is the benchmarks' baseline and, on logs
//! without the grammar corners serde_json does not follow (unpaired
//! surrogates, numbers that overflow a double), a test oracle.
#![allow(dead_code)]

use serde_json::{Value, json};

/// The four contract counts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NaiveStats {
    pub total_lines: u64,
    pub parsed_entries: u64,
    pub skipped_invalid_json: u64,
    pub skipped_invalid_shape: u64,
}

fn js_number(x: f64) -> String {
    if x == x.trunc() && x.abs() < 1e21 {
        format!("{}", x as i128)
    } else {
        ryu_js::Buffer::new().format(x).to_string()
    }
}

/// Replays `log` into the anthropic request body the naive way.
pub fn respond(
    log: &[u8],
    system: &str,
    text: &str,
    session: Option<&str>,
) -> (Vec<u8>, NaiveStats) {
    let log = log.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(log);
    let mut stats = NaiveStats::default();
    let mut entries: Vec<(f64, String, bool, &str)> = Vec::new();
    for raw in log.split(|b| *b == b'\n') {
        let line = raw.trim_ascii_start().trim_ascii_end();
        let line = {
            // The contract trims JavaScript's ASCII whitespace, which adds \v.
            let mut l = line;
            while let [0x0B, rest @ ..] = l {
                l = rest.trim_ascii_start();
            }
            while let [rest @ .., 0x0B] = l {
                l = rest.trim_ascii_end();
            }
            l
        };
        if line.is_empty() {
            continue;
        }
        stats.total_lines += 1;
        let Ok(s) = std::str::from_utf8(line) else {
            stats.skipped_invalid_json += 1;
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(s) else {
            stats.skipped_invalid_json += 1;
            continue;
        };
        match (
            v.get("type").and_then(Value::as_str),
            v.get("ts_ms").and_then(Value::as_f64),
        ) {
            (Some(kind), Some(ts)) if v.is_object() => {
                stats.parsed_entries += 1;
                entries.push((ts, kind.to_string(), kind == "text_output", s));
            }
            _ => stats.skipped_invalid_shape += 1,
        }
    }
    entries.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    let mut messages: Vec<Value> = entries
        .iter()
        .map(|(ts, kind, output, line)| {
            let text = format!("WM_KIND={kind}\nts_ms: {}\nWM_JSON: {line}", js_number(*ts));
            json!({"role": if *output { "assistant" } else { "user" }, "content": [{"type": "text", "text": text}]})
        })
        .collect();
    let current = format!(
        "CURRENT_USER_REQUEST\nsession_id: {}\nuser_text: {text}",
        session.filter(|s| !s.is_empty()).unwrap_or("none")
    );
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": current}]}));
    let body = json!({"system": system, "messages": messages});
    (serde_json::to_vec(&body).unwrap(), stats)
}
