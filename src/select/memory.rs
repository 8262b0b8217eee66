//! Memory beyond the window, as records of the log itself: the newest
//! `wm_summary` stands for the records it covers (`--summaries`), and the
//! `wm_fact` records become one message of the latest value of every live
//! key (`--facts`).
//!
//! **Summaries.** A summary is `{"type":"wm_summary","ts_ms":T,"covers":
//! {"ts_ms":X,"offset":O},"text":"…"}`: it folds every record up to the one
//! at `(X, O)` in replay order (`ts_ms`, then file position). It is valid
//! when `covers.ts_ms` is a number, `covers.offset` a non-negative integer
//! and `text` a string. The newest valid one (last in the file) is replayed
//! first; the records it covers *and that were written before it* are left
//! out; records written after it always stay, even when their `ts_ms` sorts
//! them into the covered range; no other `wm_summary` is replayed.
//!
//! **Facts.** `{"type":"wm_fact","ts_ms":T,"key":"user.name","value":V}`
//! sets a key (`"value": null` deletes it); the latest in replay order wins.
//! The facts are not replayed one by one: one message `WM_KIND=wm_facts`,
//! placed just before `CURRENT_USER_REQUEST`, holds
//! `{"type":"wm_facts","ts_ms":T,"facts":{…}}` with every live key in byte
//! order of its name and each value as written in its record, `T` being the
//! `ts_ms` of the newest `wm_fact`. Facts are read from every record, so a
//! summary, a filter or a window never drops one.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::escape::JsNumber;
use crate::order::ts_key;
use crate::parse::Record;

/// The `type` of a summary record.
pub const SUMMARY: &str = "wm_summary";
/// The `type` of a fact record.
pub const FACT: &str = "wm_fact";
/// The `type` of the message the facts are rendered as.
pub const FACTS: &str = "wm_facts";

#[derive(Deserialize)]
struct Covers {
    ts_ms: f64,
    offset: u64,
}

#[derive(Deserialize)]
struct Summary {
    covers: Covers,
    #[allow(dead_code)]
    text: String,
}

#[derive(Deserialize)]
struct Fact<'a> {
    key: String,
    #[serde(borrow)]
    value: &'a RawValue,
}

/// Where a summary's cover ends, in replay order: `(ts_key, offset)`;
/// `None` for a summary that is not valid.
pub(crate) fn cover_of(r: &Record, log: &[u8]) -> Option<(u64, u64)> {
    let s: Summary = serde_json::from_slice(r.line(log)).ok()?;
    s.covers
        .ts_ms
        .is_finite()
        .then(|| (ts_key(s.covers.ts_ms), s.covers.offset))
}

/// Whether the summary at offset `at`, covering up to `cover` (`ts_key`,
/// offset), leaves out the record at `offset` whose `ts_ms` key is `key`:
/// it is at or before the cover in replay order and was written before the
/// summary. The one statement of the rule, for every replay that applies it.
pub(crate) fn covered(at: u64, cover: (u64, u64), key: u64, offset: u64) -> bool {
    offset < at && (key, offset) <= cover
}

/// Applies the newest valid summary to `records` (replay order): removes
/// every summary and the records it covers that were written before it,
/// and returns it, to be replayed first. `origin(offset)` is the log
/// offset a record's `offset` stands for. `None` (and nothing removed)
/// without a valid summary.
pub(crate) fn take_summary(
    records: &mut Vec<Record>,
    log: &[u8],
    origin: impl Fn(u64) -> u64,
) -> Option<Record> {
    let mut newest: Option<(u64, Record, (u64, u64))> = None;
    for r in records.iter() {
        if !r.kind_is(log, SUMMARY) {
            continue;
        }
        let at = origin(r.offset);
        if newest.as_ref().is_some_and(|(n, _, _)| *n > at) {
            continue;
        }
        if let Some(cover) = cover_of(r, log) {
            newest = Some((at, *r, cover));
        }
    }
    let (at, summary, cover) = newest?;
    records.retain(|r| {
        if r.kind_is(log, SUMMARY) {
            return false;
        }
        !covered(at, cover, ts_key(r.ts), origin(r.offset))
    });
    Some(summary)
}

/// A fact record's key and value (`None`: `null`, a delete); `None` for a
/// malformed fact.
pub(crate) fn fact_of(r: &Record, log: &[u8]) -> Option<(String, Option<String>)> {
    let f: Fact<'_> = serde_json::from_slice(r.line(log)).ok()?;
    let v = f.value.get();
    Some((f.key, (v != "null").then(|| v.to_string())))
}

