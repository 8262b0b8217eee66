//! The search index kept next to a log: a tantivy index (a directory), one
//! document per record with terms, holding its terms (`analysis.rs`: the
//! words of its prose in `body`, its identifiers in `ids`; frequencies, no
//! positions) and its line's byte offset; the line itself is read back
//! from the log.
//!
//! Each commit carries, as its payload, the log's identity (device,
//! inode), how far it has indexed (a byte offset just past a `\n`) and the
//! prefix fingerprint of those bytes, as the state store keeps them. Before
//! each search the lines appended since are indexed (a line still being
//! written waits for its `\n`) under tantivy's writer lock, which other
//! processes wait for; a log replaced, truncated or rewritten is indexed
//! again from scratch, and so is an index that cannot be opened, from
//! another version, or made with other options. A fresh index is built in
//! a directory of its own and renamed into place, so a reader never sees
//! half of one.

use crate::os::FileStamp;
use std::fs::File;
use std::path::{Path, PathBuf};

use tantivy::collector::TopDocs;
use tantivy::schema::{FAST, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{Index as Tantivy, IndexReader, ReloadPolicy};

use super::analysis::{Language, Terms};
use super::dir::{self, Unsynced};
use super::meta::{Fields, Meta, VERSION, err};
use super::query::Part;
use super::write::{add_lines, commit, has_line, with_cause, writer};
use crate::error::Error;

/// What a refresh of the index did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// The index was made again from the whole log.
    pub rebuilt: bool,
    /// Log bytes read into the index by this call.
    pub bytes: u64,
    /// Records added.
    pub records: u64,
}

/// An open index: its reader, and the fields.
struct Open {
    index: Tantivy,
    reader: IndexReader,
    fields: Fields,
    /// (device, inode) of the index directory.
    dir: (u64, u64),
    /// The directory as this reader reads it (whether a mapped file was
    /// truncated under a read).
    files: Unsynced,
    /// The files the reader reads, as they were when it was loaded: a
    /// segment's files are written once, so one that changed since was
    /// damaged (`meta.json` changes with every commit).
    stamps: Vec<(PathBuf, FileStamp)>,
}

fn stamp_of(path: &Path) -> Option<FileStamp> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| FileStamp::of(&m))
}

/// Why a search found the index unfit: a file changed under the reader, a
/// mapped file truncated under a read, or a read that panicked on bytes it
/// could not make sense of. The index is built again; nothing it read is
/// used.
#[derive(Debug, Clone)]
pub(crate) struct Damaged(pub(crate) String);

/// What [`Index::top`] found.
pub(crate) enum Top {
    /// (offset, score), best first; and each of the query's weighted terms'
    /// weight in BM25 (its IDF × (1 + k1) × its boost), in
    /// [`Terms::weighted`] order.
    Hits(Vec<(u64, f64)>, Vec<f32>),
    Damaged(Damaged),
}

pub(crate) struct Index {
    log: PathBuf,
    path: PathBuf,
    open: Option<Open>,
    max_depth: usize,
    refuse_links: bool,
    /// The language the terms are made in (an index made in another is
    /// built again).
    language: Language,
    /// The index was found damaged: the next refresh builds it again.
    damaged: bool,
    /// The log's length and change times, and the index directory, when
    /// this index was last found up to date: unchanged, nothing is read.
    seen: Option<Seen>,
}

/// The log's length and change times, and the index directory's identity.
type Seen = (u64, crate::input::Stamp, (u64, u64));

fn schema() -> (Schema, Fields) {
    let mut sb = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer("words")
        .set_index_option(IndexRecordOption::WithFreqs);
    let body = sb.add_text_field(
        "body",
        TextOptions::default().set_indexing_options(indexing.clone()),
    );
    let ids = sb.add_text_field("ids", TextOptions::default().set_indexing_options(indexing));
    let offset = sb.add_u64_field("offset", FAST);
    (sb.build(), Fields { body, ids, offset })
}

/// The terms are made by `super::analysis` already: the index splits on
/// spaces.
fn register(index: &Tantivy) {
    index.tokenizers().register(
        "words",
        TextAnalyzer::builder(WhitespaceTokenizer::default()).build(),
    );
}

