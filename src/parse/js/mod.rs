//! JavaScript-exact record mode: one raw log line turned into exactly the
//! bytes Node.js produces for `JSON.stringify(JSON.parse(line.trim()))`, where
//! the line came from `fs.readFileSync(path, 'utf8').split('\n')`.
//!
//! That is, in order:
//! - **decoding** as Node decodes a file read as UTF-8: each maximal ill-formed
//!   subsequence becomes U+FFFD (the policy of [`String::from_utf8_lossy`]);
//! - **trimming** with `String.prototype.trim`'s whitespace (ASCII space, TAB,
//!   LF, VT, FF, CR, and U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F,
//!   U+205F, U+3000, U+FEFF);
//! - **parsing** as `JSON.parse` parses (RFC 8259: numbers of any size,
//!   unpaired surrogate escapes, duplicate keys with the last value winning);
//! - **writing** what `JSON.stringify` writes for the result: compact, object
//!   keys that are array indices first in ascending order and the others in
//!   insertion order (a duplicate keeps its first key's place), numbers as
//!   `String(x)` writes them (`-0` as `0`, ±Infinity as `null`), strings
//!   escaped the well-formed way (lone surrogates as lowercase `\udxxx`).
//!
//! The work is done on the raw bytes, in one pass that writes the output as it
//! parses: nothing is decoded up front (invalid UTF-8 can only be valid inside
//! a string, where it is replaced as it is copied). An object whose keys need
//! reordering or merging is only recorded during that pass; a second pass,
//! over the output, rewrites such objects once the line is parsed. Both passes
//! keep their own stack, so nesting is limited by the configured depth, never
//! by the call stack. Scratch space lives in [`JsStringifier`] and is reused:
//! once its buffers have grown, a line costs no allocation.
//!
//! One indivisible algorithm: the first pass (parse and write at once) and
//! the second (reorder the objects it recorded) share their stacks and
//! fix-up records, so they stay together in this file; the lexical pieces
//! (strings, whitespace, array-index keys) are in `text.rs`.
//!
//! This module does not check the record shape (a string `type`, a number
//! `ts_ms`): the caller runs the ordinary line parser on the output, and takes
//! numbers that JSON cannot express (±Infinity, written `null`) from
//! [`JsStringifier::top_level_number`].

use std::ops::Range;

use crate::escape::JsNumber;
use crate::parse::json::{JsonError, JsonErrorKind, literal, number_end, number_value};
mod text;

pub use text::{array_index, js_trim};
use text::{name, skip_ws, string};

/// Why a line is not one valid JSON value: its [`JsonErrorKind`] and the byte
/// offset within the line (before trimming) where that was detected. Never
/// [`JsonErrorKind::InvalidUtf8`]: invalid UTF-8 is replaced, as Node replaces
/// it, and is then either inside a string or an unexpected character.
pub type JsError = JsonError;

#[cold]
fn err(kind: JsonErrorKind, column: usize) -> JsError {
    JsError { kind, column }
}

/// The JSON type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsValueKind {
    /// `{...}`
    Object,
    /// `[...]`
    Array,
    /// `"..."`
    String,
    /// A number (written `null` when it is ±Infinity).
    Number,
    /// `true` or `false`.
    Boolean,
    /// `null`.
    Null,
}

/// Turns lines into `JSON.stringify(JSON.parse(line.trim()))`, reusing its
/// scratch buffers from one line to the next.
///
/// ```
/// use wmreplay::__internals::js::JsStringifier;
///
/// let mut js = JsStringifier::new(1000);
/// let mut out = Vec::new();
/// let line = "\u{feff} {\"b\":1, \"a\":2e0, \"1\":\"\\u00e9\", \"0\":-0, \"b\":[1e400]}\r";
/// assert_eq!(js.stringify(line.as_bytes(), &mut out), Ok(true));
/// assert_eq!(out, r#"{"0":0,"1":"é","b":[null],"a":2}"#.as_bytes());
/// ```
#[derive(Debug)]
pub struct JsStringifier {
    max_depth: usize,
    /// Containers open while parsing, innermost last.
    frames: Vec<Frame>,
    /// The members of the open objects, innermost object's last.
    members: Vec<Member>,
    /// Objects whose members must be reordered or merged, by closing order
    /// (sorted by start before the rewrite).
    fixups: Vec<Fixup>,
    /// Each fixup's members in output order.
    entries: Vec<Entry>,
    /// For each fixup (sorted), the index of the next one after its end.
    skip: Vec<usize>,
    /// Scratch for one object's duplicate detection and ordering.
    order: Vec<u32>,
    first: Vec<u32>,
    last: Vec<u32>,
    indexed: Vec<(u32, u32)>,
    /// The first pass's output while the second pass rewrites it.
    text: Vec<u8>,
    /// The second pass's stack.
    work: Vec<Task>,
    /// The top-level value of the last line written.
    top_kind: Option<JsValueKind>,
    /// Numbers that are members of the top-level object: (index in
    /// `members`, which is also the index within the object since it is
    /// the outermost, value) while parsing, then (key range in
    /// `top_key_bytes`, value).
    top_members: Vec<(u32, f64)>,
    top_numbers: Vec<(usize, usize, f64)>,
    top_key_bytes: Vec<u8>,
}

