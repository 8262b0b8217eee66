//! A mock OpenAI-compatible embeddings API (`POST /v1/embeddings`) whose
//! vectors are a deterministic function of the text: its words, lowercased
//! and stripped of a plural `s`, hashed into dimensions 8 to 63 of 64; a
//! few groups of synonyms (which a lexical search cannot match: `car`,
//! `automobile`, `vehicle`) each have a dimension of their own below 8. It
//! records every request, and answers as scripted: errors, slow answers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Dimensions of the mock's vectors.
pub const DIMS: usize = 64;

/// The groups of synonyms, each one dimension.
const SYNONYMS: [&[&str]; 4] = [
    &["car", "automobile", "vehicle"],
    &["doctor", "physician"],
    &["hike", "hiking", "trek", "trekking"],
    &["sofa", "couch", "settee"],
];

/// How the mock answers a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Ok,
    /// An error status (with `retry-after: 0` for a 429).
    Fail(u16),
    /// Waits this many ms, then answers.
    Slow(u64),
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Request {
    pub model: String,
    pub input: Vec<String>,
    pub dimensions: Option<u64>,
    pub authorization: Option<String>,
    /// Answered with vectors (not an error).
    pub ok: bool,
}

#[derive(Clone, Default)]
pub struct Embeddings {
    /// Answers for the next requests, in order; then `mode`.
    pub script: Arc<Mutex<VecDeque<Answer>>>,
    pub mode: Arc<Mutex<Option<Answer>>>,
    pub seen: Arc<Mutex<Vec<Request>>>,
}

impl Embeddings {
    /// Answers every request so from now on.
    pub fn set(&self, a: Answer) {
        *self.mode.lock().unwrap() = Some(a);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.seen.lock().unwrap().clone()
    }

    /// Texts embedded so far (queries included), in requests answered.
    pub fn texts(&self) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.ok)
            .map(|r| r.input.len())
            .sum()
    }
}

/// The mock's vector of `text`.
pub fn vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.0f32; DIMS];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut w = w.to_lowercase();
        if w.len() > 3 && w.ends_with('s') {
            w.pop();
        }
        let dim = match SYNONYMS.iter().position(|g| g.contains(&w.as_str())) {
            Some(g) => g,
            None => {
                // FNV-1a.
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in w.bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
                }
                8 + (h % (DIMS as u64 - 8)) as usize
            }
        };
        v[dim] += 1.0;
    }
    v
}

pub async fn handler(
    State(e): State<Embeddings>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let input: Vec<String> = match &v["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().unwrap_or("").to_string())
            .collect(),
        _ => Vec::new(),
    };
    let next = e.script.lock().unwrap().pop_front();
    let answer = next
        .or_else(|| e.mode.lock().unwrap().clone())
        .unwrap_or(Answer::Ok);
    e.seen.lock().unwrap().push(Request {
        model: v["model"].as_str().unwrap_or("").to_string(),
        input: input.clone(),
        dimensions: v["dimensions"].as_u64(),
        authorization: headers
            .get("authorization")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string),
        ok: !matches!(answer, Answer::Fail(_)),
    });
    match answer {
        Answer::Fail(status) => {
            let body = json!({"error": {"message": "the mock is down", "type": "server_error"}});
            let mut r = (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body.to_string(),
            )
                .into_response();
            if status == 429 {
                r.headers_mut().insert("retry-after", "0".parse().unwrap());
            }
            return r;
        }
        Answer::Slow(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Answer::Ok => {}
    }
    let data: Vec<Value> = input
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t)}))
        .collect();
    let body = json!({"object": "list", "data": data, "model": v["model"]});
    ([("content-type", "application/json")], body.to_string()).into_response()
}

/// Starts a mock embeddings API; returns its base URL.
pub async fn start() -> (String, Embeddings) {
    let e = Embeddings::default();
    let app = Router::new()
        .route("/v1/embeddings", post(handler))
        .with_state(e.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), e)
}

/// [`start`] on a runtime of its own, for tests without one: the mock
/// serves until the returned runtime is dropped.
pub fn start_blocking() -> (String, Embeddings, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (url, e) = rt.block_on(start());
    (url, e, rt)
}
