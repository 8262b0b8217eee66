//! The flags of hybrid search (`--embed-upstream`, `--embed-model`, …),
//! shared by `search`, `respond --recall`, `serve` and `mcp`, and the
//! embedder they make.

use std::sync::Arc;
use std::time::Duration;

use crate::search::SearchIndex;
use crate::server::{EmbedConfig, HttpEmbedder};
use clap::Args;

use super::Failure;
use super::args::{parse_timeout, progress_bar, warn};

/// Hybrid search: an embedding model besides the words.
#[derive(Args, Debug, Clone)]
pub struct EmbedArgs {
    /// Hybrid search: also find records by meaning with this embedding
    /// model, an OpenAI-compatible API (POST URL/v1/embeddings; a URL
    /// ending in /v1 or /v1/embeddings is taken as is): OpenAI, vLLM,
    /// Ollama, llama.cpp's server, TEI. Records are embedded as they are
    /// indexed (--embed-batch texts a request, --embed-concurrency at
    /// once), their vectors kept in 8
    /// bits next to the index (LOG.wmreplay.idx.vec); a query fuses the
    /// words' ranking with the vectors' (see --embed-weight), and a hit's
    /// score is then the fused score. When the model fails or is
    /// slow, search is by words only, and records not embedded are
    /// embedded by a later search. Without it nothing is called. Needs
    /// --embed-model. Example: --embed-upstream http://localhost:11434
    /// --embed-model nomic-embed-text (Ollama), or --embed-upstream
    /// https://api.openai.com --embed-model text-embedding-3-small.
    #[arg(long, env = "WMREPLAY_EMBED_UPSTREAM", value_name = "URL", requires = "embed_model", value_parser = parse_embed_upstream)]
    pub embed_upstream: Option<String>,
    /// The embedding model's name (see --embed-upstream). Its vectors are
    /// made again when it changes.
    #[arg(
        long,
        env = "WMREPLAY_EMBED_MODEL",
        value_name = "NAME",
        requires = "embed_upstream"
    )]
    pub embed_model: Option<String>,
    /// The environment variable holding the embedding API's key, sent as
    /// `Authorization: Bearer` [default: OPENAI_API_KEY when it is set;
    /// otherwise no key, as a local server needs none]. '' sends none.
    #[arg(
        long,
        env = "WMREPLAY_EMBED_KEY_ENV",
        value_name = "VAR",
        requires = "embed_upstream"
    )]
    pub embed_key_env: Option<String>,
    /// The vectors' length asked of the model ("dimensions": OpenAI's
    /// text-embedding-3 models shorten theirs).
    #[arg(long, env = "WMREPLAY_EMBED_DIMENSIONS", value_name = "N", requires = "embed_upstream", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub embed_dimensions: Option<u32>,
    /// How long a query's own embedding may take, retries included; past
    /// it the search is by words only.
    #[arg(long, env = "WMREPLAY_EMBED_TIMEOUT", value_name = "DURATION", default_value = "2s", value_parser = parse_timeout)]
    pub embed_timeout: Duration,
    /// Texts sent in one embedding request while records are embedded.
    #[arg(long, env = "WMREPLAY_EMBED_BATCH", value_name = "N", default_value_t = crate::search::HybridOptions::default().batch as u64, value_parser = clap::value_parser!(u64).range(1..=2048))]
    pub embed_batch: u64,
    /// Embedding requests in flight at once while records are embedded.
    #[arg(long, env = "WMREPLAY_EMBED_CONCURRENCY", value_name = "N", default_value_t = crate::search::HybridOptions::default().concurrency as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub embed_concurrency: u64,
    /// How much the meaning counts against the words. Each ranking's
    /// scores are scaled (the words' by their best, the cosines between
    /// the lowest and highest of the candidates) and added, the vectors'
    /// times W: the model lifts a record by W at most, so the words'
    /// confident top stays first whatever the model. 0 keeps the words'
    /// order and only adds what the model alone found. The default is
    /// safe for a small model weaker than the words (all-MiniLM-L6-v2 on
    /// two long-conversation benchmarks); a model that finds more than
    /// the words on your questions wants 0.5 to 1: measure (docs/cli.md,
    /// "Hybrid search").
    #[arg(long, env = "WMREPLAY_EMBED_WEIGHT", value_name = "W", default_value_t = crate::search::HybridOptions::default().vector_weight, value_parser = parse_embed_weight)]
    pub embed_weight: f64,
}

/// `--embed-weight`: a number from 0 to 100.
fn parse_embed_weight(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(w) if (0.0..=100.0).contains(&w) => Ok(w),
        _ => Err(format!("{s:?} is not a weight from 0 to 100 (e.g. 0.5)")),
    }
}

/// `--embed-upstream`, checked.
fn parse_embed_upstream(s: &str) -> Result<String, String> {
    EmbedConfig::new(s, "model")
        .endpoint()
        .map(|_| s.to_string())
}

impl EmbedArgs {
    /// The embedding settings, when --embed-upstream is given.
    pub fn config(&self) -> Result<Option<EmbedConfig>, Failure> {
        let (Some(url), Some(model)) = (&self.embed_upstream, &self.embed_model) else {
            return Ok(None);
        };
        let mut cfg = EmbedConfig::new(url.clone(), model.clone());
        cfg.api_key = EmbedConfig::key_from_env(self.embed_key_env.as_deref()).map_err(|var| {
            Failure::Usage(format!(
                "--embed-key-env {var}: the variable is not set or empty"
            ))
        })?;
        cfg.dimensions = self.embed_dimensions;
        cfg.hybrid.query_timeout = self.embed_timeout;
        cfg.hybrid.vector_weight = self.embed_weight;
        cfg.hybrid.batch = self.embed_batch as usize;
        cfg.hybrid.concurrency = self.embed_concurrency as usize;
        Ok(Some(cfg))
    }

    /// `index` made hybrid when --embed-upstream is given, for a command
    /// that runs once: each search waits until the records are embedded
    /// (or their embedding failed).
    pub fn hybrid(&self, index: SearchIndex) -> Result<SearchIndex, Failure> {
        let Some(mut cfg) = self.config()? else {
            return Ok(index);
        };
        cfg.hybrid.wait = None;
        let embedder = HttpEmbedder::new(&cfg).map_err(Failure::Usage)?;
        Ok(index.with_embedder(Arc::new(embedder), cfg.hybrid))
    }
}

/// Embeds the records `index`'s vectors lack (a hybrid index; nothing
/// otherwise), with a progress bar on a terminal; a model that fails is a
/// warning: the search goes on by words for the records not embedded.
pub fn embed_pending(index: &mut SearchIndex) -> Result<(), Failure> {
    let Some(status) = index.vectors() else {
        return Ok(());
    };
    let total = std::fs::metadata(index.log()).map_or(0, |m| m.len());
    let bar = progress_bar(
        total.saturating_sub(status.covered),
        format!("embedding {}", index.log().display()),
    );
    let done = index.embed_pending(&mut |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    });
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if let Some(why) = done?.failed {
        warn(&format!(
            "embedding records failed ({why}); records not embedded are found by their words only"
        ));
    }
    Ok(())
}
