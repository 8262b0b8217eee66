//! Prompt-cache breakpoints in Anthropic bodies: for random conversations
//! (a log that grows turn by turn, with bursts and late records), every
//! request has at most 4 `cache_control` markers, each on a text block
//! that exists (a replayed message or the system prompt, never the current
//! request), and the body without its markers is the contract's body.

use proptest::prelude::*;
use wmreplay::{
    CacheMemory, CachePolicy, CacheTtl, CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay,
};

/// The body with every marker removed and the system block back to a
/// string: what `render_request` writes.
fn unmarked(body: &str, member: &str) -> String {
    let plain = body.replace(member, "");
    let open = r#"{"system":[{"type":"text","text":"#;
    assert!(plain.starts_with(open), "system is a one-block array");
    let rest = &plain[open.len()..];
    let end = rest
        .find(r#"}],"messages":["#)
        .expect("the system block closes");
    format!(r#"{{"system":{}{}"#, &rest[..end], &rest[end + 2..])
}

/// Checks one request; returns how many markers it has.
fn check(log: &[u8], policy: &CachePolicy, memory: &mut CacheMemory) -> usize {
    let replayed = replay(log, &ReplayOptions::default());
    let current = CurrentRequest {
        text: "now?",
        session_id: Some("s"),
    };
    // The streamed body is the buffered one (each from the same memory).
    let mut streamed = Vec::new();
    let mut copy = *memory;
    replayed
        .write_request_cached(SYSTEM_RULE, &current, policy, &mut copy, &mut streamed)
        .unwrap();
    let body = replayed.render_request_cached(SYSTEM_RULE, &current, policy, memory);
    assert_eq!(streamed, body, "streamed and buffered bodies differ");
    assert_eq!(
        &copy, memory,
        "both leave the same mark for the next request"
    );
    let body = String::from_utf8(body).unwrap();
    let member = std::str::from_utf8(policy.ttl.member()).unwrap();
    let markers = body.matches(member).count();
    assert!(markers <= 4, "{markers} markers");
    assert!(markers >= 1 || replayed.records().is_empty());
    // Every marker closes a text block: right after its text's closing
    // quote, right before the block's `}`.
    for (at, _) in body.match_indices(member) {
        assert_eq!(&body[at - 1..at], "\"");
        assert!(body[at + member.len()..].starts_with("}]"));
    }
    // Never on the current request, the last message.
    let last = body.rfind(r#"{"role":"user""#).unwrap();
    assert!(!body[last..].contains(member));
    let want = replayed.render_request(Format::Anthropic, SYSTEM_RULE, &current);
    assert_eq!(unmarked(&body, member), String::from_utf8(want).unwrap());
    markers
}

fn record(ts: u64, kind: &str, i: usize) -> String {
    format!("{{\"type\":\"{kind}\",\"ts_ms\":{ts},\"n\":{i},\"text\":\"x\\\"y\\n{i}\"}}\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn markers_are_few_on_existing_blocks_and_remove_to_the_contract_body(
        turns in prop::collection::vec((0usize..60, any::<bool>(), any::<bool>()), 1..30),
        stride in 1usize..40,
        one_hour in any::<bool>(),
    ) {
        let mut policy = CachePolicy::default();
        policy.stride = stride;
        policy.ttl = if one_hour { CacheTtl::OneHour } else { CacheTtl::FiveMinutes };
        let mut memory = CacheMemory::default();
        let mut log = String::new();
        let mut ts = 1_000u64;
        let mut i = 0;
        for (burst, late, garbage) in turns {
            log.push_str(&record(ts, "text_input", i));
            for _ in 0..burst {
                ts += 7;
                i += 1;
                log.push_str(&record(ts, "wm_event", i));
            }
            if late {
                // A record older than everything: every prefix changes.
                log.push_str(&record(ts / 3, "wm_event", i));
            }
            if garbage {
                log.push_str("not a record\n");
            }
            ts += 11;
            i += 1;
            log.push_str(&record(ts, "text_output", i));
            check(log.as_bytes(), &policy, &mut memory);
        }
    }
}

#[test]
fn an_empty_log_marks_only_the_system_block() {
    let mut memory = CacheMemory::default();
    assert_eq!(check(b"", &CachePolicy::default(), &mut memory), 1);
}

#[test]
fn the_next_turns_request_starts_with_the_previous_marked_prefix() {
    // Two turns in a row: the second request, markers removed, starts with
    // everything the first request's last marker covers.
    let policy = CachePolicy::default();
    let mut memory = CacheMemory::default();
    let current = CurrentRequest {
        text: "q",
        session_id: None,
    };
    let mut log = String::new();
    for i in 0..30 {
        log.push_str(&record(1_000 + i as u64, "wm_event", i));
    }
    let first = replay(log.as_bytes(), &ReplayOptions::default()).render_request_cached(
        SYSTEM_RULE,
        &current,
        &policy,
        &mut memory,
    );
    log.push_str(&record(5_000, "text_input", 99));
    log.push_str(&record(5_001, "text_output", 100));
    let second = replay(log.as_bytes(), &ReplayOptions::default()).render_request_cached(
        SYSTEM_RULE,
        &current,
        &policy,
        &mut memory,
    );
    let member = policy.ttl.member();
    let first = String::from_utf8(first).unwrap();
    let second = String::from_utf8(second).unwrap();
    let m = std::str::from_utf8(member).unwrap();
    let cut = first.rfind(m).unwrap();
    // The first request's prefix through its last marked block, markers
    // removed, is the second's (markers removed) too.
    let prefix = first[..cut].replace(m, "");
    assert!(second.replace(m, "").starts_with(&prefix));
    // The second marks its own last replayed message, two records later.
    assert!(second.rfind(m).unwrap() > cut);
}
