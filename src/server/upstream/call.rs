//! Calling the upstream model for a turn: the request sent with bounded
//! retries (exponential backoff with jitter, `retry-after` honoured, within
//! the turn's deadline), the answer read whole or relayed as a stream while
//! the client keeps up, and upstream errors mapped to the client's status.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::{StatusCode, header};
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::relay::Relay;

use super::{Answer, ApiKey, Provider, Step, UpstreamError, redact};
use crate::server::errors::ApiError;
use crate::server::sse::sse;

/// Most of an upstream error body read.
pub(crate) const MAX_ERROR_BODY: usize = 64 << 10;

/// The upstream a server calls: where, how, and how long it may take.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub(crate) client: reqwest::Client,
    /// The endpoint, checked at start.
    pub(crate) endpoint: reqwest::Url,
    pub(crate) provider: Provider,
    /// Every call's headers: the provider's, the key, `--upstream-header`s.
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) key: Option<ApiKey>,
    /// Retries after the first try.
    pub(crate) retries: u32,
    pub(crate) retry_min_delay: Duration,
    /// How long a call may take, retries included.
    pub(crate) timeout: Duration,
    /// Whether the endpoint is OpenAI's Responses API (`/v1/responses`).
    pub(crate) responses: bool,
}

/// Why an upstream call failed, before any of the answer was read.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
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

impl Upstream {
    pub(crate) fn timeout_error(&self) -> ApiError {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_timeout",
            format!(
                "the upstream did not answer within {} s",
                self.timeout.as_secs()
            ),
        )
    }

    pub(crate) fn call_error(&self, e: CallError) -> ApiError {
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
pub(crate) fn upstream_error(u: UpstreamError) -> ApiError {
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
pub(crate) fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    if let Some(u) = e.url() {
        s = s.replace(u.as_str(), "<upstream>");
    }
    s
}

impl Upstream {
    /// The same upstream's Responses API (`…/v1/responses` beside its
    /// `…/v1/chat/completions`): `None` for another provider or an
    /// endpoint whose Responses API is not known.
    pub(crate) fn responses(&self) -> Option<Upstream> {
        let path = self.endpoint.path().trim_end_matches('/');
        let base = match self.provider {
            Provider::OpenAi => path.strip_suffix("/chat/completions")?,
            Provider::Anthropic => return None,
        };
        let mut u = self.clone();
        u.endpoint.set_path(&format!("{base}/responses"));
        u.responses = true;
        Some(u)
    }

    /// Sends the request, retrying what may succeed on a later try.
    pub(crate) async fn call(
        &self,
        parts: &[Bytes],
        deadline: tokio::time::Instant,
    ) -> Result<reqwest::Response, CallError> {
        self.call_as(parts, deadline, None, None).await
    }

    /// [`call`](Self::call) with `key` instead of the server's own key,
    /// when given (a client's, forwarded): it goes in the provider's
    /// header, marked sensitive, and is redacted from errors like the
    /// server's.
    pub(crate) async fn call_as(
        &self,
        parts: &[Bytes],
        deadline: tokio::time::Instant,
        key: Option<&ApiKey>,
        beta: Option<&str>,
    ) -> Result<reqwest::Response, CallError> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let endpoint = self.endpoint.clone();
        let mut headers = match key {
            None => self.headers.clone(),
            Some(k) => {
                let mut h = self.headers.clone();
                h.extend(self.provider.headers(Some(k), &[]));
                h
            }
        };
        if let Some(b) = beta {
            merge_beta(&mut headers, b);
        }
        let redact_key = key.or(self.key.as_ref());
        let once = || async {
            let body = reqwest::Body::wrap_stream(futures_util::stream::iter(
                Vec::from(parts).into_iter().map(Ok::<_, Infallible>),
            ));
            let request = self
                .client
                .post(endpoint.clone())
                .headers(headers.clone())
                .header(header::CONTENT_LENGTH, len)
                .body(body);
            let counted = |status: String| {
                metrics::counter!("wmreplay_upstream_requests_total", "status" => status)
                    .increment(1);
            };
            let resp = match tokio::time::timeout_at(deadline, request.send()).await {
                Err(_) => {
                    counted("timeout".into());
                    return Err(CallError::Timeout);
                }
                Ok(Err(e)) if e.is_timeout() => {
                    counted("timeout".into());
                    return Err(CallError::Timeout);
                }
                Ok(Err(e)) => {
                    counted("unreachable".into());
                    return Err(CallError::Unreachable(without_url(&e)));
                }
                Ok(Ok(r)) => r,
            };
            let status = resp.status();
            counted(status.as_u16().to_string());
            if status.is_success() {
                return Ok(resp);
            }
            let headers = resp.headers().clone();
            let body = read_limited(resp, deadline).await;
            Err(CallError::Status(UpstreamError::from_response(
                status.as_u16(),
                &headers,
                &body,
                redact_key,
            )))
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.retry_min_delay)
            .with_max_delay(Duration::from_secs(30))
            .with_jitter()
            .with_max_times(self.retries as usize);
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
            metrics::counter!("wmreplay_upstream_retries_total").increment(1);
            tracing::warn!(error = ?e, wait_ms = wait.as_millis() as u64, "upstream call failed; retrying");
        })
        .await
    }
}

