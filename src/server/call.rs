//! Calling the upstream model for a turn: the request sent with bounded
//! retries (exponential backoff with jitter, `retry-after` honoured, within
//! the turn's deadline), the answer read whole or relayed as a stream while
//! the client keeps up, and upstream errors mapped to the client's status.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::turn::{Input, MAX_ERROR_BODY, Outcome, sse};
use super::upstream::{Answer, Step, UpstreamError};
use super::writer::Line;
use super::{ApiError, AppState};

/// Why an upstream call failed, before any of the answer was read.
#[derive(Debug, Clone)]
pub(super) enum CallError {
    /// The request's deadline passed.
    Timeout,
    /// No connection, or it broke before the answer's headers.
    Unreachable(String),
    /// The upstream answered an error.
    Status(UpstreamError),
}

impl CallError {
    fn retryable(&self) -> bool {
        match self {
            CallError::Timeout => false,
            CallError::Unreachable(_) => true,
            CallError::Status(u) => u.retryable,
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            CallError::Status(u) => u.retry_after,
            _ => None,
        }
    }
}

impl AppState {
    fn timeout_error(&self) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            format!(
                "the upstream did not answer within {} s",
                self.cfg.upstream_timeout.as_secs()
            ),
        )
    }

    fn call_error(&self, e: CallError) -> ApiError {
        match e {
            CallError::Timeout => self.timeout_error(),
            CallError::Unreachable(m) => ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                format!("cannot reach the upstream: {m}"),
            ),
            CallError::Status(u) => upstream_error(u),
        }
    }
}

/// An upstream error answered to the client: a rate limit stays a 429 and
/// overload a 503 (with the upstream's `retry-after`), a timeout a 504,
/// anything else a 502; the body names the upstream's status and code.
pub(super) fn upstream_error(u: UpstreamError) -> ApiError {
    let status = match u.status {
        Some(429) => StatusCode::TOO_MANY_REQUESTS,
        Some(503 | 529) => StatusCode::SERVICE_UNAVAILABLE,
        Some(408 | 504) => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    let message = match u.status {
        Some(s) => format!("the upstream answered {s}: {}", u.message),
        None => format!("the upstream reported an error: {}", u.message),
    };
    let mut e = ApiError::new(status, "upstream_error", message);
    e.upstream_status = u.status;
    e.upstream_code = u.code;
    e.retry_after = u.retry_after;
    e
}

/// A reqwest error's text without its URL (which could carry credentials).
pub(super) fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<upstream>");
    }
    s
}

/// Sends the request, retrying what may succeed on a later try.
pub(super) async fn call(
    state: &AppState,
    parts: &[Bytes],
    deadline: tokio::time::Instant,
) -> Result<reqwest::Response, CallError> {
    let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let provider = state.cfg.provider;
    let endpoint = state.upstream.clone().expect("a turn has an upstream");
    let once = || async {
        let body = reqwest::Body::wrap_stream(futures_util::stream::iter(
            Vec::from(parts).into_iter().map(Ok::<_, Infallible>),
        ));
        let request = state
            .client
            .post(endpoint.clone())
            .headers(provider.headers(state.cfg.api_key.as_ref()))
            .header(header::CONTENT_LENGTH, len)
            .body(body);
        let resp = match tokio::time::timeout_at(deadline, request.send()).await {
            Err(_) => return Err(CallError::Timeout),
            Ok(Err(e)) if e.is_timeout() => return Err(CallError::Timeout),
            Ok(Err(e)) => return Err(CallError::Unreachable(without_url(&e))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let body = read_limited(resp, deadline).await;
        Err(CallError::Status(UpstreamError::from_response(
            status.as_u16(),
            &headers,
            &body,
            state.cfg.api_key.as_ref(),
        )))
    };
    let backoff = ExponentialBuilder::default()
        .with_min_delay(state.cfg.retry_min_delay)
        .with_max_delay(Duration::from_secs(30))
        .with_jitter()
        .with_max_times(state.cfg.upstream_retries as usize);
    once.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(CallError::retryable)
        .adjust(|e, backoff| {
            // The upstream's own wait, if it gave one; never past the
            // deadline (then the error is answered now, with its wait).
            let wait = e.retry_after().unwrap_or(backoff?);
            (tokio::time::Instant::now() + wait < deadline).then_some(wait)
        })
        .notify(|e, wait| {
            tracing::warn!(error = ?e, wait_ms = wait.as_millis() as u64, "upstream call failed; retrying");
        })
        .await
}

/// Up to [`MAX_ERROR_BODY`] of a response's body, by the deadline.
pub(super) async fn read_limited(
    resp: reqwest::Response,
    deadline: tokio::time::Instant,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    while out.len() < MAX_ERROR_BODY {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(Ok(b))) => out.extend_from_slice(&b[..b.len().min(MAX_ERROR_BODY - out.len())]),
            _ => break,
        }
    }
    out
}

