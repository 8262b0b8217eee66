//! What an index commit records about the log it is for, the fields of its
//! documents, and the error a search's own failures become: shared by
//! reading and writing the index.

use std::path::Path;

use crate::error::Error;

/// Bumped whenever what is indexed, or how, changes: an index of another
/// version is rebuilt.
pub(super) const VERSION: u64 = 4;

/// The fields of a document: its prose's words, its identifiers, its
/// line's offset.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fields {
    pub(super) body: tantivy::schema::Field,
    pub(super) ids: tantivy::schema::Field,
    pub(super) offset: tantivy::schema::Field,
}

/// The log's state an index commit is for (its payload).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Meta {
    pub(super) version: u64,
    pub(super) dev: u64,
    pub(super) inode: u64,
    pub(super) len: u64,
    pub(super) fingerprint: u64,
    pub(super) max_depth: u64,
    /// The language its words were analysed in (`Language::name`).
    pub(super) language: String,
    /// The boot the commit was written in when it was not synced (`""`
    /// when it was): after a reboot, such an index is built again.
    pub(super) boot: String,
}

pub(super) fn err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Search {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}
