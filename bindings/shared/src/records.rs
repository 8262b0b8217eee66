//! The records of a log, as both packages hand them out: one replay of
//! the log with the engine's filters (`kinds`, `session`, `since`,
//! `until`, the same as a search's), in replay order or in log order, each
//! record as `{"offset","ts_ms","type","record"}` (a search hit without its
//! score: `record` the line as written) in one JSON array text, which each
//! package parses into its own objects.
//!
//! Log order (by byte offset) is the order the records were written in; it
//! is what a reader that folds records written one after another (the
//! packages' framework sessions: items, pops and clears) needs, whatever
//! `ts_ms` a record was given. Replay order is the engine's: a stable sort
//! by `ts_ms`.

use std::path::Path;

use wmreplay::{AllocError, Error, Record, RecordMode, Selection};

use crate::{InvalidArg, open_log, replay_options, skipped_warning};

/// Which order the records come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// The replay's: a stable sort by `ts_ms` (ties in log order).
    #[default]
    Replay,
    /// The log's: by byte offset, the order the lines were written in.
    Log,
}

/// A records call's options as a package received them. `None` is "not
/// given": every record, in replay order.
#[derive(Debug, Clone, Default)]
pub struct RawRecords {
    /// Only records whose `type` is one of these.
    pub kinds: Option<Vec<String>>,
    /// Only records of this `session_id`, and those without one (the
    /// engine's session filter).
    pub session: Option<String>,
    /// Only records with `ts_ms` at least this.
    pub since: Option<f64>,
    /// Only records with `ts_ms` at most this.
    pub until: Option<f64>,
    /// `"replay"` (default) or `"log"`.
    pub order: Option<String>,
}

/// The options, checked.
#[derive(Debug, Clone, Default)]
pub struct RecordsRequest {
    selection: Selection,
    order: Order,
}

impl RecordsRequest {
    /// Checks `raw`: an [`InvalidArg`] for an order other than `"replay"`
    /// and `"log"`, or a bound that is not a number (NaN).
    pub fn new(raw: RawRecords) -> Result<RecordsRequest, InvalidArg> {
        let order = match raw.order.as_deref() {
            None | Some("replay") => Order::Replay,
            Some("log") => Order::Log,
            Some(other) => {
                return Err(InvalidArg {
                    field: "order".into(),
                    message: format!("`order` must be \"replay\" or \"log\", not {other:?}"),
                });
            }
        };
        for (field, bound) in [("since", raw.since), ("until", raw.until)] {
            if bound.is_some_and(f64::is_nan) {
                return Err(InvalidArg {
                    field: field.into(),
                    message: format!("`{field}` must be a number, not NaN"),
                });
            }
        }
        let mut selection = Selection::default();
        selection.kinds = raw.kinds;
        selection.session = raw.session;
        selection.since = raw.since;
        selection.until = raw.until;
        Ok(RecordsRequest { selection, order })
    }

    /// The order asked for.
    pub fn order(&self) -> Order {
        self.order
    }
}

/// The records found, with what is reported beside them.
#[derive(Debug, Clone)]
pub struct Records {
    /// A JSON array of `{"offset","ts_ms","type","record"}` objects.
    pub json: String,
    /// How many records it holds.
    pub count: usize,
    /// [`skipped_warning`] for the log.
    pub warning: Option<String>,
    /// Whether the log does not exist (then no record).
    pub log_missing: bool,
}

/// A `ts_ms` as a JSON number: a whole number as an integer (as `append`
/// reports it), `null` when it is not finite (`1e400`).
fn ts_json(ts: f64, out: &mut String) {
    use std::fmt::Write;
    if !ts.is_finite() {
        out.push_str("null");
    } else if ts.fract() == 0.0 && ts.abs() < 9_007_199_254_740_992.0 {
        let _ = write!(out, "{}", ts as i64);
    } else {
        let n = serde_json::Number::from_f64(ts).expect("a finite number");
        let _ = write!(out, "{n}");
    }
}