/// Up to [`MAX_ERROR_BODY`] of a response's body, by the deadline.
pub(crate) async fn read_limited(
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

impl Upstream {
    /// A non-streamed answer.
    /// The upstream's list of models (`GET /v1/models` beside its messages
    /// endpoint), as it answered it: its status and JSON body (at most
    /// 4 MiB), with the server's key or `key`.
    pub(crate) async fn models(
        &self,
        key: Option<&ApiKey>,
    ) -> Result<axum::response::Response, ApiError> {
        let mut url = self.endpoint.clone();
        let path = url.path().trim_end_matches('/').to_string();
        let models = match self.provider {
            Provider::Anthropic => path
                .strip_suffix("/messages")
                .map(|p| format!("{p}/models")),
            Provider::OpenAi => path
                .strip_suffix("/chat/completions")
                .map(|p| format!("{p}/models")),
        };
        let Some(models) = models else {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "the upstream is a full endpoint URL whose models list is not known",
            ));
        };
        url.set_path(&models);
        let mut headers = self.headers.clone();
        headers.remove(header::CONTENT_TYPE);
        if let Some(k) = key {
            headers.extend(self.provider.headers(Some(k), &[]));
            headers.remove(header::CONTENT_TYPE);
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let sent = tokio::time::timeout_at(deadline, self.client.get(url).headers(headers).send());
        let resp = match sent.await {
            Err(_) => return Err(self.timeout_error()),
            Ok(Err(e)) => return Err(self.call_error(CallError::Unreachable(without_url(&e)))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        loop {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Err(self.timeout_error()),
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(self.call_error(CallError::Unreachable(without_url(&e))));
                }
                Ok(Some(Ok(piece))) => {
                    body.extend_from_slice(&piece);
                    if body.len() > 4 << 20 {
                        return Err(ApiError::new(
                            StatusCode::BAD_GATEWAY,
                            "upstream_error",
                            "the upstream's list of models is larger than 4 MiB",
                        ));
                    }
                }
            }
        }
        let body = redact(&String::from_utf8_lossy(&body), key.or(self.key.as_ref()));
        let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        Ok(crate::server::errors::json_response(status, body))
    }

    /// The upstream's `count_tokens` (beside its messages endpoint) for
    /// `body`: its answer as it gave it, or `None` when it has none (a 404
    /// or 405, or an endpoint whose count is not known).
    pub(crate) async fn count_tokens(
        &self,
        body: Bytes,
        key: Option<&ApiKey>,
        beta: Option<&str>,
    ) -> Result<Option<axum::response::Response>, ApiError> {
        let mut url = self.endpoint.clone();
        let path = url.path().trim_end_matches('/').to_string();
        if self.provider != Provider::Anthropic || !path.ends_with("/messages") {
            return Ok(None);
        }
        url.set_path(&format!("{path}/count_tokens"));
        let mut headers = self.headers.clone();
        if let Some(k) = key {
            headers.extend(self.provider.headers(Some(k), &[]));
        }
        if let Some(b) = beta {
            merge_beta(&mut headers, b);
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        let sent = self.client.post(url).headers(headers).body(body).send();
        let resp = match tokio::time::timeout_at(deadline, sent).await {
            Err(_) => return Err(self.timeout_error()),
            Ok(Err(e)) => return Err(self.call_error(CallError::Unreachable(without_url(&e)))),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if matches!(status.as_u16(), 404 | 405) {
            return Ok(None);
        }
        let text = match tokio::time::timeout_at(deadline, resp.bytes()).await {
            Err(_) => return Err(self.timeout_error()),
            Ok(Err(e)) => return Err(self.call_error(CallError::Unreachable(without_url(&e)))),
            Ok(Ok(b)) => b,
        };
        let text = redact(
            &String::from_utf8_lossy(&text[..text.len().min(MAX_ERROR_BODY)]),
            key.or(self.key.as_ref()),
        );
        let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        Ok(Some(crate::server::errors::json_response(status, text)))
    }

    pub(crate) async fn read_whole(
        &self,
        resp: reqwest::Response,
        deadline: tokio::time::Instant,
    ) -> Result<Answer, ApiError> {
        let body = match tokio::time::timeout_at(deadline, resp.bytes()).await {
            Err(_) => return Err(self.timeout_error()),
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
                UpstreamError::from_error_object(e).redacted(self.key.as_ref()),
            ));
        }
        let mut answer = v
            .as_ref()
            .and_then(|v| match self.responses {
                true => super::responses::answer(v),
                false => self.provider.answer(v),
            })
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_bad_answer",
                    "the upstream's answer has no text in the provider's format",
                )
            })?;
        answer.raw = Some(body);
        Ok(answer)
    }

    /// The wait before retry `n` (0 for the first) of a stream that
    /// failed before any text: the calls' exponential backoff, with jitter.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let base = self.retry_min_delay.saturating_mul(1 << n.min(16));
        let base = base.min(Duration::from_secs(30));
        // Up to a quarter more, from the clock's low bits (no RNG needed).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        base + base.mul_f64((nanos % 1000) as f64 / 4000.0)
    }

    /// A streamed answer, read at the upstream's pace and relayed to the
    /// client while it keeps up (a client gone or too far behind is let go:
    /// `relay` becomes `None`). Once `cut` turns true (shutdown), the answer
    /// so far is returned with the stop reason `interrupted`.
    pub(crate) async fn read_stream(
        &self,
        resp: reqwest::Response,
        relay: &mut Option<Relay>,
        cut: &mut watch::Receiver<bool>,
    ) -> Result<Answer, Failure> {
        use eventsource_stream::Eventsource;
        let mut events = resp.bytes_stream().eventsource();
        let mut decoder = self.provider.stream();
        decoder.responses = self.responses;
        let idle = self.timeout;
        // Whether the upstream's own events went to the client.
        let mut relayed = false;
        loop {
            let next = tokio::select! {
                r = tokio::time::timeout(idle, events.next()) => r,
                _ = cut.wait_for(|c| *c) => {
                    let mut answer = decoder.into_answer();
                    answer.stop_reason = Some(INTERRUPTED.to_string());
                    return Ok(answer);
                }
            };
            let event = match next {
                Err(_) => {
                    return Err(Failure::Late(
                        self.timeout_error(),
                        decoder.into_answer().text,
                    ));
                }
                Ok(None) => {
                    return Err(Failure::Late(
                        ApiError::new(
                            StatusCode::BAD_GATEWAY,
                            "upstream_incomplete",
                            "the upstream's stream ended before the answer was complete",
                        ),
                        decoder.into_answer().text,
                    ));
                }
                Ok(Some(Err(e))) => {
                    return Err(Failure::Late(
                        ApiError::new(
                            StatusCode::BAD_GATEWAY,
                            "upstream_error",
                            format!(
                                "reading the upstream's stream: {}",
                                redact(&e.to_string(), self.key.as_ref())
                            ),
                        ),
                        decoder.into_answer().text,
                    ));
                }
                Ok(Some(Ok(ev))) => ev,
            };
            let step = decoder.event(&event.event, &event.data);
            // A client of the provider's own format gets the upstream's
            // events as they came (an error, in the server's words, after);
            // from the one that says how the answer stopped on, they are
            // held until the turn's records are written.
            if let Some(tx) = relay.as_mut().filter(|r| r.raw.is_some())
                && !matches!(step, Step::Error(_))
                && !(tx.drop_usage_chunk && is_usage_chunk(&event.data))
            {
                relayed = true;
                let piece = match self.responses {
                    true => raw_event(Provider::Anthropic, &event.event, &event.data),
                    false => raw_event(self.provider, &event.event, &event.data),
                };
                if matches!(step, Step::Done) || decoder.answer().stop_reason.is_some() {
                    tx.hold(piece);
                } else if !tx.send_paced(piece).await {
                    tracing::info!(
                        "the client stopped reading or fell behind; finishing the answer without it"
                    );
                    *relay = None;
                }
            }
            match step {
                Step::Text(t) => {
                    if let Some(tx) = relay.as_ref().filter(|r| r.raw.is_none())
                        && !tx.send_paced(sse("delta", &json!({ "text": t }))).await
                    {
                        tracing::info!(
                            "the client stopped reading or fell behind; finishing the answer without it"
                        );
                        *relay = None;
                    }
                }
                Step::Done => return Ok(decoder.into_answer()),
                Step::Error(e) => {
                    // Tried again only when the client has seen nothing of
                    // this answer.
                    let early = decoder.answer().text.is_empty()
                        && e.code.as_deref() == Some("overloaded_error")
                        && !relayed;
                    let e = upstream_error(e.redacted(self.key.as_ref()));
                    return Err(if early {
                        Failure::Early(e)
                    } else {
                        Failure::Late(e, decoder.into_answer().text)
                    });
                }
                Step::Nothing => {}
            }
        }
    }
}

