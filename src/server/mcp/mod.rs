//! MCP (the Model Context Protocol) server: a log's memory as tools an MCP
//! client (Claude Code, Claude Desktop, Cursor, VS Code) calls, built on
//! the official Rust SDK (`rmcp`). Over stdio (`wmreplay mcp LOG`,
//! `stdio.rs`) and streamable HTTP (`serve --mcp`: `/mcp`, and under
//! `--log-dir` `/v1/logs/{id}/mcp`; `http.rs`, routed by `routes/mcp.rs`).
//!
//! The tools (`tools.rs`, run by `run.rs`; see `docs/mcp.md`):
//! `search_memory` and `memory` as a turn runs them (`--recall-tool`,
//! `--memory-tool`), `get_facts`, `set_fact` and `delete_fact` as
//! `/v1/facts` does, `append_record` as `POST /v1/records` does for one
//! record, and `recent_context` (`context.rs`). Bad arguments are error
//! results (`args.rs`), never protocol errors; every write goes through
//! the log's one writer.
//!
//! Layout, from the bottom up: `args.rs`, `tools.rs`, `context.rs`,
//! `deep.rs` (messages nested too deep for the SDK's parser, answered
//! with their id), `run.rs`, `handler.rs` (the `ServerHandler`), then
//! `http.rs` and `stdio.rs`.

mod args;
mod context;
mod deep;
mod handler;
mod http;
mod run;
mod stdio;
mod tools;

pub(crate) use http::{HttpMcp, Listening};
pub use stdio::{McpStdioError, mcp_stdio};