/// The records of the log at `path` that `request` keeps (one replay, raw
/// record mode), as [`Records`]. A log that does not exist has none (with
/// `require_log`, the engine's "does not exist" error). The log is checked
/// afterwards: one truncated or rewritten meanwhile is the engine's
/// "changed" error, never bytes of a file that is gone.
pub fn records_of_log(
    path: &Path,
    request: &RecordsRequest,
    require_log: bool,
) -> Result<Records, Error> {
    let log = open_log(path, require_log)?;
    let oom = |e: AllocError| e.for_log(log.path());
    let mut replayed =
        wmreplay::try_replay(log.bytes(), &replay_options(RecordMode::Raw)).map_err(oom)?;
    let warning = skipped_warning(path, replayed.stats());
    if !request.selection.is_everything() {
        replayed.select(&request.selection, None);
    }
    let data = replayed.data();
    let mut kept: Vec<&Record> = replayed.records().iter().collect();
    if request.order == Order::Log {
        kept.sort_unstable_by_key(|r| r.offset());
    }
    // The lines, and at most about 80 bytes of members around each.
    let size = kept
        .iter()
        .map(|r| r.line(data).len() + 80 + r.kind_raw(data).len())
        .sum::<usize>()
        + 2;
    let mut json = String::new();
    json.try_reserve(size)
        .map_err(|_| oom(AllocError { bytes: size as u64 }))?;
    json.push('[');
    for (i, r) in kept.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        // A record's line is valid JSON (the replay checked it), and valid
        // UTF-8; its `type`'s content, escapes kept, is a JSON string's.
        let line = std::str::from_utf8(r.line(data)).expect("a record's line is UTF-8");
        let kind = std::str::from_utf8(r.kind_raw(data)).expect("a record's type is UTF-8");
        json.push_str("{\"offset\":");
        json.push_str(&r.offset().to_string());
        json.push_str(",\"ts_ms\":");
        ts_json(r.ts_ms(), &mut json);
        json.push_str(",\"type\":\"");
        json.push_str(kind);
        json.push_str("\",\"record\":");
        json.push_str(line);
        json.push('}');
    }
    json.push(']');
    let count = kept.len();
    drop(kept);
    drop(replayed);
    log.verify()?;
    Ok(Records {
        json,
        count,
        warning,
        log_missing: log.is_missing(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, content: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "wmreplay-shared-records-{}-{name}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wm.log");
        std::fs::write(&path, content).unwrap();
        path
    }

    fn parsed(r: &Records) -> serde_json::Value {
        serde_json::from_str(&r.json).unwrap()
    }

    #[test]
    fn records_come_in_replay_or_log_order_with_their_offsets() {
        let log = "{\"type\":\"a\",\"ts_ms\":3}\n\
                   not json\n\
                   {\"type\":\"b\",\"ts_ms\":1.5,\"session_id\":\"s\"}\n\
                   {\"type\":\"c\\u0041\",\"ts_ms\":1e400,\"session_id\":\"t\"}\n";
        let path = scratch("order", log);
        let all = records_of_log(&path, &RecordsRequest::default(), false).unwrap();
        let v = parsed(&all);
        assert_eq!(all.count, 3);
        assert_eq!(all.warning, None);
        // Replay order: 1.5, 3, then 1e400 (infinite), which has no number.
        assert_eq!(v[0]["offset"], 32);
        assert_eq!(v[0]["ts_ms"], 1.5);
        assert_eq!(v[0]["record"]["session_id"], "s");
        assert_eq!(v[1]["ts_ms"], 3);
        assert_eq!(v[1]["offset"], 0);
        assert_eq!(v[2]["ts_ms"], serde_json::Value::Null);
        assert_eq!(v[2]["type"], "cA");
        let raw = RawRecords {
            order: Some("log".into()),
            ..RawRecords::default()
        };
        let by_log = records_of_log(&path, &RecordsRequest::new(raw).unwrap(), false).unwrap();
        let offsets: Vec<u64> = parsed(&by_log)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["offset"].as_u64().unwrap())
            .collect();
        assert_eq!(offsets, [0, 32, 81]);
    }

    #[test]
    fn filters_are_the_engines_and_bad_options_are_refused() {
        let log = "{\"type\":\"a\",\"ts_ms\":1,\"session_id\":\"s\"}\n\
                   {\"type\":\"b\",\"ts_ms\":2,\"session_id\":\"s\"}\n\
                   {\"type\":\"a\",\"ts_ms\":3,\"session_id\":\"t\"}\n\
                   {\"type\":\"a\",\"ts_ms\":4}\n";
        let path = scratch("filters", log);
        let raw = RawRecords {
            kinds: Some(vec!["a".into()]),
            session: Some("s".into()),
            ..RawRecords::default()
        };
        let r = records_of_log(&path, &RecordsRequest::new(raw).unwrap(), false).unwrap();
        let ts: Vec<i64> = parsed(&r)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["ts_ms"].as_i64().unwrap())
            .collect();
        // The session's `a` and the `a` without a session.
        assert_eq!(ts, [1, 4]);
        let bad = RawRecords {
            order: Some("time".into()),
            ..RawRecords::default()
        };
        assert_eq!(RecordsRequest::new(bad).unwrap_err().field, "order");
        let nan = RawRecords {
            until: Some(f64::NAN),
            ..RawRecords::default()
        };
        assert_eq!(RecordsRequest::new(nan).unwrap_err().field, "until");
    }

    #[test]
    fn a_missing_log_has_no_records_unless_it_is_required() {
        let dir = std::env::temp_dir().join(format!(
            "wmreplay-shared-records-missing-{}",
            std::process::id()
        ));
        let path = dir.join("none.log");
        let r = records_of_log(&path, &RecordsRequest::default(), false).unwrap();
        assert_eq!((r.json.as_str(), r.log_missing), ("[]", true));
        let e = records_of_log(&path, &RecordsRequest::default(), true).unwrap_err();
        assert!(e.to_string().contains("none.log"), "{e}");
    }
}
