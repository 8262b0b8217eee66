//! wmreplay replays an append-only JSONL working-memory log into the messages
//! of an LLM request: every valid record, in `ts_ms` order, as a labelled
//! `WM_KIND=…` message, followed by the live `CURRENT_USER_REQUEST`.
//!
//! The core works on a byte slice and has no I/O of its own beyond
//! [`LogBytes`], which maps or reads a file. Replay never fails on any input:
//! lines that are not valid JSON, or not records, are skipped, counted and
//! located in [`ReplayStats`].
//!
//! ```
//! use wmreplay::{replay, CurrentRequest, Format, ReplayOptions, SYSTEM_RULE};
//!
//! let log = b"{\"type\":\"text_input\",\"ts_ms\":2,\"text\":\"hi\"}\n\
//!             not json\n\
//!             {\"type\":\"wm_event\",\"ts_ms\":1}\n";
//! let replayed = replay(log, &ReplayOptions::default());
//! assert_eq!(replayed.stats().parsed_entries, 2);
//! assert_eq!(replayed.stats().skipped_invalid_json, 1);
//!
//! let body = replayed.render_request(
//!     Format::Anthropic,
//!     SYSTEM_RULE,
//!     &CurrentRequest { text: "hello", session_id: None },
//! );
//! let body = String::from_utf8(body).unwrap();
//! // The earlier timestamp comes first, and the live request last.
//! let first = body.find("WM_KIND=wm_event").unwrap();
//! let second = body.find("WM_KIND=text_input").unwrap();
//! assert!(first < second);
//! assert!(body.ends_with(r#"CURRENT_USER_REQUEST\nsession_id: none\nuser_text: hello"}]}]}"#));
//! ```
//!
//! What an embedder needs, stage by stage:
//! - **Open a log**: [`LogBytes::open`] (a missing file is an empty log);
//!   [`LogBytes::verify`] after use.
//! - **Replay it**: [`replay`] with [`ReplayOptions`] gives a [`Replay`]:
//!   its [`Record`]s in order, its [`ReplayStats`] and located [`Skip`]s.
//!   [`try_replay`] (and the `try_render_*` methods) return an [`AllocError`]
//!   instead of aborting when what they keep does not fit in memory.
//! - **Select**: [`Selection`] (filters, `tail` and token windows,
//!   cache-stable trimming, the pending mark) through [`Replay::select`].
//! - **Render**: [`Replay::render_request`] / [`Replay::write_request`] in a
//!   [`Format`], or [`Replay::render_messages`]; [`request_envelope`] gives
//!   the bytes around the messages; [`CachePolicy`] places prompt-cache
//!   breakpoints.
//! - **A request to POST**: [`request_fields`] checks request parameters
//!   against the provider's rules; a [`RequestSpec`] (fields, system,
//!   current request, cache) rendered by [`Replay::render_request_with`].
//! - **Keep it live**: [`LiveReplay`] parses only what was appended since the
//!   last call.
//! - **Append**: [`append()`] writes records with the server's rules (one
//!   locked, synced write; `ts_ms` never below the log's last).
//! - **Sessions**: [`state`] keeps session positions, window starts and
//!   idempotency keys next to the log (feature `state`).
//! - **Serve**: [`server::serve`] with a [`server::Config`] (feature
//!   `server`).
//!
//! The data flow and where each stage lives: `docs/architecture.md`; the
//! contract every test holds the engine to: `docs/contract.md`.

#![warn(missing_docs)]

mod append;
mod buffers;
/// Not API: the `wmreplay` command line, compiled into the library so that
/// the binary is one call (the command line's server code is instantiated
/// once, with the server's own: the binary built in seconds, not a minute).
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
mod corpus;
mod error;
mod escape;
mod input;
mod live;
mod order;
mod os;
mod parse;
mod render;
mod replay;
#[cfg(feature = "search")]
pub mod search;
mod select;
#[cfg(feature = "server")]
pub mod server;
mod simd;
#[cfg(feature = "state")]
pub mod state;

pub use append::{AppendError, AppendReport, AppendedRecord, append};
pub use error::{AllocError, Error};
pub use input::{FileIdentity, LogBytes, ReadMode};
pub use live::{LiveInfo, LiveReplay, Refresh};
pub use parse::json::JsonErrorKind;
pub use parse::{DEFAULT_MAX_DEPTH, Record, SkipReason, Validator};
pub use render::Format;
pub use render::cache::{CacheMemory, CachePolicy, CacheTtl};
pub use render::fields::{
    ParamError, RESERVED_PARAMS, RequestSpec, check_params, parse_params, request_fields,
};
pub use render::request::{
    CurrentRequest, SYSTEM_RULE, SizedRequest, current_user_request_text, request_envelope,
    system_prompt,
};
pub use replay::{
    MAX_THREADS_PER_CORE, RecordMode, Replay, ReplayOptions, ReplayStats, Skip, StageTimings,
    replay, replay_with_progress,
};
pub use replay::{try_replay, try_replay_with_progress};
pub use select::tokens::Tokenizer;
pub use select::{Pending, SelectReport, Selection, WindowStart};

/// The Rust examples of docs/library.md, compiled (and run) by `cargo test
/// --doc`: the guide's code is checked like the API's own examples.
#[cfg(all(doctest, feature = "search"))]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryGuide;

/// Not API: the internals that the fuzz targets, benchmarks and tests reach
/// into (the scanner, the simple validator, the generator…). Anything here
/// may change in any release; embedders use the crate root.
#[doc(hidden)]
pub mod __internals {
    /// The generator of realistic logs (`wmreplay gen`, the benchmarks).
    pub mod corpus {
        pub use crate::corpus::*;
    }
    /// JSON.stringify's escaping and JavaScript's number formatting.
    pub mod escape {
        pub use crate::escape::*;
    }
    /// Search as a plain scan of the log (the index's oracle and baseline).
    #[cfg(feature = "search")]
    pub mod search_scan {
        pub use crate::search::naive::search;
    }
    /// Opening a log: what checking a prefix costs.
    pub mod input {
        pub use crate::input::fingerprinted_bytes;
    }
    /// Line splitting and chunking.
    pub mod lines {
        pub use crate::input::lines::*;
    }
    /// Sorting by `ts_ms`.
    pub mod order {
        pub use crate::order::*;
    }
    /// One line to a record: the line parser.
    pub mod parse {
        pub use crate::parse::*;
    }
    /// The simple, exact JSON validator and field scan (the oracle).
    pub mod json {
        pub use crate::parse::json::*;
    }
    /// The one-pass scanner.
    pub mod scan {
        pub use crate::parse::scan::*;
    }
    /// The JavaScript-exact record.
    pub mod js {
        pub use crate::parse::js::*;
    }
    /// Message rendering.
    pub mod render {
        pub use crate::render::*;
    }
    /// The request's pieces.
    pub mod request {
        pub use crate::render::request::*;
    }
    /// `<memory_context>` documents.
    pub mod xml {
        pub use crate::render::xml::*;
    }
    /// Prompt-cache breakpoint placement.
    pub mod cache {
        pub use crate::render::cache::*;
    }
    /// The parallel driver's pieces.
    pub mod replay {
        pub use crate::replay::*;
    }
    /// Windows and filters.
    pub mod fold {
        pub use crate::select::fold::*;
    }
    pub mod select {
        pub use crate::select::*;
    }
    /// Tokenizers.
    pub mod tokens {
        pub use crate::select::tokens::*;
    }
}
