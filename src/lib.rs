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
//! To replay a file, open it with [`LogBytes::open`] (a missing file is an
//! empty log) and pass [`LogBytes::bytes`] to [`replay`].

#![warn(missing_docs)]

pub mod cache;
pub mod corpus;
mod error;
pub mod escape;
pub mod js;
pub mod json;
pub mod lines;
pub mod live;
pub mod order;
pub mod parse;
pub mod render;
mod replay;
pub mod request;
pub mod scan;
pub mod select;
#[cfg(feature = "server")]
pub mod server;
mod simd;
pub mod source;
#[cfg(feature = "state")]
pub mod state;
pub mod tokens;
pub mod xml;

pub use error::Error;
pub use live::{LiveInfo, LiveReplay, Refresh};
pub use parse::{DEFAULT_MAX_DEPTH, Record, SkipReason, Validator};
pub use render::Format;
pub use replay::{
    Parsed, RecordMode, Replay, ReplayOptions, ReplayStats, Skip, StageTimings, arena_origin,
    parse_range, replay, replay_with_progress,
};
pub use request::{
    CurrentRequest, SYSTEM_RULE, current_user_request_text, request_envelope, system_prompt,
};
pub use select::{Pending, SelectReport, Selection, WindowStart};
pub use source::{FileIdentity, LogBytes, ReadMode};
pub use tokens::Tokenizer;
