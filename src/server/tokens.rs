//! Tokens scoped to logs (`serve --token-file FILE`): each token opens only
//! the logs its line names, to read, or to read and write; an `admin` token
//! opens every log and `/metrics`. The file holds the tokens' SHA-256
//! hashes, never the tokens, and is read again on SIGHUP.
//!
//! ```text
//! # sha256 of the token                                                   access  logs
//! sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  write   alpha,team-*
//! sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  read    *
//! sha256:fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13  admin
//! ```
//!
//! A line is a hash, an access (`read`, `write` or `admin`) and, but for
//! `admin`, the logs: ids separated by commas, an id ending in `*` for
//! every id it begins, or `*` for all. Blank lines and `#` comments are
//! skipped. `wmreplay token` makes a token and its line.
//!
//! A request's check is a hash of the token it presents and a look-up
//! (microseconds, whatever the number of tokens or logs).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

/// What a token may do with the logs it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Read: replays, context, search, stats, facts.
    Read,
    /// Read and write: turns, records, facts, MCP.
    Write,
    /// Every log, and `/metrics`.
    Admin,
}

/// The logs one token opens.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    access: Access,
    all: bool,
    ids: HashSet<String>,
    prefixes: Vec<String>,
}

impl Grant {
    /// Whether this grant opens log `id` for `access`.
    pub fn opens(&self, id: &str, access: Access) -> bool {
        if access > self.access {
            return false;
        }
        self.access == Access::Admin
            || self.all
            || self.ids.contains(id)
            || self.prefixes.iter().any(|p| id.starts_with(p.as_str()))
    }

    /// The grant's access.
    pub fn access(&self) -> Access {
        self.access
    }
}

/// A token file, read.
#[derive(Debug, Clone, Default)]
pub struct TokenFile {
    grants: HashMap<[u8; 32], Arc<Grant>>,
}

/// A token's SHA-256, as the file names it (`sha256:` and 64 hex digits).
pub fn token_line_hash(token: &str) -> String {
    let d = Sha256::digest(token.as_bytes());
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

impl TokenFile {
    /// Reads a token file's text; an error names the line and what is
    /// wrong with it (`name`: the file, for the message).
    pub fn parse(text: &str, name: &str) -> Result<TokenFile, String> {
        let mut grants = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let at = |why: String| format!("{name}:{}: {why}", i + 1);
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let hash = parts.next().unwrap_or("");
            let access = parts.next();
            let logs = parts.next();
            if parts.next().is_some() {
                return Err(at(
                    "too many fields: a line is `sha256:<hex> <access> <logs>` (no spaces in the logs)"
                        .into(),
                ));
            }
            let digest = parse_hash(hash).ok_or_else(|| {
                at(format!(
                    "{hash:?} is not a token's hash: write sha256: and 64 hex digits \
                     (`wmreplay token` prints the line for a new token)"
                ))
            })?;
            let access = match access {
                Some("read") => Access::Read,
                Some("write") => Access::Write,
                Some("admin") => Access::Admin,
                Some(other) => {
                    return Err(at(format!(
                        "{other:?} is not an access: read, write or admin"
                    )));
                }
                None => return Err(at("the access is missing: read, write or admin".into())),
            };
            let mut grant = Grant {
                access,
                all: false,
                ids: HashSet::new(),
                prefixes: Vec::new(),
            };
            match (access, logs) {
                (Access::Admin, None) => {}
                (Access::Admin, Some(_)) => {
                    return Err(at("an admin token opens every log: name none".into()));
                }
                (_, None) => {
                    return Err(at(
                        "the logs are missing: ids separated by commas, `prefix*`, or `*`".into(),
                    ));
                }
                (_, Some(logs)) => {
                    for id in logs.split(',') {
                        match id.strip_suffix('*') {
                            Some("") => grant.all = true,
                            Some(p) if valid_id_part(p) => grant.prefixes.push(p.to_string()),
                            None if valid_id_part(id) => {
                                grant.ids.insert(id.to_string());
                            }
                            _ => {
                                return Err(at(format!(
                                    "{id:?} is not a log id: 1 to 128 of A-Z a-z 0-9 . _ -, \
                                     or an id's beginning followed by *"
                                )));
                            }
                        }
                    }
                }
            }
            if grants.insert(digest, Arc::new(grant)).is_some() {
                return Err(at("this token's hash is on an earlier line too".into()));
            }
        }
        Ok(TokenFile { grants })
    }

    /// Reads the token file at `path`.
    pub fn load(path: &Path) -> Result<TokenFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
        TokenFile::parse(&text, &path.display().to_string())
    }

    /// The grant of the token a client presented, if the file has one.
    pub fn grant(&self, token: &[u8]) -> Option<&Arc<Grant>> {
        let d: [u8; 32] = Sha256::digest(token).into();
        self.grants.get(&d)
    }

    /// How many tokens the file holds.
    pub fn len(&self) -> usize {
        self.grants.len()
    }

    /// Whether the file holds no token.
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }
}

