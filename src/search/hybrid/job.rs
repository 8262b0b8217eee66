//! Embedding what the vectors do not cover yet: the log's records from
//! where the vectors stop, each one's text (its prose, [`record_text`]),
//! sent in batches with a bounded number in flight, quantised, and added
//! to the store in log order after each round. A batch that fails stops
//! the catch-up where it is (the records before it are kept; the rest wait
//! for the next one); texts the model refuses are tried in halves, and one
//! refused alone is kept without a vector.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::embedder::{EmbedError, Embedder, HybridOptions};
use super::quant::quantize;
use super::store::{Batch, Store};
use crate::error::Error;
use crate::parse::LineParser;
use crate::search::meta::err;
use crate::search::text::{self, Scratch};

/// Log bytes read at a time.
const GROUP: u64 = 4 << 20;
/// Rounds of batches per commit.
const ROUND_BATCHES: usize = 4;

/// The log the vectors are for, and how its lines are read.
pub(crate) struct Source<'a> {
    pub(crate) log: &'a Path,
    pub(crate) refuse_links: bool,
    pub(crate) max_depth: usize,
}

/// What a catch-up did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Done {
    /// The vectors were started over.
    pub(crate) rebuilt: bool,
    /// Records added (with a vector or refused).
    pub(crate) records: u64,
    /// Log bytes now covered that were not.
    pub(crate) bytes: u64,
    /// Why it stopped short, when the model failed.
    pub(crate) failed: Option<String>,
}

/// Whether a value is an identifier (`analysis.rs`'s rule: one token with
/// a digit, no whitespace, at most a word's length): not prose.
fn is_identifier(v: &str) -> bool {
    v.len() <= text::MAX_WORD
        && v.bytes().any(|b| b.is_ascii_digit())
        && !v.chars().any(char::is_whitespace)
}

/// A record's text for the model: its searched string values but
/// identifiers, trimmed, one a line, cut to `max` bytes (at a character's
/// end); empty when it has none. A record that says who spoke it (a
/// top-level `speaker`, `author`, `sender` or `role`) is told as speech:
/// `Maya said, "…"` (a small model ranks a turn told so well above the same
/// words with the name on a line of its own: BENCHMARKS.md, "Recall on
/// long conversations").
pub(crate) fn record_text(line: &[u8], max: usize, scratch: &mut Scratch, out: &mut String) {
    out.clear();
    let mut who = String::new();
    text::record_values_by(line, scratch, |speaker, v| {
        let v = v.trim();
        if v.is_empty() || is_identifier(v) || out.len() >= max {
            return;
        }
        if speaker && who.is_empty() && !v.contains('\n') {
            who.push_str(v);
            return;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(v);
    });
    if !who.is_empty() {
        *out = if out.is_empty() {
            who
        } else {
            format!("{who} said, \"{out}\"")
        };
    }
    cut(out, max);
}

/// `s` cut to at most `max` bytes, at a character's end.
pub(crate) fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
}

/// A record to embed: its offset, where its line ends, its text.
struct Item {
    offset: u64,
    end: u64,
    text: String,
}

/// Whether the store still describes `file` (the log as it is now); when
/// not, it starts over.
pub(crate) fn check_log(
    store: &mut Store,
    file: &File,
    meta: &std::fs::Metadata,
    log: &Path,
) -> Result<(), Error> {
    if store.fresh {
        return Ok(());
    }
    let now = (meta.len(), crate::input::Stamp::of(meta));
    if store.log_seen == Some(now) {
        return Ok(());
    }
    let id = crate::input::identity_of(meta);
    let h = &store.head;
    let same = (h.dev, h.inode) == (id.dev, id.inode)
        && h.covered <= meta.len()
        && crate::input::fingerprint_file(file, h.covered)
            .map_err(|e| Error::io(log, "cannot read", e))?
            == Some(h.fingerprint);
    if same {
        store.log_seen = Some(now);
    } else {
        store.start_over();
    }
    Ok(())
}

