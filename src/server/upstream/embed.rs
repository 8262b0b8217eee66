//! The embedding model hybrid search calls ([`HttpEmbedder`], the
//! engine's [`Embedder`] over HTTP): an OpenAI-compatible
//! `POST {URL}/v1/embeddings` with `{"model", "input": [texts…]}` (and
//! `"dimensions"` when asked for), which OpenAI, vLLM, Ollama, llama.cpp's
//! server and Hugging Face TEI all serve. Each call is retried like the
//! model's (rate limits, overload and connection failures, with
//! exponential backoff and jitter, `retry-after` honoured, within the
//! call's deadline); redirects are never followed and the key never
//! logged.
//!
//! The calls run on a small runtime of the embedder's own, so that the
//! engine's blocking threads (a search's, a background catch-up's) can
//! wait for them whatever runtime, if any, the process runs.

use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::call::{read_limited, without_url};
use super::{ApiKey, UpstreamError};
use crate::search::{EmbedError, Embedder, HybridOptions};

/// Largest answer read: 64 texts of 4096 dimensions take about 6 MB.
const MAX_ANSWER: usize = 64 << 20;

/// Where and how hybrid search embeds (`--embed-upstream`, `--embed-model`,
/// `--embed-key-env`, `--embed-dimensions`, `--embed-timeout`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EmbedConfig {
    /// The API's base URL, or one ending in `/v1` or `/v1/embeddings`.
    pub upstream: String,
    /// The model's name, as the API knows it.
    pub model: String,
    /// Sent as `Authorization: Bearer KEY`, if any.
    pub api_key: Option<ApiKey>,
    /// The vectors' length asked for (`"dimensions"`; OpenAI's
    /// `text-embedding-3` models shorten theirs), if any.
    pub dimensions: Option<u32>,
    /// Times a failed call is tried again. Default 2.
    pub retries: u32,
    /// The first retry's wait (doubling, up to 30 s), unless the API's
    /// `retry-after` says otherwise. Default 500 ms.
    pub retry_min_delay: Duration,
    /// Batches, concurrency, timeouts and how long a search waits for the
    /// records appended to be embedded (250 ms here: a turn never waits
    /// longer; they are embedded on in the background).
    pub hybrid: HybridOptions,
}

impl EmbedConfig {
    /// The API's key as `--embed-key-env` reads it: from the variable
    /// `var` (`""`: none), or without one from `OPENAI_API_KEY` when it is
    /// set. `Err` names a variable that is not set or is empty.
    pub fn key_from_env(var: Option<&str>) -> Result<Option<ApiKey>, String> {
        let read = |v: &str| std::env::var(v).ok().filter(|k| !k.is_empty()).map(ApiKey);
        match var {
            Some("") => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| v.to_string()),
            None => Ok(read("OPENAI_API_KEY")),
        }
    }

    /// `model` at `upstream`, the other settings by default.
    pub fn new(upstream: impl Into<String>, model: impl Into<String>) -> EmbedConfig {
        EmbedConfig {
            upstream: upstream.into(),
            model: model.into(),
            api_key: None,
            dimensions: None,
            retries: 2,
            retry_min_delay: Duration::from_millis(500),
            hybrid: HybridOptions {
                wait: Some(Duration::from_millis(250)),
                ..HybridOptions::default()
            },
        }
    }

    /// The endpoint called: `URL/v1/embeddings`, or the URL itself when it
    /// ends in `/embeddings`, or `URL/embeddings` when it ends in `/v1`.
    pub fn endpoint(&self) -> Result<reqwest::Url, String> {
        let s = &self.upstream;
        let mut u = reqwest::Url::parse(s)
            .map_err(|e| format!("--embed-upstream {s:?} is not a URL: {e}"))?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
            return Err(format!(
                "--embed-upstream {s:?}: an http or https URL with a host is expected"
            ));
        }
        if u.query().is_some() || u.fragment().is_some() {
            return Err(format!(
                "--embed-upstream {s:?}: a query or fragment is not allowed"
            ));
        }
        let path = u.path().trim_end_matches('/').to_string();
        let path = if path.ends_with("/embeddings") {
            path
        } else if path.ends_with("/v1") {
            format!("{path}/embeddings")
        } else {
            format!("{path}/v1/embeddings")
        };
        u.set_path(&path);
        Ok(u)
    }

    /// Whether the settings can be used.
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.endpoint()?;
        if self.model.trim().is_empty() {
            return Err("--embed-model is empty".into());
        }
        if self.dimensions == Some(0) {
            return Err("--embed-dimensions must be at least 1".into());
        }
        let h = &self.hybrid;
        if h.batch == 0 || h.concurrency == 0 || h.max_text_bytes == 0 {
            return Err(
                "an embedding batch, its concurrency and a text's length must be at least 1".into(),
            );
        }
        if h.query_timeout.is_zero() || h.batch_timeout.is_zero() {
            return Err("--embed-timeout must be more than 0".into());
        }
        Ok(())
    }
}

