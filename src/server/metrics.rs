//! `GET /metrics`: what the server has done, in the Prometheus text format
//! (the `metrics` facade, rendered by `metrics-exporter-prometheus`), behind
//! the same bearer token as the other routes.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wmreplay_turns_total` | counter | `outcome` (`answered`, `failed`) |
//! | `wmreplay_turn_duration_seconds` | histogram | |
//! | `wmreplay_upstream_requests_total` | counter | `status` (an HTTP status, `timeout`, `unreachable`) |
//! | `wmreplay_upstream_retries_total` | counter | |
//! | `wmreplay_embed_requests_total` | counter | `status` (as the model's, for the embedding model of hybrid search) |
//! | `wmreplay_embed_retries_total` | counter | |
//! | `wmreplay_tokens_total` | counter | `kind` (`input`, `cache_read`, `cache_write`, `output`) |
//! | `wmreplay_tool_calls_total` | counter | `tool`, `outcome` (`ok`, `error`) |
//! | `wmreplay_records_written_total` | counter | |
//! | `wmreplay_live_bytes` | gauge | |
//! | `wmreplay_logs_open` | gauge | |
//! | `wmreplay_log_evictions_total` | counter | |
//! | `wmreplay_jetstream_publish_duration_seconds` | histogram | |
//! | `wmreplay_jetstream_conflicts_total` | counter | |
//! | `wmreplay_jetstream_caught_up_messages_total` | counter | |
//! | `wmreplay_jetstream_cache_age_seconds` | gauge | `log` |
//!
//! The gauges are set as the page is made: a log's `log`-labelled gauge
//! is on it while the log is open (not after it is closed or evicted, so
//! thousands of logs seen over a day do not pile up on the page).
//!
//! The recorder is the process's: servers started in one process share it.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use crate::server::app::logs::{Logs, Server};
use crate::server::errors::ApiError;

/// Histogram buckets, in seconds: from a cached append to a long answer.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// How long a gauge not set again stays on the page: longer than making
/// the page takes, shorter than any scrape interval.
const GAUGE_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's recorder, installed on first use; `None` when another
/// recorder was installed first (by a program embedding the server).
pub(crate) fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            // Every gauge is set as the page is made, for the logs open
            // then: one left unset (a log closed since) leaves the page.
            let builder = PrometheusBuilder::new()
                .set_buckets(SECONDS)
                .ok()?
                .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE));
            match builder.install_recorder() {
                Ok(h) => {
                    describe();
                    Some(h)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "another metrics recorder is installed; /metrics is off");
                    None
                }
            }
        })
        .as_ref()
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!("wmreplay_turns_total", "Turns run to an outcome.");
    describe_histogram!(
        "wmreplay_turn_duration_seconds",
        Unit::Seconds,
        "A turn from its input appended to its answer appended."
    );
    describe_counter!(
        "wmreplay_upstream_requests_total",
        "Calls to the model, by the status answered."
    );
    describe_counter!(
        "wmreplay_upstream_retries_total",
        "Calls to the model made again after a failure."
    );
    describe_counter!(
        "wmreplay_embed_requests_total",
        "Calls to the embedding model of hybrid search, by the status answered."
    );
    describe_counter!(
        "wmreplay_embed_retries_total",
        "Calls to the embedding model made again after a failure."
    );
    describe_counter!(
        "wmreplay_tokens_total",
        "Tokens the model reported: input at the base rate, read from and written to the cache, output."
    );
    describe_counter!("wmreplay_tool_calls_total", "Tool calls the server ran.");
    describe_counter!("wmreplay_records_written_total", "Lines appended to logs.");
    describe_gauge!(
        "wmreplay_live_bytes",
        Unit::Bytes,
        "Rendered bytes the open logs' live states hold."
    );
    describe_gauge!("wmreplay_logs_open", "Logs with a live state.");
    describe_counter!(
        "wmreplay_log_evictions_total",
        "Live states dropped (least recently used, or idle)."
    );
    describe_histogram!(
        "wmreplay_jetstream_publish_duration_seconds",
        Unit::Seconds,
        "A batch published to JetStream, to its ack."
    );
    describe_counter!(
        "wmreplay_jetstream_conflicts_total",
        "Publishes that met another replica's write first (caught up and published again)."
    );
    describe_counter!(
        "wmreplay_jetstream_caught_up_messages_total",
        "Messages of other replicas applied to the local caches."
    );
    describe_gauge!(
        "wmreplay_jetstream_cache_age_seconds",
        Unit::Seconds,
        "How long ago each open log's cache last matched its stream."
    );
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(server): State<Arc<Server>>) -> Result<Response, ApiError> {
    let Some(handle) = install() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics_unavailable",
            "another metrics recorder is installed in this process",
        ));
    };
    let states: Vec<_> = match &server.logs {
        Logs::One(st) => vec![st.clone()],
        Logs::Dir(dir) => {
            let states = dir.states.lock().unwrap_or_else(|p| p.into_inner());
            states.iter().map(|(_, st)| st.clone()).collect()
        }
    };
    let live: u64 = states
        .iter()
        .map(|s| s.live_bytes.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    metrics::gauge!("wmreplay_live_bytes").set(live as f64);
    metrics::gauge!("wmreplay_logs_open").set(states.len() as f64);
    let now = crate::append::now_ms();
    for st in &states {
        if let (Some(id), Some(w)) = (&st.id, st.writer.get())
            && let Some(at) = w.synced_at().filter(|t| *t > 0)
        {
            metrics::gauge!("wmreplay_jetstream_cache_age_seconds", "log" => id.clone())
                .set(now.saturating_sub(at) as f64 / 1000.0);
        }
    }
    handle.run_upkeep();
    let mut r = handle.render().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(r)
}
