//! The providers' own APIs as a memory endpoint (see the `compat` module):
//! `POST /anthropic/v1/messages`, `POST /openai/v1/chat/completions` and
//! `POST /openai/v1/responses`, and the same under `/v1/logs/{id}` with
//! `--log-dir`. Both exist; the one of the
//! provider the server does not call answers 404 naming the other. Beside
//! them, as a client of the provider's API expects: `GET …/v1/models` (the
//! upstream's list), and the base URL answering `HEAD` and `GET`.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use axum::routing::{get, post};

use crate::server::app::logs::{Logs, Server};
use crate::server::compat::{count_tokens, handle, handle_responses, models};
use crate::server::upstream::Provider;

async fn anthropic_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    handle(server, None, Provider::Anthropic, req).await
}

async fn openai_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    handle(server, None, Provider::OpenAi, req).await
}

async fn responses_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    handle_responses(server, None, req).await
}

async fn responses_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    handle_responses(server, Some(id), req).await
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

async fn anthropic_models_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    models(server, None, Provider::Anthropic, req).await
}

async fn openai_models_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    models(server, None, Provider::OpenAi, req).await
}

async fn anthropic_models_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    models(server, Some(id), Provider::Anthropic, req).await
}

async fn openai_models_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    models(server, Some(id), Provider::OpenAi, req).await
}

async fn count_one(State(server): State<Arc<Server>>, req: Request) -> Response {
    count_tokens(server, None, req).await
}

async fn count_at(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    count_tokens(server, Some(id), req).await
}

/// The base URL a client is pointed at (`HEAD` is how some check it).
async fn base() -> Response {
    crate::server::errors::json_response(axum::http::StatusCode::OK, "{\"ok\":true}")
}

/// Adds the provider-compatible routes.
pub(super) fn routes(routes: Router<Arc<Server>>, server: &Server) -> Router<Arc<Server>> {
    let at = match server.logs {
        Logs::One(_) => "",
        Logs::Dir(_) => "/v1/logs/{id}",
    };
    let routes = match server.logs {
        Logs::One(_) => routes
            .route("/anthropic/v1/messages", post(anthropic_one))
            .route("/openai/v1/chat/completions", post(openai_one))
            .route("/openai/v1/responses", post(responses_one))
            .route("/anthropic/v1/models", get(anthropic_models_one))
            .route("/anthropic/v1/messages/count_tokens", post(count_one))
            .route("/openai/v1/models", get(openai_models_one)),
        Logs::Dir(_) => routes
            .route("/v1/logs/{id}/anthropic/v1/messages", post(anthropic_at))
            .route("/v1/logs/{id}/openai/v1/chat/completions", post(openai_at))
            .route("/v1/logs/{id}/openai/v1/responses", post(responses_at))
            .route(
                "/v1/logs/{id}/anthropic/v1/models",
                get(anthropic_models_at),
            )
            .route(
                "/v1/logs/{id}/anthropic/v1/messages/count_tokens",
                post(count_at),
            )
            .route("/v1/logs/{id}/openai/v1/models", get(openai_models_at)),
    };
    let mut routes = routes;
    for b in ["/anthropic", "/anthropic/", "/openai/v1", "/openai/v1/"] {
        routes = routes.route(&format!("{at}{b}"), get(base));
    }
    routes
}