fn dir_identity(path: &Path) -> Option<(u64, u64)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    if !m.is_dir() {
        return None;
    }
    crate::os::path_id(path, true).ok()
}

fn payload(index: &Tantivy) -> Option<Meta> {
    let metas = index.load_metas().ok()?;
    serde_json::from_str(metas.payload.as_deref()?).ok()
}

impl Index {
    /// The index of `log` at `path` (nothing is read or made until
    /// [`refresh`](Self::refresh)).
    pub(crate) fn new(
        log: &Path,
        path: PathBuf,
        max_depth: usize,
        refuse_links: bool,
        language: Language,
    ) -> Index {
        Index {
            language,
            log: log.to_path_buf(),
            path,
            open: None,
            max_depth,
            refuse_links,
            damaged: false,
            seen: None,
        }
    }

    /// Drops the open index, found damaged: the next refresh builds it
    /// again from the log.
    pub(crate) fn discard(&mut self) {
        self.open = None;
        self.seen = None;
        self.damaged = true;
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the index directory if it is there (or was replaced since):
    /// `None` when there is none, or it cannot be opened.
    fn connect(&mut self) -> Option<&Open> {
        let Some(dir) = dir_identity(&self.path) else {
            self.open = None;
            return None;
        };
        if self.open.as_ref().is_some_and(|o| o.dir == dir) {
            return self.open.as_ref();
        }
        self.open = None;
        let files = Unsynced::open(&self.path).ok()?;
        let index = Tantivy::open(files.clone()).ok()?;
        register(&index);
        let schema = index.schema();
        let fields = Fields {
            body: schema.get_field("body").ok()?,
            ids: schema.get_field("ids").ok()?,
            offset: schema.get_field("offset").ok()?,
        };
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .ok()?;
        let mut open = Open {
            index,
            reader,
            fields,
            dir,
            files,
            stamps: Vec::new(),
        };
        open.stamp(&self.path);
        self.open = Some(open);
        self.open.as_ref()
    }

    /// Brings the index up to date with the log (see the module);
    /// `progress(done, total)` is called as bytes are indexed.
    pub(crate) fn refresh(
        &mut self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        let seen = self.seen.take();
        let Some((file, meta)) = crate::input::open_regular(&self.log, self.refuse_links)? else {
            // No log: nothing to find (an index left from it is stale).
            if dir_identity(&self.path).is_some() {
                self.open = None;
                std::fs::remove_dir_all(&self.path).map_err(|e| err(&self.path, e))?;
            }
            return Ok(Refreshed::default());
        };
        let id = crate::input::identity_of(&meta);
        let now = (meta.len(), crate::input::Stamp::of(&meta));
        let dir = dir_identity(&self.path);
        if let (Some((l, st, d)), Some(dir)) = (seen, dir)
            && (l, st) == now
            && d == dir
            && self.open.as_ref().is_some_and(|o| o.dir == dir)
        {
            self.seen = seen;
            return Ok(Refreshed::default());
        }
        let refreshed = self.refresh_from(&file, id, meta.len(), progress)?;
        if let Some(o) = &mut self.open {
            o.reader.reload().map_err(|e| err(&self.path, e))?;
            o.stamp(&self.path);
            self.seen = Some((now.0, now.1, o.dir));
        }
        Ok(refreshed)
    }

    fn refresh_from(
        &mut self,
        file: &File,
        id: crate::input::FileIdentity,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        let max_depth = self.max_depth as u64;
        let language = self.language;
        let (log, path) = (self.log.clone(), self.path.clone());
        let boot = dir::boot_id();
        let usable = |m: &Meta| -> Result<bool, Error> {
            if m.version != VERSION
                || (!m.boot.is_empty() && m.boot != boot)
                || m.dev != id.dev
                || m.inode != id.inode
                || m.len > len
                || m.max_depth != max_depth
                || m.language != language.name()
            {
                return Ok(false);
            }
            Ok(crate::input::fingerprint_file(file, m.len)
                .map_err(|e| Error::io(&log, "cannot read", e))?
                == Some(m.fingerprint))
        };
        if std::mem::take(&mut self.damaged) {
            return self.rebuild(file, id, len, progress);
        }
        let known = self.connect().and_then(|o| payload(&o.index));
        let usable_now = match &known {
            Some(m) => usable(m)?,
            None => false,
        };
        if !usable_now {
            return self.rebuild(file, id, len, progress);
        }
        let from = known.as_ref().map_or(0, |m| m.len);
        if from >= len || !has_line(file, &log, from, len)? {
            return Ok(Refreshed::default());
        }
        let open = self.open.as_ref().expect("connected above");
        let mut writer = writer(&open.index, &path, 1)?;
        // Another process may have gone further, or rebuilt, meanwhile.
        let from = match payload(&open.index) {
            Some(m) if usable(&m)? => m.len,
            _ => {
                drop(writer);
                return self.rebuild(file, id, len, progress);
            }
        };
        if from >= len {
            return Ok(Refreshed::default());
        }
        let (end, records) = add_lines(
            &writer,
            open.fields,
            language,
            &log,
            file,
            from,
            len,
            self.max_depth,
            progress,
        )
        .map_err(|e| with_cause(&mut writer, &path, e))?;
        if end == from {
            return Ok(Refreshed::default());
        }
        commit(
            &mut writer,
            &path,
            &log,
            file,
            (id, end, max_depth, language),
            &boot,
        )?;
        // The merges the commit started finish before the writer is let go
        // (dropped, it would stop them): appends one at a time would
        // otherwise leave a segment each.
        writer.wait_merging_threads().map_err(|e| err(&path, e))?;
        Ok(Refreshed {
            rebuilt: false,
            bytes: end - from,
            records,
        })
    }

    /// Indexes the whole log into a new directory, then moves it into place.
    fn rebuild(
        &mut self,
        file: &File,
        id: crate::input::FileIdentity,
        len: u64,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Refreshed, Error> {
        self.open = None;
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = self
            .path
            .with_file_name(format!(".{name}.build-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let built = (|| -> Result<(u64, u64), Error> {
            std::fs::create_dir(&tmp).map_err(|e| err(&tmp, e))?;
            let (schema, fields) = schema();
            let directory = Unsynced::open(&tmp).map_err(|e| err(&tmp, e))?;
            let index = Tantivy::create(directory, schema, tantivy::IndexSettings::default())
                .map_err(|e| err(&tmp, e))?;
            register(&index);
            let threads = rayon::current_num_threads().clamp(1, 8);
            let mut writer = writer(&index, &tmp, threads)?;
            let (end, records) = add_lines(
                &writer,
                fields,
                self.language,
                &self.log,
                file,
                0,
                len,
                self.max_depth,
                progress,
            )
            .map_err(|e| with_cause(&mut writer, &tmp, e))?;
            commit(
                &mut writer,
                &tmp,
                &self.log,
                file,
                (id, end, self.max_depth as u64, self.language),
                "",
            )?;
            writer.wait_merging_threads().map_err(|e| err(&tmp, e))?;
            // Built once: synced once, so it outlives a reboot.
            dir::sync_all(&tmp).map_err(|e| err(&tmp, e))?;
            Ok((end, records))
        })();
        let (end, records) = match built {
            Ok(b) => b,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
        };
        // Into place: the old index (if any) goes aside first, then away.
        let old = self
            .path
            .with_file_name(format!(".{name}.old-{}", std::process::id()));
        if std::fs::symlink_metadata(&self.path).is_ok() {
            remove_any(&old);
            if let Err(e) = std::fs::rename(&self.path, &old) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(err(&self.path, e));
            }
        }
        let moved = std::fs::rename(&tmp, &self.path);
        remove_any(&old);
        if let Err(e) = moved {
            let _ = std::fs::remove_dir_all(&tmp);
            // Another process put its own index there first: that one is used.
            if dir_identity(&self.path).is_none() {
                return Err(err(&self.path, e));
            }
        }
        self.connect();
        Ok(Refreshed {
            rebuilt: true,
            bytes: end,
            records,
        })
    }

    /// The documents of `part` matching `terms` (deduplicated, at least
    /// one), the best `limit` of them: (offset, score), best first, ties in
    /// log order (among those tantivy returns); or [`Top::Damaged`] when
    /// what the index holds cannot be trusted (a file changed or truncated
    /// under the reader, a read that panicked).
    pub(crate) fn top(&mut self, terms: &Terms, part: Part, limit: usize) -> Result<Top, Error> {
        let path = self.path.clone();
        let Some(open) = self.open.as_mut() else {
            if self.connect().is_none() {
                return Ok(Top::Hits(Vec::new(), Vec::new()));
            }
            return self.top(terms, part, limit);
        };
        if let Some(d) = open.changed(&path) {
            return Ok(Top::Damaged(d));
        }
        let open = self.open.as_ref().expect("checked above");
        type Found = (Vec<(u64, f64)>, Vec<f32>);
        let run = || -> Result<Found, Error> {
            let searcher = open.reader.searcher();
            let query = super::query::build(terms, part, open.fields);
            let weights =
                super::query::weights(&searcher, terms, open.fields).map_err(|e| err(&path, e))?;
            let top = searcher
                .search(&query, &TopDocs::with_limit(limit).order_by_score())
                .map_err(|e| err(&path, e))?;
            let mut out = Vec::with_capacity(top.len());
            // Each segment's offsets column opened once (opening one is
            // most of what a hit costs).
            let mut columns = std::collections::HashMap::new();
            for (score, at) in top {
                let column = match columns.entry(at.segment_ord) {
                    std::collections::hash_map::Entry::Occupied(c) => c.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => v.insert(
                        searcher
                            .segment_reader(at.segment_ord)
                            .fast_fields()
                            .u64("offset")
                            .map_err(|e| err(&path, e))?,
                    ),
                };
                if let Some(offset) = column.first(at.doc_id) {
                    out.push((offset, f64::from(score)));
                }
            }
            Ok((out, weights))
        };
        // Bytes garbled in place can make the reader index past a slice's
        // end: a panic here is the index's damage, not the server's.
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
        if open.files.faulted() {
            return Ok(Top::Damaged(Damaged(
                "a file of the index was cut short under a search".into(),
            )));
        }
        let (mut out, weights) = match found {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Ok(Top::Damaged(Damaged(format!("the search failed: {e}"))));
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                return Ok(Top::Damaged(Damaged(format!(
                    "reading the index failed ({what})"
                ))));
            }
        };
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(Top::Hits(out, weights))
    }
}