/// An open container. Offsets here and below are relative to where the
/// line's output starts.
#[derive(Debug, Clone, Copy)]
struct Frame {
    object: bool,
    /// Offset of the opening bracket.
    start: usize,
    /// Index of the object's first member in `members`.
    members: usize,
}

/// One member of an object as first written: the key (quotes included) runs
/// from `key_start` to `key_end`, a colon follows, then the value up to
/// `value_end`.
#[derive(Debug, Clone, Copy)]
struct Member {
    key_start: usize,
    key_end: usize,
    value_end: usize,
}

impl Member {
    fn key(&self) -> (usize, usize) {
        (self.key_start, self.key_end)
    }
    fn value(&self) -> (usize, usize) {
        (self.key_end + 1, self.value_end)
    }
}

/// An object to rewrite: its span in the first pass's output and its members
/// in output order (`entries[entries.0..entries.1]`).
#[derive(Debug, Clone, Copy)]
struct Fixup {
    start: usize,
    end: usize,
    entries: (usize, usize),
}

/// A member of a rewritten object: the key of its first occurrence and the
/// value of its last.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: (usize, usize),
    value: (usize, usize),
}

/// The second pass's work items.
#[derive(Debug, Clone, Copy)]
enum Task {
    /// Copy `pos..end` of the first pass's output, rewriting the fixups in
    /// it; `next` is the first fixup that may start in the range.
    Copy { pos: usize, end: usize, next: usize },
    /// Write entry `entry` of fixup `fixup` (or its closing brace).
    Object { fixup: usize, entry: usize },
}

/// Objects with at most this many members look for duplicate keys by
/// comparing every pair; larger ones sort their keys.
const PAIRWISE_MAX: usize = 16;

impl JsStringifier {
    /// A stringifier that rejects lines nested more than `max_depth` arrays
    /// and objects deep (with [`JsonErrorKind::TooDeep`]).
    pub fn new(max_depth: usize) -> Self {
        JsStringifier {
            max_depth,
            frames: Vec::new(),
            members: Vec::new(),
            fixups: Vec::new(),
            entries: Vec::new(),
            skip: Vec::new(),
            order: Vec::new(),
            first: Vec::new(),
            last: Vec::new(),
            indexed: Vec::new(),
            text: Vec::new(),
            work: Vec::new(),
            top_kind: None,
            top_members: Vec::new(),
            top_numbers: Vec::new(),
            top_key_bytes: Vec::new(),
        }
    }

    /// Appends `JSON.stringify(JSON.parse(line.trim()))` to `out`, `line`
    /// being one line of a file as Node reads it (any bytes except `\n`; a
    /// `\r` or invalid UTF-8 is fine).
    ///
    /// Returns `Ok(false)` and writes nothing when the line is blank after
    /// trimming; `Ok(true)` when the value was written; an error, with
    /// nothing written, when `JSON.parse` would throw or the nesting is
    /// deeper than the limit.
    pub fn stringify(&mut self, line: &[u8], out: &mut Vec<u8>) -> Result<bool, JsError> {
        let base = out.len();
        self.top_kind = None;
        self.top_members.clear();
        self.top_numbers.clear();
        self.top_key_bytes.clear();
        let Range { start, end } = js_trim(line);
        if start == end {
            return Ok(false);
        }
        let kind = match self.parse(&line[..end], start, base, out) {
            Ok(kind) => kind,
            Err(e) => {
                out.truncate(base);
                return Err(e);
            }
        };
        if !self.fixups.is_empty() {
            self.rewrite(base, out);
        }
        self.top_kind = Some(kind);
        Ok(true)
    }

