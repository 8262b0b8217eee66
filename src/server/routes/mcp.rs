//! MCP over streamable HTTP (`serve --mcp`): `/mcp`, and under `--log-dir`
//! `/v1/logs/{id}/mcp`.

use std::sync::Arc;

use axum::Router;

use crate::server::app::logs::Server;

/// Adds the MCP routes when `--mcp` is on.
pub(super) fn routes(routes: Router<Arc<Server>>, _server: &Server) -> Router<Arc<Server>> {
    routes
}
