//! Search, as both packages expose it: the engine's
//! [`wmreplay::search`] with the options of `wmreplay search` checked
//! the same way in both ([`SearchRequest`]), the index kept next to the
//! log unless a package says where ([`open_index`]), and the hits as the
//! JSON text the CLI prints ([`search`]), which each package parses into
//! its own objects.
//!
//! The option names (`limit`, `kinds`, `session`, `since`, `until`) are the
//! same in both packages, so no [`Style`](crate::Style) is needed; the
//! index's path (`indexPath` / `index_path`) is taken by the packages
//! themselves.

use std::path::PathBuf;

use std::sync::Arc;

use wmreplay::search::{self, HybridOptions, MAX_LIMIT, SearchIndex, SearchOptions};
use wmreplay::server::{EmbedConfig, HttpEmbedder};
use wmreplay::{Error, ReplayOptions};

use crate::{Failure, InvalidArg};

/// The largest whole number a JavaScript number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A search's options as a package received them. `None` is "not given":
/// `wmreplay search`'s default.
#[derive(Debug, Clone, Default)]
pub struct RawSearch {
    /// The most hits (default 10; 1 to [`MAX_LIMIT`]).
    pub limit: Option<f64>,
    /// Only records whose `type` is one of these.
    pub kinds: Option<Vec<String>>,
    /// Only records of this `session_id`, and those without one.
    pub session: Option<String>,
    /// Only records with `ts_ms` at least this.
    pub since: Option<f64>,
    /// Only records with `ts_ms` at most this.
    pub until: Option<f64>,
}

/// A query and its options, checked as `wmreplay search` checks them
/// before anything is read or made: the query by the engine
/// ([`search::query_words`]), the limit against [`MAX_LIMIT`].
#[derive(Debug, Clone)]
pub struct SearchRequest {
    query: String,
    options: SearchOptions,
}

impl SearchRequest {
    /// Checks `query` and `raw`: an [`InvalidArg`] for a query without a
    /// word, too long or with too many words (field `query`, the engine's
    /// message), or a limit that is not a whole number from 1 to
    /// [`MAX_LIMIT`] (field `limit`).
    pub fn new(query: String, raw: RawSearch) -> Result<SearchRequest, InvalidArg> {
        search::query_words(&query).map_err(query_error)?;
        let mut options = SearchOptions::default();
        if let Some(n) = raw.limit {
            if !(n.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&n)) {
                return Err(InvalidArg {
                    field: "limit".into(),
                    message: format!(
                        "`limit` must be a whole number from 1 to {MAX_LIMIT}, not {n}"
                    ),
                });
            }
            let n = n as usize;
            if n == 0 || n > MAX_LIMIT {
                // The engine's words for it (`SearchIndex::search` says the
                // same, but only after bringing the index up to date).
                return Err(InvalidArg {
                    field: "limit".into(),
                    message: format!("limit must be 1 to {MAX_LIMIT}, not {n}"),
                });
            }
            options.limit = n;
        }
        options.kinds = raw.kinds;
        options.session = raw.session;
        options.since = raw.since;
        options.until = raw.until;
        Ok(SearchRequest { query, options })
    }

    /// The query.
    pub fn query(&self) -> &str {
        &self.query
    }

    /// The engine's options.
    pub fn options(&self) -> &SearchOptions {
        &self.options
    }
}

/// The engine's refusal of a query or limit, as an invalid argument naming
/// what it refused; any other error as it is.
fn query_error(e: Error) -> InvalidArg {
    match e {
        Error::Query(message) => InvalidArg {
            field: if message.starts_with("limit") {
                "limit"
            } else {
                "query"
            }
            .into(),
            message,
        },
        other => InvalidArg {
            field: "query".into(),
            message: other.to_string(),
        },
    }
}