impl Open {
    /// Notes the files the reader now reads, as they are.
    fn stamp(&mut self, root: &Path) {
        let mut files: Vec<PathBuf> = vec![PathBuf::from("meta.json")];
        if let Ok(metas) = self.index.load_metas() {
            files.extend(metas.list_segment_files());
        }
        self.stamps = files
            .into_iter()
            .filter_map(|f| stamp_of(&root.join(&f)).map(|s| (f, s)))
            .collect();
    }

    /// Whether a file the reader reads changed since it was loaded: a
    /// segment's file changed or gone while `meta.json` still names it is
    /// damage (another process's commit replaces `meta.json`: the reader
    /// is loaded again then).
    fn changed(&mut self, root: &Path) -> Option<Damaged> {
        let differs = |(f, s): &(PathBuf, FileStamp)| stamp_of(&root.join(f)) != Some(*s);
        let meta_moved = self
            .stamps
            .iter()
            .find(|(f, _)| f.as_os_str() == "meta.json")
            .is_some_and(differs);
        if meta_moved {
            if let Err(e) = self.reader.reload() {
                return Some(Damaged(format!("its meta.json cannot be read: {e}")));
            }
            self.stamp(root);
            return None;
        }
        self.stamps
            .iter()
            .find(|s| differs(s))
            .map(|(f, _)| Damaged(format!("its file {} changed under the reader", f.display())))
    }
}

/// Removes a file or a directory tree, if there.
fn remove_any(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}
