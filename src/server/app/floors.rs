//! Where the records of a log's sessions begin, as far as the history
//! lookups read back (`compat/session_tail.rs`). The log only grows, so
//! once a lookup has read all of its span, nothing of the session lies
//! before the oldest record it found (or, with none, before the log's end
//! as it was), and the session's next lookups stop there.
//!
//! A session the floors do not know yet (a new conversation's first
//! request) is looked for once among the sessions of the whole span: one
//! walk notes where every session named in it begins (an *index*, kept up
//! to date by the walks after it over what was appended since), so a
//! session absent from it has nothing before the index's end, and its
//! lookup reads only what came after.

use std::collections::HashMap;
use std::sync::Mutex;

/// Sessions a log's [`Floors`] remembers (those looked up most lately);
/// an index of more than this many is not kept.
const FLOORS: usize = 4096;

/// What a floor holds in memory besides its session's id (the entry, the
/// list's links, the map's slot), as counted against `--max-live-bytes`.
const ENTRY: u64 = 96;

/// Where the records of a log's sessions begin (a log's, for the life of
/// its state in the server).
pub(crate) struct Floors {
    seen: Mutex<Seen>,
}

struct Seen {
    floors: lru::LruCache<Option<String>, Floor>,
    /// What `floors` holds, about.
    bytes: u64,
    /// Every session named in the log's span up to `end` has its floor
    /// in `floors`.
    index: Option<Index>,
}

#[derive(Clone, Copy)]
struct Floor {
    /// The log's file (device, inode) and length when it was found.
    file: (u64, u64),
    len: u64,
    /// No record of the session lies before this offset (within the span
    /// read then).
    at: u64,
}

#[derive(Clone, Copy)]
struct Index {
    file: (u64, u64),
    end: u64,
}

/// What the floors know of a session.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Known {
    /// Nothing of it lies before this offset.
    From(u64),
    /// Not named before the index's end: what was appended since is read
    /// (and indexed) to know.
    After(u64),
    /// Nothing: the whole span is read (and indexed, for a session).
    Nothing,
}

impl Default for Floors {
    /// None known: nothing is held until a lookup learns one (a log's
    /// state costs nothing more for it).
    fn default() -> Floors {
        Floors {
            seen: Mutex::new(Seen {
                floors: lru::LruCache::unbounded(),
                bytes: 0,
                index: None,
            }),
        }
    }
}

impl Floors {
    /// What is known of where `session`'s records begin in the log's
    /// `file`, `len` bytes long now: nothing when no earlier lookup read
    /// this file (another file at the path, or one shorter than it was:
    /// rewritten).
    pub(crate) fn get(&self, file: Option<(u64, u64)>, len: u64, session: Option<&str>) -> Known {
        let Some(file) = file else {
            return Known::Nothing;
        };
        let mut seen = self.lock();
        if let Some(f) = seen.floors.get(&session.map(str::to_string))
            && f.file == file
            && len >= f.len
        {
            return Known::From(f.at);
        }
        match seen.index {
            Some(i) if session.is_some() && i.file == file && len >= i.end => Known::After(i.end),
            _ => Known::Nothing,
        }
    }

    /// Remembers that no record of `session`'s conversation lies before
    /// `at` in the log's `file`, `len` bytes long.
    pub(crate) fn learn(&self, file: Option<(u64, u64)>, len: u64, session: Option<&str>, at: u64) {
        let Some(file) = file else {
            return;
        };
        let mut seen = self.lock();
        let _ = seen.put(session.map(str::to_string), Floor { file, len, at });
    }

    /// Takes in a walk over the log's `file` (`len` bytes long) from where
    /// `known` said down to its span's start, or to the index's end: where
    /// each session named in it begins (`begins`), and, when the walk read
    /// all of that (`whole`), that every session named before `end` (the
    /// log's last whole line's end) is now in the index.
    pub(crate) fn index(
        &self,
        file: Option<(u64, u64)>,
        len: u64,
        known: Known,
        begins: HashMap<String, u64>,
        whole: Option<u64>,
    ) {
        let Some(file) = file else {
            return;
        };
        let mut seen = self.lock();
        if let Known::Nothing = known {
            seen.index = None;
        }
        let mut lost = false;
        for (session, at) in begins {
            let key = Some(session);
            // An older floor stays: the walk read only what came after it.
            let older = seen
                .floors
                .peek(&key)
                .is_some_and(|f| f.file == file && f.at <= at);
            if !older {
                lost |= seen.put(key, Floor { file, len, at });
            }
        }
        seen.index = match (whole, known) {
            _ if lost => None,
            (Some(end), Known::Nothing) => Some(Index { file, end }),
            (Some(end), Known::After(_)) => seen.index.map(|i| Index { end, ..i }),
            _ => None,
        };
    }

