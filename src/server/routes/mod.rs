//! The routes, one file per group: `respond.rs` (`/respond`,
//! `/v1/context`), `records.rs` (`/v1/records`), `facts.rs` (`/v1/facts`),
//! `search.rs` (`/v1/search`),
//! `sessions.rs`
//! (`/v1/turn/*`), `stats.rs` (`/v1/stats`, `/healthz`, `/readyz`), `logs.rs`
//! (`/v1/logs`), and the memory inspector's reads: `inspect.rs`
//! (`/v1/timeline…`), `memory_view.rs` (`/v1/memory`), `turn_view.rs`
//! (`/v1/inspect/turn`). Each route of a log exists for the one `--log` and, under
//! `--log-dir`, as `/v1/logs/{id}/…`; the router below wires both and puts
//! the bearer-token check in front of every route but `/healthz` and `/readyz`, and
//! before it the refusal of what a web page can make a browser send
//! (`server/browser.rs`).

mod compat;
mod facts;
mod inspect;
mod logs;
mod mcp;
mod memory_view;
mod records;
mod respond;
mod search;
mod sessions;
mod stats;
mod turn_view;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};

use crate::server::app::logs::{Logs, Server};
use crate::server::auth;
use crate::server::errors::{method_not_allowed, not_found};

/// The handlers of a log's routes, for the one `--log` (`$one`) and for
/// `/v1/logs/{id}/…` (`$at`).
macro_rules! per_log {
    ($one:ident, $at:ident, $f:path) => {
        async fn $one(State(server): State<Arc<Server>>, req: Request) -> Response {
            match server.log(None) {
                Ok(state) => $f(state, req).await.into_response(),
                Err(e) => e.into_response(),
            }
        }
        async fn $at(
            State(server): State<Arc<Server>>,
            Path(id): Path<String>,
            req: Request,
        ) -> Response {
            match server.log(Some(&id)) {
                Ok(state) => $f(state, req).await.into_response(),
                Err(e) => e.into_response(),
            }
        }
    };
}

per_log!(respond_one, respond_at, respond::respond);
per_log!(context_one, context_at, respond::context);
per_log!(stats_one, stats_at, stats::stats);
per_log!(prepare_one, prepare_at, sessions::turn_prepare);
per_log!(ack_one, ack_at, sessions::turn_ack);
per_log!(records_one, records_at, records::append);
per_log!(facts_one, facts_at, facts::read);
per_log!(search_one, search_at, search::search);
per_log!(timeline_one, timeline_at, inspect::timeline);
per_log!(record_one, record_at, inspect::record);
per_log!(tail_one, tail_at, inspect::tail);
per_log!(memory_one, memory_at, memory_view::memory);
per_log!(turn_view_one, turn_view_at, turn_view::turn);

