//! MCP over streamable HTTP (`serve --mcp`): `/mcp`, and under `--log-dir`
//! `/v1/logs/{id}/mcp`, each answered by the log's MCP server
//! (`server/mcp/`), behind the same bearer token as every other route.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::response::IntoResponse;
use axum::routing::any;

use crate::server::app::logs::{Logs, Server};
use crate::server::mcp::HttpMcp;

/// Adds the MCP routes when `--mcp` is on.
pub(super) fn routes(routes: Router<Arc<Server>>, server: &Server) -> Router<Arc<Server>> {
    if !server.shared.cfg.mcp {
        return routes;
    }
    let mcp = HttpMcp::new(&server.shared);
    match server.logs {
        Logs::One(_) => routes.route(
            "/mcp",
            any(move |State(server): State<Arc<Server>>, req: Request| {
                let mcp = mcp.clone();
                async move {
                    match server.log(None) {
                        Ok(state) => mcp.serve(state, req).await,
                        Err(e) => e.into_response(),
                    }
                }
            }),
        ),
        Logs::Dir(_) => routes.route(
            "/v1/logs/{id}/mcp",
            any(
                move |State(server): State<Arc<Server>>, Path(id): Path<String>, req: Request| {
                    let mcp = mcp.clone();
                    async move {
                        match server.log(Some(&id)) {
                            Ok(state) => mcp.serve(state, req).await,
                            Err(e) => e.into_response(),
                        }
                    }
                },
            ),
        ),
    }
}
