//! Streams without stalls: a streamed answer reaches the client as soon as
//! the upstream sends its last event, on every route that streams.
//!
//! A stall of ~40 ms is what a socket with Nagle's algorithm on does when
//! it meets a peer's delayed ACK: a small write waits for the ACK of the
//! one before. It is counted, not timed once: fifty streamed turns, from an
//! instant upstream and from one sending an event every millisecond (the
//! mock's sockets with Nagle off), and for each the time from the upstream handing its
//! last event to the socket to the client reading the stream's end. A
//! healthy relay takes well under a millisecond; a stalled one 40.

use crate::mock;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mock::*;
use serde_json::{Value, json};
use wmreplay::server::Provider;

/// Longer than any scheduling hiccup of a loaded CI machine is likely to
/// be, shorter than a delayed ACK (40 ms on Linux).
const STALL: Duration = Duration::from_millis(25);
const TURNS: usize = 50;

/// Sends `body` streamed `TURNS` times; how many ended a stall or more after
/// the upstream's last event.
async fn stalls(path: &str, provider: Provider, pace: u64, body: impl Fn(usize) -> Value) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let log = example_log(dir.path());
    let (up, mock) = start_mock(provider, Mode::SlowStream(pace)).await;
    let server = start(config(&log, Some(&up), provider)).await;
    let client = client();
    let mut late = Vec::new();
    for i in 0..TURNS {
        let r = client
            .post(format!("{}{path}", server.url))
            .header("content-type", "application/json")
            .body(body(i).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let mut s = r.bytes_stream();
        let mut got = Vec::new();
        while let Some(b) = s.next().await {
            got.extend_from_slice(&b.unwrap());
        }
        let end = Instant::now();
        let sent = *mock.stream_ends.lock().unwrap().last().expect("streamed");
        assert_eq!(mock.stream_ends.lock().unwrap().len(), i + 1, "{path}");
        let text = String::from_utf8(got).unwrap();
        assert!(text.contains("data: "), "{path}: {text}");
        let gap = end.saturating_duration_since(sent);
        if gap >= STALL {
            late.push(gap.as_millis());
        }
    }
    server.stop().await;
    eprintln!(
        "{path}, an event every {pace} ms: {} of {TURNS} stalled ({late:?} ms)",
        late.len()
    );
    late.len()
}

/// A route, the provider behind it, and its streamed request of turn `i`.
type Route = (&'static str, Provider, fn(usize) -> Value);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_turn_ends_when_the_upstreams_stream_ends_on_every_route() {
    let routes: [Route; 4] = [
        (
            "/respond",
            Provider::Anthropic,
            |i| json!({"text": format!("question {i}"), "stream": true}),
        ),
        ("/anthropic/v1/messages", Provider::Anthropic, |i| {
            json!({"model": "m", "max_tokens": 50, "stream": true,
                   "messages": [{"role": "user", "content": format!("question {i}")}]})
        }),
        ("/openai/v1/chat/completions", Provider::OpenAi, |i| {
            json!({"model": "m", "stream": true,
                   "messages": [{"role": "user", "content": format!("question {i}")}]})
        }),
        (
            "/openai/v1/responses",
            Provider::OpenAi,
            |i| json!({"model": "m", "stream": true, "input": format!("question {i}")}),
        ),
    ];
    let mut failed = Vec::new();
    // An instant upstream (its events back to back) and one at a model's
    // pace.
    for pace in [0, 1] {
        for (path, provider, body) in routes {
            let n = stalls(path, provider, pace, body).await;
            // One or two late ends can be the machine; a stalling relay is
            // late on most turns.
            if n > 2 {
                failed.push(format!("{path}, pace {pace} ms: {n} of {TURNS}"));
            }
        }
    }
    assert!(failed.is_empty(), "streams stalled: {failed:?}");
}
