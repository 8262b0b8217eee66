//! MCP over stdin and stdout (`wmreplay mcp LOG`): one log, opened as
//! `serve --log` opens it (its state, its one writer started on the first
//! write, which creates the log), served until the client closes stdin or
//! `shutdown` resolves. Nothing but the protocol goes to stdout.
//!
//! Another process writing the same log (a `serve`, a second client) is
//! safe: every append holds the log's advisory lock, so lines never
//! interleave (see `writer/local.rs`).

use std::sync::Arc;

use rmcp::ServiceExt;
use tokio::sync::Semaphore;

use super::handler::Handler;
use crate::server::app::budget::Budget;
use crate::server::app::logs::Shared;
use crate::server::config::Config;

/// Why `wmreplay mcp` stopped short.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpStdioError {
    /// A setting is not valid.
    #[error("{0}")]
    Config(String),
    /// The client never started a session (stdin closed, or not MCP).
    #[error("no MCP session was started: {0}")]
    Session(String),
}

/// Stdin as the SDK reads it, each line screened first: a message nested
/// deeper than its parser reads (which it would drop without a word,
/// leaving its client waiting) is replaced by a stand-in request with the
/// same id, which the handler answers with the error (`deep.rs`).
fn screened_stdio() -> (tokio::io::DuplexStream, rmcp::transport::io::StdioWriter) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (mut into_sdk, sdk_reads) = tokio::io::duplex(256 << 10);
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::with_capacity(64 << 10, stdin);
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let out = match super::deep::too_deep(&line) {
                None => Some(line.as_slice()),
                Some(deep) => {
                    tracing::warn!(
                        depth = deep.depth,
                        "an MCP message nested too deep was answered with an error"
                    );
                    match deep.stand_in() {
                        Some(stand_in) => {
                            if into_sdk.write_all(&stand_in).await.is_err() {
                                break;
                            }
                            None
                        }
                        None => None,
                    }
                }
            };
            if let Some(l) = out
                && into_sdk.write_all(l).await.is_err()
            {
                break;
            }
        }
        let _ = into_sdk.shutdown().await;
    });
    (sdk_reads, stdout)
}

/// Serves MCP for the log `cfg.log` over stdin and stdout until stdin
/// closes or `shutdown` resolves; then lets the calls running finish and
/// the writer sync what they appended (within `cfg.shutdown_timeout`).
pub async fn mcp_stdio(
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), McpStdioError> {
    cfg.validate().map_err(McpStdioError::Config)?;
    let embedder = crate::server::upstream::embed::embedder_for(cfg.embed.as_ref())
        .map_err(McpStdioError::Config)?;
    let shared = Arc::new(Shared {
        open_files: Arc::default(),
        closing: Arc::default(),
        #[cfg(feature = "jetstream")]
        fleet: None,
        upstream: None,
        embedder,
        system: crate::system_prompt(cfg.system.as_deref()),
        replays: Arc::new(Semaphore::new(cfg.max_concurrent.max(1))),
        threads: Arc::default(),
        turns: Arc::default(),
        budget: Arc::new(Budget::new(cfg.max_memory)),
        tokens: None,
        cfg,
    });
    let state = Arc::new(shared.open(shared.cfg.log.clone(), None, true));
    let mut shutdown = std::pin::pin!(shutdown);
    let running = tokio::select! {
        r = Handler::new(state.clone()).serve(screened_stdio()) => {
            r.map_err(|e| McpStdioError::Session(e.to_string()))?
        }
        () = &mut shutdown => return Ok(()),
    };
    tracing::info!(log = %shared.cfg.log.display(), "serving MCP on stdio");
    tokio::select! {
        reason = running.waiting() => {
            let reason = reason.map(|r| format!("{r:?}")).unwrap_or_else(|e| e.to_string());
            tracing::info!(%reason, "the MCP session ended");
        }
        // Dropping the session's future cancels it.
        () = &mut shutdown => tracing::info!("stopping the MCP session"),
    }
    // The calls still running hold the state: let them finish their
    // appends, then the writer its queue.
    let deadline = tokio::time::Instant::now() + shared.cfg.shutdown_timeout;
    while Arc::strong_count(&state) > 1 {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!("tool calls still running at the shutdown deadline; stopping anyway");
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(state);
    let threads = std::mem::take(&mut *shared.threads.lock().unwrap_or_else(|p| p.into_inner()));
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            t.join();
        }
    });
    if tokio::time::timeout_at(deadline, joined).await.is_err() {
        tracing::warn!("the writer is still busy at the shutdown deadline; stopping anyway");
    }
    Ok(())
}