/// Embeds the records the store does not cover, up to the log's last
/// whole line (see the module), unless `stop` is set between rounds.
pub(crate) fn catch_up(
    source: &Source<'_>,
    store: &Mutex<Store>,
    embedder: &dyn Embedder,
    options: &HybridOptions,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Done, Error> {
    let lock = || store.lock().unwrap_or_else(|p| p.into_inner());
    let Some((file, meta)) = crate::input::open_regular(source.log, source.refuse_links)? else {
        let mut st = lock();
        let path = st.path().to_path_buf();
        st.remove().map_err(|e| err(&path, e))?;
        return Ok(Done::default());
    };
    let len = meta.len();
    let id = crate::input::identity_of(&meta);
    let (mut base, replaces, dims) = {
        let mut st = lock();
        let path = st.path().to_path_buf();
        st.sync().map_err(|e| err(&path, e))?;
        check_log(&mut st, &file, &meta, source.log)?;
        let h = &st.head;
        (
            (h.generation, h.count, h.covered, st.fresh),
            st.replaces,
            h.dims,
        )
    };
    let start = base.2;
    let mut done = Done {
        rebuilt: base.3,
        ..Done::default()
    };
    let mut dims = dims;
    let mut at = start;
    let mut buf = Vec::new();
    let mut parser = LineParser::new(source.max_depth);
    let mut scratch = Scratch::default();
    let round = options.batch.max(1) * options.concurrency.max(1) * ROUND_BATCHES;
    while at < len && !stop.load(Ordering::Relaxed) {
        let Some(end) = read_lines(&file, source.log, at, len, &mut buf)? else {
            break;
        };
        let from = if at == 0 {
            crate::input::lines::content_start(&buf)
        } else {
            0
        };
        let mut items = Vec::new();
        let mut text = String::new();
        let used = end - at;
        text::each_record(&buf, from..used as usize, &mut parser, |line_at, line| {
            record_text(line, options.max_text_bytes, &mut scratch, &mut text);
            if !text.is_empty() {
                let line_end = memchr::memchr(b'\n', &buf[line_at..used as usize])
                    .map_or(used as usize, |n| line_at + n + 1);
                items.push(Item {
                    offset: at + line_at as u64,
                    end: at + line_end as u64,
                    text: std::mem::take(&mut text),
                });
            }
            Ok::<(), Error>(())
        })?;
        let mut rounds = items.chunks(round).peekable();
        if rounds.peek().is_none() {
            // Nothing to embed here: covered all the same.
            let b = batch(base, replaces, id, end, &file, source.log, dims)?;
            if !commit(store, b)? {
                return Ok(done);
            }
            base = (base.0, base.1, end, false);
        }
        while let Some(r) = rounds.next() {
            if stop.load(Ordering::Relaxed) {
                return Ok(done);
            }
            let (vectors, failed) = embed_round(r, embedder, options);
            let n = vectors.len();
            // Every vector of one length, and the length of those kept.
            let got = vectors.iter().flatten().map(Vec::len).next();
            if let Some(d) = got {
                let d = d as u32;
                if vectors.iter().flatten().any(|v| v.len() as u32 != d) || (dims != 0 && d != dims)
                {
                    lock().start_over();
                    done.failed = Some(format!(
                        "the model's vectors changed length (from {dims} to {d} or mixed): the log is embedded again"
                    ));
                    return Ok(done);
                }
                dims = d;
            }
            if n > 0 && dims == 0 {
                done.failed = Some("the model refused every text of a batch; none was kept".into());
                return Ok(done);
            }
            let covered = if failed.is_none() && rounds.peek().is_none() {
                end
            } else if n > 0 {
                r[n - 1].end
            } else {
                base.2
            };
            let mut b = batch(base, replaces, id, covered, &file, source.log, dims)?;
            let mut q = Vec::new();
            for (item, v) in r.iter().zip(&vectors) {
                let scale = v.as_deref().and_then(|v| quantize(v, &mut q));
                b.offsets.push(item.offset);
                b.scales.push(scale.unwrap_or(0.0));
                match scale {
                    Some(_) => b.data.extend_from_slice(&q),
                    None => b.data.extend(std::iter::repeat_n(0i8, dims as usize)),
                }
            }
            if covered > base.2 || n > 0 {
                if !commit(store, b)? {
                    return Ok(done);
                }
                done.records += n as u64;
                done.bytes += covered - base.2;
                base = (base.0, base.1 + n as u64, covered, false);
            }
            progress(covered - start, len - start);
            if let Some(why) = failed {
                done.failed = Some(why);
                return Ok(done);
            }
        }
        at = end;
    }
    Ok(done)
}

/// A batch over `base` up to `covered` (fingerprinted), no entries yet.
fn batch(
    base: (u64, u64, u64, bool),
    replaces: Option<u64>,
    id: crate::input::FileIdentity,
    covered: u64,
    file: &File,
    log: &Path,
    dims: u32,
) -> Result<Batch, Error> {
    let fingerprint = crate::input::fingerprint_file(file, covered)
        .map_err(|e| Error::io(log, "cannot read", e))?
        .unwrap_or(0);
    Ok(Batch {
        base,
        replaces,
        dev: id.dev,
        inode: id.inode,
        covered,
        fingerprint,
        dims,
        offsets: Vec::new(),
        scales: Vec::new(),
        data: Vec::new(),
    })
}

fn commit(store: &Mutex<Store>, b: Batch) -> Result<bool, Error> {
    let mut st = store.lock().unwrap_or_else(|p| p.into_inner());
    let path = st.path().to_path_buf();
    st.commit(b).map_err(|e| err(&path, e))
}

/// Reads the whole lines of `at..len` (a group's worth, or one longer
/// line) into `buf`: where they end, or `None` when there is none.
fn read_lines(
    file: &File,
    log: &Path,
    at: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> Result<Option<u64>, Error> {
    let mut want = (len - at).min(GROUP);
    loop {
        buf.clear();
        crate::input::read_from(file, at, want, buf)
            .map_err(|e| Error::io(log, "cannot read", e))?;
        if let Some(last) = memchr::memrchr(b'\n', buf) {
            buf.truncate(last + 1);
            return Ok(Some(at + last as u64 + 1));
        }
        if (buf.len() as u64) < want || at + want >= len {
            return Ok(None);
        }
        want = (want * 2).min(len - at);
    }
}

/// A batch's vectors (`None`: a text refused), or why it failed.
type Embedding = Result<Vec<Option<Vec<f32>>>, EmbedError>;

/// The vectors of a round's items, in order, up to the first batch that
/// failed (then why): `None` for a text the model refused.
fn embed_round(
    items: &[Item],
    embedder: &dyn Embedder,
    options: &HybridOptions,
) -> (Vec<Option<Vec<f32>>>, Option<String>) {
    let batches: Vec<&[Item]> = items.chunks(options.batch.max(1)).collect();
    let slots: Vec<Mutex<Option<Embedding>>> = batches.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    // The first batch that failed: none after it is started.
    let failed_at = AtomicUsize::new(usize::MAX);
    let workers = options.concurrency.clamp(1, batches.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= batches.len() || i > failed_at.load(Ordering::Relaxed) {
                        return;
                    }
                    let texts: Vec<String> = batches[i].iter().map(|t| t.text.clone()).collect();
                    let deadline = Instant::now() + options.batch_timeout;
                    let r = embed_split(embedder, &texts, deadline);
                    if r.is_err() {
                        failed_at.fetch_min(i, Ordering::Relaxed);
                    }
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    let mut out = Vec::with_capacity(items.len());
    for slot in slots {
        match slot.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(Ok(v)) => out.extend(v),
            Some(Err(e)) => return (out, Some(e.to_string())),
            None => return (out, Some("a batch was not sent".into())),
        }
    }
    (out, None)
}

/// `texts` embedded by `deadline`; refused ones tried in halves, and one
/// refused alone is `None`. An answer of the wrong shape is a failure.
fn embed_split(embedder: &dyn Embedder, texts: &[String], deadline: Instant) -> Embedding {
    match call(embedder, texts, deadline) {
        Ok(v) => Ok(v.into_iter().map(Some).collect()),
        Err(e) if e.is_refused() && texts.len() == 1 => Ok(vec![None]),
        Err(e) if e.is_refused() => {
            let (a, b) = texts.split_at(texts.len() / 2);
            let mut out = embed_split(embedder, a, deadline)?;
            out.extend(embed_split(embedder, b, deadline)?);
            Ok(out)
        }
        Err(e) => Err(e),
    }
}

/// One call, its answer checked: a vector per text, none empty. A panic
/// of the embedder is its failure.
pub(crate) fn call(
    embedder: &dyn Embedder,
    texts: &[String],
    deadline: Instant,
) -> Result<Vec<Vec<f32>>, EmbedError> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        embedder.embed(texts, deadline)
    }))
    .unwrap_or_else(|_| Err(EmbedError::failed("the embedding model's client panicked")))?;
    if r.len() != texts.len() || r.iter().any(Vec::is_empty) {
        return Err(EmbedError::failed(format!(
            "the model answered {} vectors for {} texts",
            r.len(),
            texts.len()
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_text_is_its_prose_cut_at_a_character() {
        let mut out = String::new();
        let mut s = Scratch::default();
        record_text(
            br#"{"type":"wm_event","ts_ms":1,"session_id":"s1","id":"D4:12","text":" Lisbon invoice ","meta":{"who":"Maya","n":3}}"#,
            100,
            &mut s,
            &mut out,
        );
        assert_eq!(out, "Lisbon invoice\nMaya");
        record_text(
            br#"{"type":"a","text":"caf\u00e9 ol\u00e9"}"#,
            4,
            &mut s,
            &mut out,
        );
        assert_eq!(out, "caf");
        record_text(
            br#"{"type":"a","id":"call_8f2a","n":1}"#,
            100,
            &mut s,
            &mut out,
        );
        assert_eq!(out, "");
    }

    #[test]
    fn a_record_that_names_its_speaker_is_told_as_speech() {
        let mut out = String::new();
        let mut s = Scratch::default();
        let mut text = |line: &[u8]| {
            record_text(line, 100, &mut s, &mut out);
            out.clone()
        };
        assert_eq!(
            text(br#"{"type":"dialog","ts_ms":1,"speaker":"Maya","dia_id":"D1:3","text":"We adopted a rabbit."}"#),
            "Maya said, \"We adopted a rabbit.\""
        );
        // Whichever of the keys comes first, at the top level only; the
        // other values follow one a line.
        assert_eq!(
            text(
                br#"{"type":"x","text":"Deploy","role":"assistant","note":"done","author":"bot"}"#
            ),
            "assistant said, \"Deploy\ndone\nbot\""
        );
        assert_eq!(
            text(br#"{"type":"x","meta":{"speaker":"Maya"},"text":"hi"}"#),
            "Maya\nhi"
        );
        // A speaker alone is its name; an identifier is not a speaker.
        assert_eq!(text(br#"{"type":"x","speaker":"Maya"}"#), "Maya");
        assert_eq!(
            text(br#"{"type":"x","speaker":"user_42","text":"hi"}"#),
            "hi"
        );
    }
}