    /// The type of the top-level value of the last line written, or `None`
    /// when the last call wrote nothing. A record must be an
    /// [`JsValueKind::Object`].
    pub fn top_level_kind(&self) -> Option<JsValueKind> {
        self.top_kind
    }

    /// The value of the top-level object's member `name` in the last line
    /// written, when that value (the last one, for a duplicated key) is a
    /// number; ±Infinity included, which the output can only write as
    /// `null` but `JSON.parse` gives as a number, so a record whose `ts_ms`
    /// overflows is still a record (ordered last, or first).
    ///
    /// `name` is compared with the key as written in the output, without
    /// its quotes: for a name without `"`, `\`, control characters or lone
    /// surrogates, that is the name itself.
    pub fn top_level_number(&self, name: &[u8]) -> Option<f64> {
        self.top_numbers
            .iter()
            .find(|&&(a, b, _)| &self.top_key_bytes[a..b] == name)
            .map(|&(_, _, x)| x)
    }
}

impl Default for JsStringifier {
    /// A stringifier with the crate's usual depth limit,
    /// [`crate::DEFAULT_MAX_DEPTH`].
    fn default() -> Self {
        JsStringifier::new(crate::DEFAULT_MAX_DEPTH)
    }
}

impl JsStringifier {
    /// The first pass: parses `s` from `i` (`s` ends where the value must
    /// end) and writes the value to `out`, recording the objects to rewrite.
    /// Returns the top-level value's kind.
    fn parse(
        &mut self,
        s: &[u8],
        mut i: usize,
        base: usize,
        out: &mut Vec<u8>,
    ) -> Result<JsValueKind, JsError> {
        self.frames.clear();
        self.members.clear();
        self.fixups.clear();
        self.entries.clear();
        let n = s.len();
        let mut top = None;
        'value: loop {
            // One value at `i`.
            i = skip_ws(s, i);
            if i >= n {
                return Err(err(JsonErrorKind::UnexpectedEnd, i));
            }
            match s[i] {
                open @ (b'{' | b'[') => {
                    let object = open == b'{';
                    if self.frames.len() >= self.max_depth {
                        return Err(err(JsonErrorKind::TooDeep, i));
                    }
                    top.get_or_insert(if object {
                        JsValueKind::Object
                    } else {
                        JsValueKind::Array
                    });
                    let start = out.len() - base;
                    out.push(open);
                    let close = if object { b'}' } else { b']' };
                    i = skip_ws(s, i + 1);
                    if i < n && s[i] == close {
                        out.push(close);
                        i += 1;
                    } else {
                        self.frames.push(Frame {
                            object,
                            start,
                            members: self.members.len(),
                        });
                        if object {
                            i = self.key(s, i, base, out)?;
                        }
                        continue 'value;
                    }
                }
                b'"' => {
                    top.get_or_insert(JsValueKind::String);
                    i = string(s, i, out)?;
                }
                b'-' | b'0'..=b'9' => {
                    top.get_or_insert(JsValueKind::Number);
                    i = self.number(s, i, out)?;
                }
                b't' | b'f' | b'n' => {
                    let word: &[u8] = match s[i] {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    };
                    top.get_or_insert(if s[i] == b'n' {
                        JsValueKind::Null
                    } else {
                        JsValueKind::Boolean
                    });
                    i = literal(s, i, word)?;
                    out.extend_from_slice(word);
                }
                _ => return Err(err(JsonErrorKind::UnexpectedByte, i)),
            }
            // After a value: close containers or go on to the next element.
            loop {
                i = skip_ws(s, i);
                let Some(&frame) = self.frames.last() else {
                    return match top {
                        Some(kind) if i == n => Ok(kind),
                        _ => Err(err(JsonErrorKind::TrailingCharacters, i)),
                    };
                };
                if i >= n {
                    return Err(err(JsonErrorKind::UnexpectedEnd, i));
                }
                match (s[i], frame.object) {
                    (b',', true) => {
                        self.end_member(base, out);
                        out.push(b',');
                        i = self.key(s, skip_ws(s, i + 1), base, out)?;
                        continue 'value;
                    }
                    (b',', false) => {
                        out.push(b',');
                        i += 1;
                        continue 'value;
                    }
                    (b'}', true) => {
                        self.end_member(base, out);
                        self.close_object(base, out);
                        i += 1;
                    }
                    (b']', false) => {
                        self.frames.pop();
                        out.push(b']');
                        i += 1;
                    }
                    _ => return Err(err(JsonErrorKind::UnexpectedByte, i)),
                }
            }
        }
    }

    /// Parses `"key" :` at `i` (after whitespace), writes `"key":` and opens
    /// a member; returns the index after the colon.
    fn key(
        &mut self,
        s: &[u8],
        i: usize,
        base: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, JsError> {
        match s.get(i) {
            None => return Err(err(JsonErrorKind::UnexpectedEnd, i)),
            Some(b'"') => {}
            Some(_) => return Err(err(JsonErrorKind::UnexpectedByte, i)),
        }
        let key_start = out.len() - base;
        let i = skip_ws(s, string(s, i, out)?);
        match s.get(i) {
            None => return Err(err(JsonErrorKind::UnexpectedEnd, i)),
            Some(b':') => {}
            Some(_) => return Err(err(JsonErrorKind::UnexpectedByte, i)),
        }
        self.members.push(Member {
            key_start,
            key_end: out.len() - base,
            value_end: 0,
        });
        out.push(b':');
        Ok(i + 1)
    }

    #[inline]
    fn end_member(&mut self, base: usize, out: &[u8]) {
        if let Some(m) = self.members.last_mut() {
            m.value_end = out.len() - base;
        }
    }

    /// Parses the number at `i` and writes it as `JSON.stringify` does;
    /// returns the index after it.
    fn number(&mut self, s: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, JsError> {
        let end = number_end(s, i)?;
        let text = &s[i..end];
        // A short integer (not -0) is exact and already written as
        // JavaScript writes it.
        let digits = text.strip_prefix(b"-").unwrap_or(text);
        let plain = digits.len() <= 15 && digits.iter().all(u8::is_ascii_digit) && text != b"-0";
        let top_member = self.frames.len() == 1 && self.frames[0].object;
        if plain && !top_member {
            out.extend_from_slice(text);
            return Ok(end);
        }
        let x = number_value(text);
        if plain {
            out.extend_from_slice(text);
        } else if x.is_infinite() {
            out.extend_from_slice(b"null");
        } else {
            out.extend_from_slice(JsNumber::new(x).as_bytes());
        }
        if top_member {
            self.top_members.push(((self.members.len() - 1) as u32, x));
        }
        Ok(end)
    }

    /// Closes the innermost object (its last member already ended): records
    /// it for the rewrite if its keys need reordering or merging.
    fn close_object(&mut self, base: usize, out: &mut Vec<u8>) {
        let Some(frame) = self.frames.pop() else {
            return;
        };
        let text = &out[base..];
        let from = frame.members;
        let (indexed, duplicated) = self.analyse(text, from);
        if self.frames.is_empty() {
            self.keep_top_numbers(text, from, duplicated);
        }
        if indexed || duplicated {
            let begin = self.entries.len();
            self.plan(text, from, duplicated);
            self.fixups.push(Fixup {
                start: frame.start,
                end: out.len() - base + 1,
                entries: (begin, self.entries.len()),
            });
        }
        self.members.truncate(from);
        out.push(b'}');
    }

    /// Whether the object whose members start at `from` has array-index keys
    /// and whether it has duplicate keys. Fills `first` (each member's first
    /// occurrence) and, with duplicates, `last` (each first occurrence's
    /// last one).
    fn analyse(&mut self, text: &[u8], from: usize) -> (bool, bool) {
        let ms = &self.members[from..];
        let n = ms.len();
        let key = |m: &Member| &text[m.key_start..m.key_end];
        let indexed = ms.iter().any(|m| array_index(name(text, m)).is_some());
        let first = &mut self.first;
        first.clear();
        let mut duplicated = false;
        if n <= PAIRWISE_MAX {
            for (i, m) in ms.iter().enumerate() {
                let k = key(m);
                let f = ms[..i].iter().position(|p| key(p) == k).unwrap_or(i);
                duplicated |= f != i;
                first.push(f as u32);
            }
        } else {
            // Sorting by key (then position) puts each key's occurrences
            // together, first one first: O(n log n) even for adversarial keys.
            let order = &mut self.order;
            order.clear();
            order.extend(0..n as u32);
            order.sort_unstable_by(|&a, &b| {
                key(&ms[a as usize])
                    .cmp(key(&ms[b as usize]))
                    .then(a.cmp(&b))
            });
            first.resize(n, 0);
            let mut g = 0;
            while g < n {
                let head = order[g];
                let k = key(&ms[head as usize]);
                let mut h = g;
                while h < n && key(&ms[order[h] as usize]) == k {
                    first[order[h] as usize] = head;
                    h += 1;
                }
                duplicated |= h - g > 1;
                g = h;
            }
        }
        if duplicated {
            let last = &mut self.last;
            last.clear();
            last.resize(n, 0);
            for (i, &f) in first.iter().enumerate() {
                last[f as usize] = i as u32;
            }
        }
        (indexed, duplicated)
    }

    /// Appends the output order of the object whose members start at `from`
    /// to `entries`: array-index keys ascending, then the others by first
    /// occurrence, each with its last occurrence's value.
    fn plan(&mut self, text: &[u8], from: usize, duplicated: bool) {
        let ms = &self.members[from..];
        let winner = |i: usize| {
            if duplicated { self.last[i] as usize } else { i }
        };
        self.indexed.clear();
        for (i, m) in ms.iter().enumerate() {
            if self.first[i] as usize == i
                && let Some(ix) = array_index(name(text, m))
            {
                self.indexed.push((ix, i as u32));
            }
        }
        self.indexed.sort_unstable();
        for &(_, i) in &self.indexed {
            let i = i as usize;
            self.entries.push(Entry {
                key: ms[i].key(),
                value: ms[winner(i)].value(),
            });
        }
        for (i, m) in ms.iter().enumerate() {
            if self.first[i] as usize == i && array_index(name(text, m)).is_none() {
                self.entries.push(Entry {
                    key: m.key(),
                    value: ms[winner(i)].value(),
                });
            }
        }
    }

    /// Keeps the top-level object's number members that no later duplicate
    /// overrides, with their keys, for [`Self::top_level_number`].
    fn keep_top_numbers(&mut self, text: &[u8], from: usize, duplicated: bool) {
        for &(m, x) in &self.top_members {
            let m = m as usize;
            if duplicated && self.last[self.first[m] as usize] as usize != m {
                continue;
            }
            let key = name(text, &self.members[from + m]);
            let a = self.top_key_bytes.len();
            self.top_key_bytes.extend_from_slice(key);
            self.top_numbers.push((a, self.top_key_bytes.len(), x));
        }
    }

    /// The second pass: rewrites the recorded objects of the line written at
    /// `out[base..]`, each once, with an explicit stack.
    fn rewrite(&mut self, base: usize, out: &mut Vec<u8>) {
        let text = &mut self.text;
        text.clear();
        text.extend_from_slice(&out[base..]);
        out.truncate(base);
        out.reserve(text.len());
        let fixups = &mut self.fixups;
        fixups.sort_unstable_by_key(|f| f.start);
        let nf = fixups.len();
        // skip[j]: the first fixup starting after fixup j ends.
        let skip = &mut self.skip;
        skip.clear();
        skip.resize(nf, nf);
        let open = &mut self.order;
        open.clear();
        for j in 0..nf {
            while let Some(&t) = open.last()
                && fixups[t as usize].end <= fixups[j].start
            {
                skip[t as usize] = j;
                open.pop();
            }
            open.push(j as u32);
        }
        let work = &mut self.work;
        work.clear();
        work.push(Task::Copy {
            pos: 0,
            end: text.len(),
            next: 0,
        });
        while let Some(task) = work.pop() {
            match task {
                Task::Copy { pos, end, next } => {
                    if next < nf && fixups[next].start < end {
                        let f = fixups[next];
                        out.extend_from_slice(&text[pos..f.start]);
                        work.push(Task::Copy {
                            pos: f.end,
                            end,
                            next: skip[next],
                        });
                        work.push(Task::Object {
                            fixup: next,
                            entry: 0,
                        });
                    } else {
                        out.extend_from_slice(&text[pos..end]);
                    }
                }
                Task::Object { fixup, entry } => {
                    let (a, b) = fixups[fixup].entries;
                    if a + entry == b {
                        out.push(b'}');
                        continue;
                    }
                    out.push(if entry == 0 { b'{' } else { b',' });
                    let e = self.entries[a + entry];
                    out.extend_from_slice(&text[e.key.0..e.key.1]);
                    out.push(b':');
                    work.push(Task::Object {
                        fixup,
                        entry: entry + 1,
                    });
                    let (pos, end) = e.value;
                    work.push(Task::Copy {
                        pos,
                        end,
                        next: fixups.partition_point(|f| f.start < pos),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