    /// Forgets every floor: the log was rewritten (its state rebuilt).
    pub(crate) fn clear(&self) {
        let mut seen = self.lock();
        seen.floors.clear();
        seen.bytes = 0;
        seen.index = None;
    }

    /// About what the floors hold in memory.
    pub(crate) fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Seen {
    /// Puts a floor in, the least recently used out past [`FLOORS`] (and
    /// with it the index, which no longer knows every session): whether
    /// one was let go.
    fn put(&mut self, key: Option<String>, floor: Floor) -> bool {
        let size = entry(&key);
        if self.floors.push(key, floor).is_none() {
            self.bytes += size;
        }
        if self.floors.len() <= FLOORS {
            return false;
        }
        if let Some((key, _)) = self.floors.pop_lru() {
            self.bytes = self.bytes.saturating_sub(entry(&key));
        }
        self.index = None;
        true
    }
}

/// What a floor of `key` holds in memory, about.
fn entry(key: &Option<String>) -> u64 {
    ENTRY + key.as_ref().map_or(0, |k| k.capacity() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Option<(u64, u64)> = Some((1, 2));

    #[test]
    fn a_session_is_known_from_its_floor_or_after_the_index_on_the_same_file_only() {
        let floors = Floors::default();
        assert_eq!(floors.get(F, 100, Some("a")), Known::Nothing);
        let begins = HashMap::from([("a".to_string(), 40), ("b".to_string(), 10)]);
        floors.index(F, 100, Known::Nothing, begins, Some(100));
        assert_eq!(floors.get(F, 150, Some("a")), Known::From(40));
        assert_eq!(floors.get(F, 150, Some("c")), Known::After(100));
        // Records without a session are not indexed.
        assert_eq!(floors.get(F, 150, None), Known::Nothing);
        // Another file, or this one shorter than it was: nothing known.
        assert_eq!(floors.get(Some((1, 3)), 150, Some("a")), Known::Nothing);
        assert_eq!(floors.get(F, 99, Some("c")), Known::Nothing);
        assert_eq!(floors.get(None, 150, Some("a")), Known::Nothing);
        // A walk over what came after the index: new sessions join it, an
        // older floor stays.
        let begins = HashMap::from([("c".to_string(), 120), ("a".to_string(), 130)]);
        floors.index(F, 150, Known::After(100), begins, Some(150));
        assert_eq!(floors.get(F, 150, Some("a")), Known::From(40));
        assert_eq!(floors.get(F, 150, Some("c")), Known::From(120));
        assert_eq!(floors.get(F, 160, Some("d")), Known::After(150));
        // A walk cut short leaves no index.
        floors.index(F, 160, Known::After(150), HashMap::new(), None);
        assert_eq!(floors.get(F, 160, Some("d")), Known::Nothing);
        floors.clear();
        assert_eq!(floors.get(F, 160, Some("a")), Known::Nothing);
    }

    #[test]
    fn an_index_that_loses_a_floor_is_dropped() {
        let floors = Floors::default();
        let begins = (0..FLOORS as u64)
            .map(|i| (format!("s{i}"), i))
            .collect::<HashMap<_, _>>();
        floors.index(F, 1 << 20, Known::Nothing, begins, Some(1 << 20));
        assert_eq!(floors.get(F, 1 << 20, Some("new")), Known::After(1 << 20));
        let held = floors.bytes();
        assert!(held >= FLOORS as u64 * ENTRY, "{held}");
        floors.learn(F, 1 << 20, None, 7);
        // One floor was let go: a session absent from the floors may be it.
        assert_eq!(floors.get(F, 1 << 20, Some("new")), Known::Nothing);
        assert_eq!(floors.get(F, 1 << 20, None), Known::From(7));
        assert!(floors.bytes() < held, "a floor with no id for one with one");
        floors.clear();
        assert_eq!(floors.bytes(), 0);
    }
}
