//! The providers' own APIs as a memory endpoint (see the `compat` module):
//! `POST /anthropic/v1/messages` and `POST /openai/v1/chat/completions`,
//! and under `--log-dir` `/v1/logs/{id}/anthropic/v1/messages` and
//! `/v1/logs/{id}/openai/v1/chat/completions`. Both exist; the one of the
//! provider the server does not call answers 404 naming the other.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::routing::post;

use crate::server::app::logs::{Logs, Server};
use crate::server::compat::handle;
use crate::server::upstream::Provider;

async fn anthropic_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    handle(server, None, Provider::Anthropic, req).await
}

async fn openai_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    handle(server, None, Provider::OpenAi, req).await
}

async fn anthropic_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    handle(server, Some(id), Provider::Anthropic, req).await
}

async fn openai_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    handle(server, Some(id), Provider::OpenAi, req).await
}

/// Adds the provider-compatible routes.
pub(super) fn routes(routes: Router<Arc<Server>>, server: &Server) -> Router<Arc<Server>> {
    match server.logs {
        Logs::One(_) => routes
            .route("/anthropic/v1/messages", post(anthropic_one))
            .route("/openai/v1/chat/completions", post(openai_one)),
        Logs::Dir(_) => routes
            .route("/v1/logs/{id}/anthropic/v1/messages", post(anthropic_at))
            .route("/v1/logs/{id}/openai/v1/chat/completions", post(openai_at)),
    }
}