fn parse_hash(s: &str) -> Option<[u8; 32]> {
    let hex = s.strip_prefix("sha256:")?;
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Whether `s` may be (the beginning of) a log id.
fn valid_id_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The token file a server checks requests against, read again on
/// [`reload`](Tokens::reload).
#[derive(Debug)]
pub(crate) struct Tokens {
    path: PathBuf,
    file: RwLock<Arc<TokenFile>>,
}

impl Tokens {
    /// Reads `path`.
    pub(crate) fn open(path: &Path) -> Result<Tokens, String> {
        Ok(Tokens {
            path: path.to_path_buf(),
            file: RwLock::new(Arc::new(TokenFile::load(path)?)),
        })
    }

    /// The file as last read.
    pub(crate) fn current(&self) -> Arc<TokenFile> {
        self.file.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the file again; on an error the tokens stay as they were.
    pub(crate) fn reload(&self) {
        match TokenFile::load(&self.path) {
            Ok(f) => {
                let n = f.len();
                *self.file.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(f);
                tracing::info!(tokens = n, "the token file was read again");
            }
            Err(e) => {
                tracing::error!(error = %e, "the token file could not be read again; its tokens stay as they were");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(lines: &[(&str, &str)]) -> String {
        lines
            .iter()
            .map(|(token, rest)| format!("{}  {rest}\n", token_line_hash(token)))
            .collect()
    }

    #[test]
    fn a_token_opens_its_logs_for_its_access_and_nothing_else() {
        let text = format!(
            "# tokens\n\n{}",
            file(&[
                ("tok-alpha", "write alpha,team-*"),
                ("tok-reader", "read *"),
                ("tok-admin", "admin # the operator"),
            ])
        );
        let f = TokenFile::parse(&text, "t").unwrap();
        assert_eq!(f.len(), 3);
        let a = f.grant(b"tok-alpha").unwrap();
        assert!(a.opens("alpha", Access::Write) && a.opens("alpha", Access::Read));
        assert!(a.opens("team-7", Access::Write));
        assert!(!a.opens("beta", Access::Read));
        assert!(!a.opens("alphabet", Access::Read), "an id is whole");
        assert!(
            !a.opens("team", Access::Read),
            "a prefix opens what it begins"
        );
        assert!(!a.opens("alpha", Access::Admin));
        let r = f.grant(b"tok-reader").unwrap();
        assert!(r.opens("anything", Access::Read));
        assert!(!r.opens("anything", Access::Write));
        let admin = f.grant(b"tok-admin").unwrap();
        assert!(admin.opens("x", Access::Admin) && admin.opens("y", Access::Write));
        assert!(f.grant(b"tok-alph").is_none());
        assert!(f.grant(b"").is_none());
    }

    #[test]
    fn a_bad_line_is_named_with_what_is_wrong() {
        let h = token_line_hash("t");
        for (text, says) in [
            (
                "sha256:00 write a".to_string(),
                "t:1: \"sha256:00\" is not a token's hash",
            ),
            (format!("{h} owner a"), "t:1: \"owner\" is not an access"),
            (h.clone(), "t:1: the access is missing"),
            (format!("\n{h} write"), "t:2: the logs are missing"),
            (format!("{h} write a/b"), "t:1: \"a/b\" is not a log id"),
            (
                format!("{h} admin a"),
                "t:1: an admin token opens every log",
            ),
            (format!("{h} read a b"), "t:1: too many fields"),
            (
                format!("{h} read a\n{h} write b"),
                "t:2: this token's hash is on an earlier line",
            ),
        ] {
            let e = TokenFile::parse(&text, "t").unwrap_err();
            assert!(e.starts_with(says), "{text:?}: {e}");
        }
    }
}
