//! MCP over streamable HTTP (`serve --mcp`): each request is answered on
//! its own (stateless: no session, plain JSON answers, no stream left
//! open), by a [`Handler`] on the log the route names.
//!
//! - **Host check** (against DNS rebinding, where a web page makes a
//!   browser send requests to a name that resolves to this machine): the
//!   `Host` header must be `localhost`, `127.0.0.1` or `::1` while the
//!   server listens on a loopback address (the default); on any other
//!   address clients reach it by names the server cannot know, so the
//!   header is not checked there, and the bearer token (`--auth-token-env`,
//!   which `serve` requires off loopback unless `--allow-unauthenticated`)
//!   guards MCP as it guards every other route.
//! - **Limits**: a body of at most `--body-limit` bytes, that may stall at
//!   most `--body-timeout` between two of its pieces.
//! - **Shutdown**: a request still waiting for its answer when the server
//!   cuts running turns (just before the shutdown deadline) is answered at
//!   once; the tool call itself finishes its append.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::handler::Handler;
use crate::server::app::AppState;
use crate::server::app::logs::Shared;

/// The address the server listens on, as a request extension (set by
/// `serve`): the host check follows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listening(pub(crate) Option<SocketAddr>);

/// MCP's settings for every request of one server.
#[derive(Clone)]
pub(crate) struct HttpMcp {
    cancel: CancellationToken,
    body_limit: usize,
    body_timeout: Duration,
}

impl HttpMcp {
    /// The settings of the server `shared` describes; its requests waiting
    /// on a tool are let go when its turns are cut at shutdown.
    pub(crate) fn new(shared: &Shared) -> HttpMcp {
        let cancel = CancellationToken::new();
        let mut cut = shared.turns.cut_signal();
        let token = cancel.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                // Cut, or the server gone: either way nothing is to wait.
                let _ = cut.wait_for(|cut| *cut).await;
                token.cancel();
            });
        }
        HttpMcp {
            cancel,
            body_limit: shared.cfg.body_limit,
            body_timeout: shared.cfg.body_timeout,
        }
    }

    /// Answers one MCP request for the log of `state`.
    pub(crate) async fn serve(&self, state: Arc<AppState>, req: Request) -> Response {
        let listening = req.extensions().get::<Listening>().and_then(|l| l.0);
        let mut config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_max_request_body_bytes(self.body_limit)
            .with_cancellation_token(self.cancel.child_token());
        config = match allowed_hosts(listening) {
            Some(hosts) => config.with_allowed_hosts(hosts),
            None => config.disable_allowed_hosts(),
        };
        let service = StreamableHttpService::new(
            move || Ok(Handler::new(state.clone())),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        // Read here (within the same limit and time) to screen it: a message
        // nested deeper than the SDK's parser reads is answered with a
        // JSON-RPC error under its id, not the SDK's plain-text 415
        // (`deep.rs`).
        let (parts, body) = req.into_parts();
        let head = Request::from_parts(parts.clone(), body);
        let bytes = match crate::server::errors::read_body(
            (self.body_limit, self.body_timeout),
            head,
        )
        .await
        {
            Ok(b) => b,
            Err(e) => return axum::response::IntoResponse::into_response(e),
        };
        if let Some(deep) = super::deep::too_deep(&bytes) {
            tracing::warn!(
                depth = deep.depth,
                "an MCP message nested too deep was answered with an error"
            );
            return crate::server::errors::json_response(
                axum::http::StatusCode::OK,
                deep.error_response().to_string(),
            );
        }
        let req = Request::from_parts(parts, Body::from(bytes));
        service.handle(req).await.map(Body::new)
    }
}

/// The `Host` names accepted when the server listens on `listening`:
/// loopback names on a loopback address (or an unknown one); `None`, no
/// check, on any other.
pub(crate) fn allowed_hosts(listening: Option<SocketAddr>) -> Option<Vec<String>> {
    match listening {
        Some(a) if !a.ip().is_loopback() => None,
        _ => Some(StreamableHttpServerConfig::default().allowed_hosts),
    }
}

#[cfg(test)]
mod tests {
    use super::allowed_hosts;

    #[test]
    fn the_host_check_follows_the_listen_address() {
        let loopback = ["localhost", "127.0.0.1", "::1"];
        for a in ["127.0.0.1:8787", "[::1]:8787", "127.0.0.2:1"] {
            assert_eq!(
                allowed_hosts(Some(a.parse().unwrap())).unwrap(),
                loopback,
                "{a}"
            );
        }
        assert_eq!(allowed_hosts(None).unwrap(), loopback);
        for a in ["0.0.0.0:8787", "[::]:8787", "192.168.1.10:8787"] {
            assert_eq!(allowed_hosts(Some(a.parse().unwrap())), None, "{a}");
        }
    }
}
