//! The MCP server of one log ([`Handler`]): its tools (`tools.rs`, run by
//! `run.rs`) and two resources, the facts (`wmreplay://facts`,
//! `application/json`) and the newest summary (`wmreplay://summary`,
//! `text/plain`, listed when there is one). The same handler answers over
//! stdio and streamable HTTP; requests are served concurrently, each on
//! the log's shared state.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, Implementation, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::context;
use super::run::{self, failed};
use super::tools;
use crate::server::app::AppState;
use crate::server::app::facts::current;

/// The facts resource.
pub(crate) const FACTS_URI: &str = "wmreplay://facts";
/// The newest summary resource.
pub(crate) const SUMMARY_URI: &str = "wmreplay://summary";

const INSTRUCTIONS: &str = "The working memory of an agent: an append-only log of records \
(inputs, outputs, events, facts, summaries). recent_context shows what happened lately; \
search_memory finds older records; get_facts, set_fact and delete_fact keep keyed facts; \
memory keeps files under /memories; append_record adds a record of your own.";

/// The MCP server of one log.
#[derive(Clone)]
pub(crate) struct Handler {
    state: Arc<AppState>,
}

impl Handler {
    pub(crate) fn new(state: Arc<AppState>) -> Handler {
        Handler { state }
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("wmreplay", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// The stand-in of a request nested too deep to be read (`deep.rs`):
    /// answered with the error that says so, under the request's own id.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method != super::deep::TOO_DEEP_METHOD {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ));
        }
        let p = request.params.unwrap_or_default();
        let deep = super::deep::TooDeep {
            id: None,
            method: p["method"].as_str().map(str::to_string),
            depth: p["depth"].as_u64().unwrap_or(0) as usize,
            meta: None,
        };
        Err(ErrorData::invalid_params(deep.message(), None))
    }

    async fn list_tools(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools::all()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::named(name)
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = req.arguments.unwrap_or_default();
        let Some(result) = run::call(&self.state, &req.name, &args).await else {
            return Err(ErrorData::invalid_params(
                format!(
                    "there is no tool named {:?}; the tools are {}",
                    req.name.chars().take(64).collect::<String>(),
                    tools::all()
                        .iter()
                        .map(|t| t.name.as_ref())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        };
        let content = vec![ContentBlock::text(result.content)];
        Ok(if result.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }

    async fn list_resources(
        &self,
        _req: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut list = vec![
            Resource::new(FACTS_URI, "facts")
                .with_description("Every live keyed fact, as {\"facts\":{key: value}}.")
                .with_mime_type("application/json"),
        ];
        if context::summary(&self.state)
            .await
            .map_err(|e| internal(&failed(&e).content))?
            .is_some()
        {
            list.push(
                Resource::new(SUMMARY_URI, "summary")
                    .with_description(
                        "The newest summary's text: what older records were folded into.",
                    )
                    .with_mime_type("text/plain"),
            );
        }
        Ok(ListResourcesResult::with_all_items(list))
    }

    async fn read_resource(
        &self,
        req: ReadResourceRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (text, mime) = match req.uri.as_str() {
            FACTS_URI => {
                let facts = current(&self.state)
                    .await
                    .map_err(|e| internal(&failed(&e).content))?;
                (format!("{{\"facts\":{facts}}}"), "application/json")
            }
            SUMMARY_URI => match context::summary(&self.state)
                .await
                .map_err(|e| internal(&failed(&e).content))?
            {
                Some(text) => (text, "text/plain"),
                None => {
                    return Err(ErrorData::resource_not_found(
                        "the log has no summary yet",
                        None,
                    ));
                }
            },
            other => {
                return Err(ErrorData::resource_not_found(
                    format!(
                        "no resource {:?}; the resources are {FACTS_URI} and {SUMMARY_URI}",
                        other.chars().take(128).collect::<String>()
                    ),
                    None,
                ));
            }
        };
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, req.uri).with_mime_type(mime),
        ])
        .into())
    }
}

fn internal(message: &str) -> ErrorData {
    ErrorData::internal_error(message.to_string(), None)
}