/// Adds a client's `anthropic-beta` features to the call's (the server's
/// own, `--upstream-header anthropic-beta=…`, first), each once.
pub(crate) fn merge_beta(headers: &mut reqwest::header::HeaderMap, client: &str) {
    let name = reqwest::header::HeaderName::from_static("anthropic-beta");
    let mut features: Vec<String> = Vec::new();
    let ours = headers
        .get(&name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    for f in ours.split(',').chain(client.split(',')) {
        let f = f.trim();
        if !f.is_empty() && !features.iter().any(|g| g == f) {
            features.push(f.to_string());
        }
    }
    if let Ok(v) = reqwest::header::HeaderValue::from_str(&features.join(",")) {
        headers.insert(name, v);
    }
}

/// Whether an OpenAI chunk is the usage chunk: `usage` and no `choices`.
fn is_usage_chunk(data: &str) -> bool {
    // Cheap before exact: most chunks carry text, not usage.
    data.contains("\"usage\"")
        && serde_json::from_str::<serde_json::Value>(data).is_ok_and(|v| {
            v.get("choices")
                .and_then(serde_json::Value::as_array)
                .is_some_and(Vec::is_empty)
                && v.get("usage").is_some_and(|u| !u.is_null())
        })
}

/// An upstream event as the provider's SDKs read it: `event:` and `data:`
/// for Anthropic, `data:` alone for OpenAI.
pub(crate) fn raw_event(provider: super::Provider, event: &str, data: &str) -> Bytes {
    match provider {
        super::Provider::Anthropic => Bytes::from(format!("event: {event}\ndata: {data}\n\n")),
        super::Provider::OpenAi => Bytes::from(format!("data: {data}\n\n")),
    }
}

/// How a streamed answer failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Before any text (an overloaded model's first event): nothing was
    /// relayed, so the call may be made again.
    Early(ApiError),
    /// Anything else: the turn fails, with the text that had arrived (and
    /// was relayed) before it.
    Late(ApiError, String),
}

pub(crate) use super::INTERRUPTED;