async fn put_fact_one(
    State(server): State<Arc<Server>>,
    Path(key): Path<String>,
    req: Request,
) -> Response {
    match server.log(None) {
        Ok(state) => facts::write(state, key, Some(req)).await.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn delete_fact_one(State(server): State<Arc<Server>>, Path(key): Path<String>) -> Response {
    match server.log(None) {
        Ok(state) => facts::write(state, key, None).await.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn put_fact_at(
    State(server): State<Arc<Server>>,
    Path((id, key)): Path<(String, String)>,
    req: Request,
) -> Response {
    match server.log(Some(&id)) {
        Ok(state) => facts::write(state, key, Some(req)).await.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn delete_fact_at(
    State(server): State<Arc<Server>>,
    Path((id, key)): Path<(String, String)>,
) -> Response {
    match server.log(Some(&id)) {
        Ok(state) => facts::write(state, key, None).await.into_response(),
        Err(e) => e.into_response(),
    }
}

/// No such route: a 404, in the provider's shape under a provider's path
/// (`/anthropic/…`, `/openai/…`), whose SDK then raises its own error.
async fn fallback(req: Request) -> Response {
    shaped_for(req.uri().path(), &not_found().await)
}

/// A route without that method: a 405, shaped as [`fallback`]'s.
async fn wrong_method(req: Request) -> Response {
    shaped_for(req.uri().path(), &method_not_allowed().await)
}

/// `e` in the provider's shape under a provider's path, the server's own
/// elsewhere.
fn shaped_for(path: &str, e: &crate::server::errors::ApiError) -> Response {
    match crate::server::compat::provider_prefix(path) {
        Some(p) => crate::server::upstream::shapes::error_response(p, e),
        None => e.clone().into_response(),
    }
}

/// Refuses what a web page can make a browser send (`browser.rs`), in the
/// provider's shape on the provider-compatible routes.
async fn browser_guard(
    rules: &crate::server::browser::BrowserRules,
    listening: Option<std::net::SocketAddr>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    match crate::server::browser::check(rules, listening, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            tracing::warn!(
                code = e.code,
                "refused a request a web page could have sent"
            );
            shaped_for(req.uri().path(), &e)
        }
    }
}

/// Adds `x-wmreplay-stale-ms` to a response whose log was read from a
/// cache its stream could not confirm (see `AppState::catch_up`).
/// Also notes when the request arrived, for the deadline a replicated
/// store's waits share (`writer::ARRIVED`).
async fn stale_header(req: Request, next: axum::middleware::Next) -> Response {
    let cell = std::cell::Cell::new(None);
    let arrived = tokio::time::Instant::now();
    let inner = crate::server::app::STALE.scope(cell, async move {
        let mut resp = next.run(req).await;
        if let Some(ms) = crate::server::app::STALE.with(|s| s.get())
            && let Ok(v) = axum::http::HeaderValue::from_str(&ms.to_string())
        {
            resp.headers_mut().insert("x-wmreplay-stale-ms", v);
        }
        resp
    });
    crate::server::writer::ARRIVED.scope(arrived, inner).await
}

/// Who may use the server, when anyone is checked.
fn auth_of(server: &Server) -> Option<auth::Auth> {
    let cfg = &server.shared.cfg;
    if cfg.auth_token.is_none() && server.shared.tokens.is_none() {
        return None;
    }
    let one_log = match &server.logs {
        Logs::One(_) => cfg
            .log
            .file_name()
            .and_then(|n| n.to_str())
            .map(|n| n.strip_suffix(".log").unwrap_or(n).to_string()),
        Logs::Dir(_) => None,
    };
    Some(auth::Auth {
        token: cfg.auth_token.clone(),
        tokens: server.shared.tokens.clone(),
        one_log,
    })
}

pub(crate) fn router(server: Arc<Server>) -> Router {
    let routes = match server.logs {
        Logs::One(_) => Router::new()
            .route("/respond", post(respond_one))
            .route("/v1/context", post(context_one))
            .route("/v1/stats", get(stats_one))
            .route("/v1/turn/prepare", post(prepare_one))
            .route("/v1/turn/ack", post(ack_one))
            .route("/v1/records", post(records_one))
            .route("/v1/search", post(search_one))
            .route("/v1/facts", get(facts_one))
            .route("/v1/facts/{key}", put(put_fact_one).delete(delete_fact_one))
            .route("/v1/timeline", get(timeline_one))
            .route("/v1/timeline/record", get(record_one))
            .route("/v1/timeline/tail", get(tail_one))
            .route("/v1/memory", get(memory_one))
            .route("/v1/inspect/turn", get(turn_view_one)),
        Logs::Dir(_) => Router::new()
            .route("/v1/logs", get(logs::list))
            .route("/v1/logs/{id}/respond", post(respond_at))
            .route("/v1/logs/{id}/context", post(context_at))
            .route("/v1/logs/{id}/stats", get(stats_at))
            .route("/v1/logs/{id}/turn/prepare", post(prepare_at))
            .route("/v1/logs/{id}/turn/ack", post(ack_at))
            .route("/v1/logs/{id}/records", post(records_at))
            .route("/v1/logs/{id}/search", post(search_at))
            .route("/v1/logs/{id}/facts", get(facts_at))
            .route(
                "/v1/logs/{id}/facts/{key}",
                put(put_fact_at).delete(delete_fact_at),
            )
            .route("/v1/logs/{id}/timeline", get(timeline_at))
            .route("/v1/logs/{id}/timeline/record", get(record_at))
            .route("/v1/logs/{id}/timeline/tail", get(tail_at))
            .route("/v1/logs/{id}/memory", get(memory_at))
            .route("/v1/logs/{id}/inspect/turn", get(turn_view_at)),
    };
    // The provider-compatible endpoints (compat.rs) and MCP (mcp.rs).
    let routes = compat::routes(routes, &server);
    let routes = mcp::routes(routes, &server);
    // Behind the same token as the rest.
    let routes = routes.route("/metrics", get(crate::server::metrics::metrics));
    let routes = match auth_of(&server) {
        Some(access) => routes.route_layer(axum::middleware::from_fn(
            move |req: Request, next: axum::middleware::Next| {
                let access = access.clone();
                async move { auth::check(&access, req, next).await }
            },
        )),
        None => routes,
    };
    // The inspector page: static, holding nothing of the logs (what it
    // shows comes through the routes above, with the user's token), so
    // served without one; behind the browser rules like the rest.
    let routes = if server.shared.cfg.ui {
        let dir = matches!(server.logs, Logs::Dir(_));
        let auth = auth_of(&server).is_some();
        routes
            .route("/ui", get(crate::server::ui::index))
            .route("/ui/", get(crate::server::ui::index))
            .route("/ui/app.js", get(crate::server::ui::script))
            .route("/ui/app.css", get(crate::server::ui::style))
            .route("/ui/icon.svg", get(crate::server::ui::icon))
            .route(
                "/ui/info",
                get(move || async move { crate::server::ui::info(dir, auth) }),
            )
    } else {
        routes
    };
    // Before the token: what a web page can make a browser send is refused
    // whatever it carries (`browser.rs`).
    let rules = Arc::new(server.shared.cfg.browser.clone());
    let routes = routes.route_layer(axum::middleware::from_fn(
        move |req: Request, next: axum::middleware::Next| {
            let rules = rules.clone();
            let listening = req
                .extensions()
                .get::<crate::server::mcp::Listening>()
                .and_then(|l| l.0);
            async move { browser_guard(&rules, listening, req, next).await }
        },
    ));
    // The recorder is installed before the first request, so that the
    // first scrape sees everything counted since the start.
    crate::server::metrics::install();
    let routes = routes.layer(axum::middleware::from_fn(stale_header));
    routes
        .route("/healthz", get(stats::healthz))
        .route(
            "/readyz",
            get({
                let ready = server.ready.clone();
                move || {
                    let ready = ready.clone();
                    async move { stats::readyz(&ready) }
                }
            }),
        )
        .fallback(fallback)
        .method_not_allowed_fallback(wrong_method)
        .layer(
            // One line per request at INFO: method, path, status, latency.
            // Neither headers nor the query string are logged, so neither is
            // a token a client put there.
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|req: &axum::http::Request<_>| {
                    tracing::info_span!(
                        "request",
                        method = %req.method(),
                        path = %req.uri().path(),
                        version = ?req.version(),
                    )
                })
                .on_response(
                    tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO),
                ),
        )
        .with_state(server)
}