/// The embedder `cfg` describes, if any.
pub(crate) fn embedder_for(cfg: Option<&EmbedConfig>) -> Result<Option<Arc<dyn Embedder>>, String> {
    match cfg {
        None => Ok(None),
        Some(e) => Ok(Some(Arc::new(HttpEmbedder::new(e)?))),
    }
}

/// Why one try failed.
#[derive(Debug, Clone)]
enum Failure {
    Timeout,
    Unreachable(String),
    Status(UpstreamError),
    /// A 200 whose body is not the API's answer.
    Bad(String),
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Unreachable(_) => true,
            Failure::Status(u) => u.retryable,
            Failure::Timeout | Failure::Bad(_) => false,
        }
    }
}

/// What every call shares.
#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    endpoint: reqwest::Url,
    model: String,
    dimensions: Option<u32>,
    key: Option<ApiKey>,
    retries: u32,
    retry_min_delay: Duration,
}

/// The OpenAI-compatible embeddings API as an [`Embedder`].
#[derive(Debug)]
pub struct HttpEmbedder {
    client: Arc<Client>,
    /// `model`, or `model@dimensions` when they are asked for.
    name: String,
    runtime: Option<tokio::runtime::Runtime>,
}

impl HttpEmbedder {
    /// An embedder for `cfg` (checked; nothing is called yet).
    pub fn new(cfg: &EmbedConfig) -> Result<HttpEmbedder, String> {
        cfg.validate()?;
        // The process's TLS provider, as the server installs it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Nagle off, as reqwest has it by default: said, not assumed.
            .tcp_nodelay(true)
            .user_agent(concat!("wmreplay/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wmreplay-embed-http")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the embedding client's runtime: {e}"))?;
        Ok(HttpEmbedder {
            name: match cfg.dimensions {
                Some(d) => format!("{}@{d}", cfg.model),
                None => cfg.model.clone(),
            },
            client: Arc::new(Client {
                http,
                endpoint: cfg.endpoint()?,
                model: cfg.model.clone(),
                dimensions: cfg.dimensions,
                key: cfg.api_key.clone(),
                retries: cfg.retries,
                retry_min_delay: cfg.retry_min_delay,
            }),
            runtime: Some(runtime),
        })
    }
}

impl Drop for HttpEmbedder {
    fn drop(&mut self) {
        // Without waiting: this may be dropped on another runtime's thread.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Embedder for HttpEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn embed(
        &self,
        texts: &[String],
        deadline: std::time::Instant,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let Some(rt) = &self.runtime else {
            return Err(EmbedError::failed("the embedding client was stopped"));
        };
        let mut body = json!({ "model": self.client.model, "input": texts });
        if let Some(d) = self.client.dimensions {
            body["dimensions"] = json!(d);
        }
        let body = Bytes::from(body.to_string());
        let n = texts.len();
        let client = self.client.clone();
        let deadline = tokio::time::Instant::from_std(deadline);
        let (tx, rx) = std::sync::mpsc::channel();
        // Spawned and waited for (not `block_on`): callable from any thread.
        rt.spawn(async move {
            let _ = tx.send(client.call(body, n, deadline).await);
        });
        rx.recv()
            .unwrap_or_else(|_| Err(EmbedError::failed("the embedding call stopped")))
    }
}

impl Client {
    async fn call(
        &self,
        body: Bytes,
        n: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let once = || self.once(body.clone(), n, deadline);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.retry_min_delay)
            .with_max_delay(Duration::from_secs(30))
            .with_jitter()
            .with_max_times(self.retries as usize);
        let r = once
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(Failure::retryable)
            .adjust(|e, backoff| {
                let asked = match e {
                    Failure::Status(u) => u.retry_after,
                    _ => None,
                };
                let wait = asked.or(backoff)?;
                (tokio::time::Instant::now() + wait < deadline).then_some(wait)
            })
            .notify(|e, wait| {
                metrics::counter!("wmreplay_embed_retries_total").increment(1);
                tracing::warn!(error = ?e, wait_ms = wait.as_millis() as u64, "embedding call failed; retrying");
            })
            .await;
        r.map_err(|e| match e {
            Failure::Timeout => EmbedError::failed("the embedding API did not answer in time"),
            Failure::Unreachable(m) => {
                EmbedError::failed(format!("cannot reach the embedding API: {m}"))
            }
            Failure::Bad(m) => EmbedError::failed(format!("the embedding API's answer: {m}")),
            Failure::Status(u) => {
                let m = format!(
                    "the embedding API answered {}: {}",
                    u.status.unwrap_or(0),
                    u.message
                );
                if matches!(u.status, Some(400 | 413 | 422)) {
                    EmbedError::refused(m)
                } else {
                    EmbedError::failed(m)
                }
            }
        })
    }

