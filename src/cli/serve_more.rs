//! `wmreplay serve`'s flags for memory beyond the window (recall and the
//! tools the model calls) and for logs kept in NATS JetStream, grouped out
//! of `serve.rs` and flattened into its arguments.

use crate::server;
use clap::Args;

use super::Failure;
use super::args::{LANGUAGE_HELP, parse_language};

#[cfg(feature = "jetstream")]
use super::args::parse_timeout;

/// Recall and tools.
#[derive(Args, Debug)]
pub struct MemoryArgs {
    /// Recall: each turn gets the K records best matching its text that the
    /// replay does not hold (a summary's folded records included), as one
    /// WM_KIND=recall message just before CURRENT_USER_REQUEST, after the
    /// cached prefix. Found by the search index next to each log
    /// (LOG.wmreplay.idx, built on first use; POST /v1/search uses it too).
    #[arg(long, env = "WMREPLAY_RECALL", value_name = "K", value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub recall: Option<u64>,
    #[arg(long, env = "WMREPLAY_LANGUAGE", default_value = "english", value_name = "LANG", value_parser = parse_language, help = LANGUAGE_HELP)]
    pub language: crate::search::Language,
    /// Hybrid search for recall, POST /v1/search and search_memory. A turn
    /// waits at most 250 ms for the records appended to be embedded (the
    /// rest are embedded in the background) and at most --embed-timeout
    /// for its text's own embedding.
    #[command(flatten)]
    pub embed: super::embed::EmbedArgs,
    /// Offer the model a search_memory tool (Anthropic tool use, OpenAI
    /// function calling): when it calls it, the server searches the whole
    /// log (the index next to it) for the model's query, leaving out what the
    /// request already holds, and continues the turn with the records found.
    /// The call and its result are appended as tool_call and tool_result
    /// records, so later turns replay them.
    #[arg(long, env = "WMREPLAY_RECALL_TOOL")]
    pub recall_tool: bool,
    /// Offer the model the memory tool (Anthropic's memory_20250818; for
    /// OpenAI the same six commands as one function): view, create,
    /// str_replace, insert, delete and rename over files under /memories,
    /// each file kept as a wm_fact record keyed by its path (GET
    /// /v1/facts shows them; --facts replays them in one message). Paths
    /// outside /memories, `..` and files over --max-record-bytes are refused
    /// with an error result.
    #[arg(long, env = "WMREPLAY_MEMORY_TOOL")]
    pub memory_tool: bool,
    /// Most rounds of tool calls in one turn; the call after the last round
    /// offers no tool, so the model answers with what it has.
    #[arg(long, env = "WMREPLAY_MAX_TOOL_ROUNDS", value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    pub max_tool_rounds: u32,
    /// Serve MCP (the Model Context Protocol, streamable HTTP) at /mcp, and
    /// under --log-dir at /v1/logs/{id}/mcp: the log's memory as tools an
    /// MCP client (Claude Code, Claude Desktop, Cursor, VS Code) calls.
    /// `wmreplay mcp LOG` serves the same over stdio.
    #[arg(long, env = "WMREPLAY_MCP")]
    pub mcp: bool,
    /// On the provider-compatible endpoints (/anthropic/v1/messages,
    /// /openai/v1/chat/completions), call the model with the API key the
    /// client sends (x-api-key or Authorization: Bearer) instead of the
    /// server's own; without it the client's key is checked as the
    /// server's access token (--auth-token-env) and the server's key is
    /// used.
    #[arg(long, env = "WMREPLAY_FORWARD_CLIENT_KEY")]
    pub forward_client_key: bool,
}

impl MemoryArgs {
    pub fn apply(&self, cfg: &mut server::Config) -> Result<(), Failure> {
        cfg.recall = self.recall.map(|k| k as usize);
        cfg.language = self.language;
        cfg.embed = self.embed.config()?;
        cfg.tools.search_memory = self.recall_tool;
        cfg.tools.memory = self.memory_tool;
        cfg.tools.max_rounds = self.max_tool_rounds;
        cfg.mcp = self.mcp;
        cfg.forward_client_key = self.forward_client_key;
        Ok(())
    }
}