/// Hybrid search's options as a package received them: `wmreplay search
/// --embed-upstream`, `--embed-model`, `--embed-key-env`,
/// `--embed-dimensions`, `--embed-timeout` (milliseconds here),
/// `--embed-weight`.
#[derive(Debug, Clone, Default)]
pub struct RawEmbed {
    pub upstream: Option<String>,
    pub model: Option<String>,
    pub key_env: Option<String>,
    pub dimensions: Option<f64>,
    pub timeout_ms: Option<f64>,
    /// How much the vectors' ranking counts against the words' (0 to 100).
    pub weight: Option<f64>,
    /// Python's names (`embed_model`) in errors, not JavaScript's.
    pub snake: bool,
}

impl RawEmbed {
    /// The option `camel` (`embedModel`) as this package spells it.
    fn name(&self, camel: &str) -> String {
        if !self.snake {
            return camel.to_string();
        }
        let mut out = String::new();
        for c in camel.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    fn refused(&self, camel: &str, message: impl Into<String>) -> InvalidArg {
        InvalidArg {
            field: self.name(camel),
            message: message.into(),
        }
    }
}

/// The embedder `raw` asks for, checked as the CLI checks its flags:
/// `None` without `upstream` (nothing is ever called).
fn embedder(raw: &RawEmbed) -> Result<Option<(HttpEmbedder, HybridOptions)>, InvalidArg> {
    let (upstream, model) = match (&raw.upstream, &raw.model) {
        (None, None) => {
            for (set, name) in [
                (raw.key_env.is_some(), "embedKeyEnv"),
                (raw.dimensions.is_some(), "embedDimensions"),
                (raw.timeout_ms.is_some(), "embedTimeout"),
                (raw.weight.is_some(), "embedWeight"),
            ] {
                if set {
                    let (n, u, m) = (
                        raw.name(name),
                        raw.name("embedUpstream"),
                        raw.name("embedModel"),
                    );
                    return Err(raw.refused(name, format!("{n} needs {u} and {m}")));
                }
            }
            return Ok(None);
        }
        (Some(u), Some(m)) => (u, m),
        (Some(_), None) => {
            let m = format!(
                "{} needs {}",
                raw.name("embedUpstream"),
                raw.name("embedModel")
            );
            return Err(raw.refused("embedModel", m));
        }
        (None, Some(_)) => {
            let m = format!(
                "{} needs {}",
                raw.name("embedModel"),
                raw.name("embedUpstream")
            );
            return Err(raw.refused("embedUpstream", m));
        }
    };
    let mut cfg = EmbedConfig::new(upstream.clone(), model.clone());
    cfg.api_key = EmbedConfig::key_from_env(raw.key_env.as_deref()).map_err(|var| {
        let n = raw.name("embedKeyEnv");
        raw.refused(
            "embedKeyEnv",
            format!("{n} {var}: the variable is not set or empty"),
        )
    })?;
    if let Some(d) = raw.dimensions {
        if !(d.fract() == 0.0 && (1.0..=65536.0).contains(&d)) {
            let n = raw.name("embedDimensions");
            return Err(raw.refused(
                "embedDimensions",
                format!("{n} must be a whole number from 1 to 65536, not {d}"),
            ));
        }
        cfg.dimensions = Some(d as u32);
    }
    if let Some(ms) = raw.timeout_ms {
        if !(ms.is_finite() && ms > 0.0 && ms <= 86_400_000.0) {
            let n = raw.name("embedTimeout");
            let m = if raw.snake {
                format!(
                    "{n} must be seconds, more than 0 and at most 86400, not {}",
                    ms / 1000.0
                )
            } else {
                format!("{n} must be milliseconds, more than 0 and at most 86400000, not {ms}")
            };
            return Err(raw.refused("embedTimeout", m));
        }
        cfg.hybrid.query_timeout = std::time::Duration::from_millis(ms as u64);
    }
    if let Some(w) = raw.weight {
        if !(0.0..=100.0).contains(&w) {
            let n = raw.name("embedWeight");
            return Err(raw.refused(
                "embedWeight",
                format!("{n} must be a number from 0 to 100, not {w}"),
            ));
        }
        cfg.hybrid.vector_weight = w;
    }
    // As the command line: each search waits until the records are
    // embedded, or their embedding failed.
    cfg.hybrid.wait = None;
    let e = HttpEmbedder::new(&cfg).map_err(|m| raw.refused("embedUpstream", m))?;
    Ok(Some((e, cfg.hybrid)))
}

/// The index of the log at `log`, kept at `index` or, by default, next to
/// the log ([`SearchIndex::path_for`]: `LOG.wmreplay.idx`), its words
/// analysed in `language` (`wmreplay search --language`; default English),
/// hybrid when `embed` names a model: an [`InvalidArg`] (field `language`
/// or the embedding option's) for a name or option the engine refuses.
/// Nothing is read, made or called until the first search or refresh.
pub fn open_index(
    log: PathBuf,
    index: Option<PathBuf>,
    language: Option<&str>,
    embed: &RawEmbed,
) -> Result<SearchIndex, InvalidArg> {
    let language = match language {
        None => search::Language::default(),
        Some(name) => search::Language::parse(name).map_err(|e| InvalidArg {
            field: "language".into(),
            message: match e {
                Error::Query(m) => m,
                e => e.to_string(),
            },
        })?,
    };
    let embedder = embedder(embed)?;
    let path = index.unwrap_or_else(|| SearchIndex::path_for(&log));
    let index = SearchIndex::in_language(log, path, &ReplayOptions::default(), language);
    Ok(match embedder {
        Some((e, options)) => index.with_embedder(Arc::new(e), options),
        None => index,
    })
}

/// Brings `index` up to date, then searches it: the hits, best first, as a
/// JSON array of [`Hit::to_json`](wmreplay::search::Hit::to_json) objects
/// (`{"offset","ts_ms","type","score","record"}`, what `wmreplay search
/// --format ndjson` prints one per line). A log that does not exist finds
/// nothing: `[]`.
pub fn search(index: &mut SearchIndex, request: &SearchRequest) -> Result<String, Failure> {
    let hits = index
        .search(&request.query, &request.options)
        .map_err(|e| match e {
            Error::Query(_) => Failure::Invalid(query_error(e)),
            e => Failure::Engine(e),
        })?;
    let mut json = String::from("[");
    for (i, h) in hits.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push_str(&h.to_json());
    }
    json.push(']');
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str, limit: Option<f64>) -> InvalidArg {
        let raw = RawSearch {
            limit,
            ..RawSearch::default()
        };
        SearchRequest::new(query.into(), raw).expect_err("refused")
    }

    #[test]
    fn queries_and_limits_are_checked_before_anything_is_read() {
        let e = refused("  ?! ", None);
        assert_eq!(e.field, "query");
        assert!(e.message.contains("no word"), "{}", e.message);
        assert_eq!(refused(&"a".repeat(5000), None).field, "query");
        for (limit, message) in [
            (0.0, "limit must be 1 to 1000, not 0"),
            (1001.0, "limit must be 1 to 1000, not 1001"),
            (
                2.5,
                "`limit` must be a whole number from 1 to 1000, not 2.5",
            ),
            (
                -1.0,
                "`limit` must be a whole number from 1 to 1000, not -1",
            ),
        ] {
            let e = refused("x", Some(limit));
            assert_eq!((e.field.as_str(), e.message.as_str()), ("limit", message));
        }
        let r = SearchRequest::new("x".into(), RawSearch::default()).unwrap();
        assert_eq!(r.options(), &SearchOptions::default());
    }

    #[test]
    fn a_missing_log_finds_nothing() {
        let dir =
            std::env::temp_dir().join(format!("wmreplay-shared-search-{}", std::process::id()));
        let mut index = open_index(dir.join("none.log"), None, None, &RawEmbed::default()).unwrap();
        let r = SearchRequest::new("anything".into(), RawSearch::default()).unwrap();
        assert_eq!(search(&mut index, &r).unwrap(), "[]");
    }
}