/// The `wm_facts` message text for the facts `(ts_ms, key, value)` in
/// replay order (a `None` value deletes its key); `None` when no key is
/// left live.
pub(crate) fn facts_message<'f>(
    facts: impl Iterator<Item = (f64, &'f str, Option<&'f str>)>,
) -> Option<String> {
    let mut table = FactTable::default();
    for (i, (ts, k, v)) in facts.enumerate() {
        table.set((0, i as u64), ts, k, v);
    }
    table.message()
}

/// The keyed facts of a log, kept as records arrive in any order: for each
/// key, the fact latest in replay order (`(ts_key, offset)`), and the
/// `ts_ms` of the latest fact of all. Its [`message`](Self::message) is
/// what [`facts_message`] gives for the same facts in replay order, made in
/// time proportional to the live keys, not to the facts ever written.
#[derive(Debug, Default, Clone)]
pub(crate) struct FactTable {
    /// Key → (replay order, value; `None`: deleted).
    keys: std::collections::BTreeMap<String, ((u64, u64), Option<String>)>,
    /// The latest fact's replay order and `ts_ms`.
    newest: Option<((u64, u64), f64)>,
    /// The message, made again only after a change.
    text: Option<Option<String>>,
}

impl FactTable {
    /// Records fact `key` = `value` (`None`: a delete) at replay order
    /// `order`; it wins over an earlier fact of its key, whatever arrived
    /// first.
    pub(crate) fn set(&mut self, order: (u64, u64), ts: f64, key: &str, value: Option<&str>) {
        if self.newest.is_none_or(|(o, _)| order > o) {
            self.newest = Some((order, ts));
            self.text = None;
        }
        match self.keys.get_mut(key) {
            Some((o, _)) if *o > order => {}
            Some(slot) => {
                *slot = (order, value.map(str::to_string));
                self.text = None;
            }
            None => {
                self.keys
                    .insert(key.to_string(), (order, value.map(str::to_string)));
                self.text = None;
            }
        }
    }

    /// The `ts_ms` of `key`'s latest fact, if it has one (live or deleted).
    pub(crate) fn latest_ts(&self, key: &str) -> Option<f64> {
        self.keys
            .get(key)
            .map(|((k, _), _)| crate::order::key_ts(*k))
    }

    /// The `wm_facts` message text, `None` when no key is live.
    pub(crate) fn message(&mut self) -> Option<String> {
        if let Some(text) = &self.text {
            return text.clone();
        }
        let text = self.render();
        self.text = Some(text.clone());
        text
    }

    /// [`message`](Self::message) without keeping it.
    pub(crate) fn message_now(&self) -> Option<String> {
        match &self.text {
            Some(text) => text.clone(),
            None => self.render(),
        }
    }

    fn render(&self) -> Option<String> {
        let mut live = self
            .keys
            .iter()
            .filter_map(|(k, (_, v))| v.as_deref().map(|v| (k, v)))
            .peekable();
        live.peek()?;
        let ts = JsNumber::new(self.newest.map_or(0.0, |(_, ts)| ts));
        let ts = std::str::from_utf8(ts.as_bytes()).unwrap_or("0");
        let mut json = format!("{{\"type\":\"{FACTS}\",\"ts_ms\":{ts},\"facts\":{{");
        for (i, (k, v)) in live.enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(&serde_json::to_string(k).expect("a string serialises"));
            json.push(':');
            json.push_str(v);
        }
        json.push_str("}}");
        Some(format!("WM_KIND={FACTS}\nts_ms: {ts}\nWM_JSON: {json}"))
    }
}

/// Takes every `wm_fact` out of `records` (replay order) and gives the text
/// of the `wm_facts` message (see the module), or `None` when no key is
/// live. Malformed facts (no string `key`, no `value`) are dropped unread.
pub(crate) fn take_facts(records: &mut Vec<Record>, log: &[u8]) -> Option<String> {
    let mut facts: Vec<(f64, String, Option<String>)> = Vec::new();
    records.retain(|r| {
        if !r.kind_is(log, FACT) {
            return true;
        }
        if let Some((k, v)) = fact_of(r, log) {
            facts.push((r.ts, k, v));
        }
        false
    });
    facts_message(
        facts
            .iter()
            .map(|(ts, k, v)| (*ts, k.as_str(), v.as_deref())),
    )
}