/// Logs kept in a JetStream stream.
#[cfg(feature = "jetstream")]
#[derive(Args, Debug)]
pub struct JetStreamArgs {
    /// Keep every log in a NATS JetStream stream (nats://HOST:PORT, several
    /// comma-separated): log {id} is the subject PREFIX.{id}, each write one
    /// message published with the subject's expected last sequence (so
    /// replicas writing one log take turns) and acknowledged after the
    /// stream's ack; the files of --log-dir (required) are byte-exact caches,
    /// caught up before each read. Needs the jetstream cargo feature.
    #[arg(
        long,
        env = "WMREPLAY_JETSTREAM",
        value_name = "URL",
        requires = "log_dir"
    )]
    pub jetstream: Option<String>,
    /// The JetStream stream the logs are kept in (created when missing, with
    /// subjects PREFIX.>).
    #[arg(
        long,
        env = "WMREPLAY_STREAM",
        value_name = "NAME",
        default_value = "WMREPLAY",
        requires = "jetstream"
    )]
    pub stream: String,
    /// Log {id} is the subject PREFIX.{id} (a '.' of the id written '=').
    #[arg(
        long,
        env = "WMREPLAY_SUBJECT_PREFIX",
        value_name = "P",
        default_value = "wmreplay.logs",
        requires = "jetstream"
    )]
    pub subject_prefix: String,
    /// Copies of the stream JetStream keeps, when this server creates it
    /// (3 on a three-node cluster).
    #[arg(long, env = "WMREPLAY_REPLICAS", value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5), requires = "jetstream")]
    pub replicas: u64,
    /// Seconds (or a duration: 500ms, 1m) a write may wait for the stream
    /// (a reconnect, a leader election) before it is answered 503 with
    /// retry-after.
    #[arg(long, env = "WMREPLAY_JETSTREAM_TIMEOUT", value_name = "DURATION", default_value = "10", value_parser = parse_timeout, requires = "jetstream")]
    pub jetstream_timeout: std::time::Duration,
    /// How long the server waits for the stream when it starts (a cluster
    /// restarted with it still electing its leaders), retrying and logging
    /// each try, before it exits 1.
    #[arg(long, env = "WMREPLAY_JETSTREAM_START_TIMEOUT", value_name = "DURATION", default_value = "2m", value_parser = parse_timeout, requires = "jetstream")]
    pub jetstream_start_timeout: std::time::Duration,
}

#[cfg(feature = "jetstream")]
impl JetStreamArgs {
    pub fn apply(&self, cfg: &mut server::Config) {
        if let Some(url) = &self.jetstream {
            let mut js = server::JetStreamConfig::new(url.clone());
            js.stream = self.stream.clone();
            js.subject_prefix = self.subject_prefix.clone();
            js.replicas = self.replicas as usize;
            js.timeout = self.jetstream_timeout;
            js.start_timeout = self.jetstream_start_timeout;
            cfg.jetstream = Some(js);
        }
    }
}

/// The API key named by `--api-key-env` (or the provider's variable);
/// with an upstream, a missing or empty one is an error unless the name is
/// empty (an upstream that needs no key).
pub(super) fn api_key(
    provider: crate::server::Provider,
    env: Option<String>,
    upstream: bool,
) -> Result<Option<crate::server::ApiKey>, Failure> {
    use crate::server::ApiKey;
    let key_env = env.unwrap_or_else(|| provider.default_key_env().to_string());
    let api_key = match key_env.as_str() {
        "" => None,
        var => std::env::var(var)
            .ok()
            .filter(|k| !k.is_empty())
            .map(ApiKey),
    };
    // A key with a character no API key has (a placeholder such as "…")
    // would fail every turn as an unreachable upstream: refused here.
    if let Some(k) = &api_key
        && !k.0.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Failure::Usage(format!(
            "{key_env} does not hold a usable API key: it has a space or a character that is \
             not ASCII, as no API key does (a placeholder such as \"…\"?)"
        )));
    }
    if upstream && api_key.is_none() && !key_env.is_empty() {
        return Err(Failure::Usage(format!(
            "--upstream needs an API key: {key_env} is not set or empty (name another variable \
             with --api-key-env VAR, or pass --api-key-env '' for an upstream that needs none)"
        )));
    }
    Ok(api_key)
}