/// Calls the upstream, reads its whole answer (relaying a stream to the
/// client while the client keeps up), appends it, and says how it ended.
pub(super) async fn run_turn(
    state: &Arc<AppState>,
    input: &Input,
    parts: Vec<Bytes>,
    stats: Value,
    relay: Option<mpsc::Sender<Bytes>>,
    started: oneshot::Sender<Result<(), ApiError>>,
) -> Outcome {
    let deadline = tokio::time::Instant::now() + state.cfg.upstream_timeout;
    let began = Instant::now();
    let resp = match call(state, &parts, deadline).await {
        Ok(r) => r,
        Err(e) => {
            let e = state.call_error(e);
            tracing::warn!(code = e.code, status = e.status.as_u16(), message = %e.message, "turn failed");
            let _ = started.send(Err(e.clone()));
            return Err(e);
        }
    };
    let answer = if relay.is_some() {
        let _ = started.send(Ok(()));
        read_stream(state, resp, relay.clone()).await
    } else {
        read_whole(state, resp, deadline).await
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(code = e.code, message = %e.message, "turn failed");
            if let Some(tx) = &relay {
                let _ = tx.try_send(sse("error", &e.json()));
            }
            return Err(e);
        }
    };
    let provider = state.cfg.provider;
    let unusual = answer
        .stop_reason
        .as_deref()
        .filter(|r| !provider.normal_stop(r));
    let line = Line::turn(
        "text_output",
        input.session_id.as_deref(),
        &answer.text,
        unusual,
    );
    let appended = match state.writer() {
        Ok(w) => w.append(vec![line]).await,
        Err(e) => Err(e),
    };
    if let Err(e) = appended {
        let e = state.append_failed(&e);
        if let Some(tx) = &relay {
            let _ = tx.try_send(sse("error", &e.json()));
        }
        return Err(e);
    }
    state.count_usage(&answer.usage);
    tracing::info!(
        input_tokens = answer.usage.input_tokens,
        cache_read_input_tokens = answer.usage.cache_read_input_tokens,
        cache_creation_input_tokens = answer.usage.cache_creation_input_tokens,
        output_tokens = answer.usage.output_tokens,
        stop_reason = answer.stop_reason.as_deref().unwrap_or(""),
        ms = began.elapsed().as_millis() as u64,
        "turn answered"
    );
    let mut out = json!({
        "text": answer.text,
        "stop_reason": answer.stop_reason,
        "usage": answer.usage.to_json(),
        "stats": stats,
    });
    if let Some(u) = &answer.provider_usage {
        out["provider_usage"] = u.clone();
    }
    if let Some(tx) = &relay {
        let _ = tx.try_send(sse("done", &out));
    }
    Ok(out)
}

/// A non-streamed answer.
pub(super) async fn read_whole(
    state: &AppState,
    resp: reqwest::Response,
    deadline: tokio::time::Instant,
) -> Result<Answer, ApiError> {
    let body = match tokio::time::timeout_at(deadline, resp.bytes()).await {
        Err(_) => return Err(state.timeout_error()),
        Ok(Err(e)) => {
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                format!("reading the upstream's answer: {}", without_url(&e)),
            ));
        }
        Ok(Ok(b)) => b,
    };
    let v: Option<Value> = serde_json::from_slice(&body).ok();
    if let Some(e) = v
        .as_ref()
        .and_then(|v| v.get("error"))
        .filter(|e| e.is_object())
    {
        return Err(upstream_error(
            UpstreamError::from_error_object(e).redacted(state.cfg.api_key.as_ref()),
        ));
    }
    v.as_ref()
        .and_then(|v| state.cfg.provider.answer(v))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_bad_answer",
                "the upstream's answer has no text in the provider's format",
            )
        })
}

/// A streamed answer, relayed while the client reads. A client that reads
/// nothing for `--write-timeout` (or has gone) is let go; the answer is
/// still read to its end.
pub(super) async fn read_stream(
    state: &AppState,
    resp: reqwest::Response,
    mut relay: Option<mpsc::Sender<Bytes>>,
) -> Result<Answer, ApiError> {
    use eventsource_stream::Eventsource;
    let mut events = resp.bytes_stream().eventsource();
    let mut decoder = state.cfg.provider.stream();
    let idle = state.cfg.upstream_timeout;
    loop {
        let event = match tokio::time::timeout(idle, events.next()).await {
            Err(_) => return Err(state.timeout_error()),
            Ok(None) => {
                return Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_incomplete",
                    "the upstream's stream ended before the answer was complete",
                ));
            }
            Ok(Some(Err(e))) => {
                return Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_error",
                    format!(
                        "reading the upstream's stream: {}",
                        super::upstream::redact(&e.to_string(), state.cfg.api_key.as_ref())
                    ),
                ));
            }
            Ok(Some(Ok(ev))) => ev,
        };
        match decoder.event(&event.event, &event.data) {
            Step::Text(t) => {
                if let Some(tx) = &relay {
                    let piece = sse("delta", &json!({ "text": t }));
                    if tx
                        .send_timeout(piece, state.cfg.write_timeout)
                        .await
                        .is_err()
                    {
                        tracing::info!(
                            "the client stopped reading; finishing the answer without it"
                        );
                        relay = None;
                    }
                }
            }
            Step::Done => return Ok(decoder.into_answer()),
            Step::Error(e) => {
                return Err(upstream_error(e.redacted(state.cfg.api_key.as_ref())));
            }
            Step::Nothing => {}
        }
    }
}