    async fn once(
        &self,
        body: Bytes,
        n: usize,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<Vec<f32>>, Failure> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(k) = &self.key
            && let Ok(mut v) = header::HeaderValue::from_str(&format!("Bearer {}", k.0))
        {
            v.set_sensitive(true);
            request = request.header(header::AUTHORIZATION, v);
        }
        let counted = |status: String| {
            metrics::counter!("wmreplay_embed_requests_total", "status" => status).increment(1);
        };
        let resp = match tokio::time::timeout_at(deadline, request.send()).await {
            Err(_) => {
                counted("timeout".into());
                return Err(Failure::Timeout);
            }
            Ok(Err(e)) if e.is_timeout() => {
                counted("timeout".into());
                return Err(Failure::Timeout);
            }
            Ok(Err(e)) => {
                counted("unreachable".into());
                return Err(Failure::Unreachable(without_url(&e)));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        counted(status.as_u16().to_string());
        if !status.is_success() {
            let headers = resp.headers().clone();
            let body = read_limited(resp, deadline).await;
            return Err(Failure::Status(UpstreamError::from_response(
                status.as_u16(),
                &headers,
                &body,
                self.key.as_ref(),
            )));
        }
        let mut body = Vec::new();
        let mut stream = resp.bytes_stream();
        loop {
            match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Err(Failure::Timeout),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(Failure::Unreachable(without_url(&e))),
                Ok(Some(Ok(b))) => {
                    if body.len() + b.len() > MAX_ANSWER {
                        return Err(Failure::Bad(format!("longer than {MAX_ANSWER} bytes")));
                    }
                    body.extend_from_slice(&b);
                }
            }
        }
        vectors(&body, n).map_err(Failure::Bad)
    }
}

/// The vectors of an answer `{"data":[{"embedding":[…],"index":i},…]}`,
/// in the order of the texts (by `index` when given), `n` of them.
fn vectors(body: &[u8], n: usize) -> Result<Vec<Vec<f32>>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON ({e})"))?;
    let data = v
        .get("data")
        .and_then(Value::as_array)
        .ok_or("no `data` array")?;
    let mut out: Vec<(usize, Vec<f32>)> = Vec::with_capacity(data.len());
    for (i, d) in data.iter().enumerate() {
        let at = d
            .get("index")
            .and_then(Value::as_u64)
            .map_or(i, |x| x as usize);
        let e = d
            .get("embedding")
            .and_then(Value::as_array)
            .ok_or("an item without an `embedding` array of numbers")?;
        let v: Option<Vec<f32>> = e.iter().map(|x| x.as_f64().map(|f| f as f32)).collect();
        out.push((
            at,
            v.ok_or("an embedding holds something other than numbers")?,
        ));
    }
    out.sort_by_key(|x| x.0);
    if out.len() != n || out.iter().enumerate().any(|(i, x)| x.0 != i) {
        return Err(format!("{} vectors for {n} texts", out.len()));
    }
    Ok(out.into_iter().map(|x| x.1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_found_from_a_base_a_v1_or_a_full_url() {
        for (url, want) in [
            (
                "http://127.0.0.1:11434",
                "http://127.0.0.1:11434/v1/embeddings",
            ),
            ("http://h:8080/", "http://h:8080/v1/embeddings"),
            (
                "https://api.openai.com/v1",
                "https://api.openai.com/v1/embeddings",
            ),
            (
                "https://api.openai.com/v1/",
                "https://api.openai.com/v1/embeddings",
            ),
            ("http://h/v1/embeddings", "http://h/v1/embeddings"),
            ("http://h/proxy", "http://h/proxy/v1/embeddings"),
        ] {
            let got = EmbedConfig::new(url, "m").endpoint().unwrap();
            assert_eq!(got.as_str(), want, "{url}");
        }
        let e = EmbedConfig::new("ftp://h", "m").endpoint().unwrap_err();
        assert!(e.starts_with("--embed-upstream"), "{e}");
        assert!(EmbedConfig::new("http://h", " ").validate().is_err());
    }

    #[test]
    fn an_answer_is_read_in_the_order_of_its_indexes() {
        let body = br#"{"object":"list","data":[{"index":1,"embedding":[0.5,1]},{"index":0,"embedding":[2,3]}],"model":"m"}"#;
        assert_eq!(vectors(body, 2).unwrap(), [vec![2.0, 3.0], vec![0.5, 1.0]]);
        assert!(vectors(body, 3).is_err());
        assert!(vectors(br#"{"data":[{"embedding":"AAAA"}]}"#, 1).is_err());
        assert!(vectors(b"<html>", 1).is_err());
    }
}
