//! One line → a [`Record`] or a [`SkipReason`].
//!
//! By default a line is decided in one pass by [`crate::parse::scan`], which
//! validates it exactly, finds the top-level `type` and `ts_ms` and measures
//! its escaping. The alternative, [`Validator::SimdJson`], validates with
//! simd-json (the line copied into a per-thread padded scratch buffer,
//! reusing simd-json's `Buffers` and tape); simd-json rejects a few things
//! the grammar allows (numbers beyond 64 bits, unpaired surrogate escapes,
//! deep nesting), so every line it rejects is decided again by
//! [`json::validate`]. Either way nothing is allocated per line once the
//! buffers have grown, records are spans into the log (not owned strings),
//! and `ts_ms` is correctly rounded from its text, as `JSON.parse` does.

pub(crate) mod js;
pub(crate) mod json;
pub(crate) mod scan;

/// Whether the CPU runs the scanner's AVX2 build (the chunk loop is compiled
/// for it too, so the scanner inlines into it).
#[cfg(all(target_arch = "x86_64", not(feature = "portable")))]
pub(crate) use scan::has_avx2;

use std::fmt;

use self::json::{JsonErrorKind, Member};
use crate::escape;

/// The deepest nesting a line may have (objects and arrays), by default.
/// Lines nested deeper are skipped as invalid JSON with the reason
/// "nesting deeper than the limit".
pub const DEFAULT_MAX_DEPTH: usize = 10_000;

/// One replayable record: its timestamp and where its bytes are.
///
/// 32 bytes, no owned data: the text is rendered from the log's bytes (the
/// joined records of a 1 GiB log are about 94 MB of fresh memory, and every
/// byte less is a byte the kernel need not zero).
/// All zero bits is a valid value ([`bytemuck::Zeroable`]), so big buffers
/// of records can start as zero pages.
///
/// ```
/// use wmreplay::{ReplayOptions, replay};
///
/// let log = b"{\"type\":\"text_input\",\"ts_ms\":1700000000000,\"text\":\"hi\"}\n";
/// let replayed = replay(log, &ReplayOptions::default());
/// let record = &replayed.records()[0];
/// assert_eq!(record.ts_ms(), 1_700_000_000_000.0);
/// assert_eq!(record.kind(replayed.data()), "text_input");
/// assert_eq!(replayed.source_offset(record), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Zeroable)]
pub struct Record {
    /// `ts_ms` as a double, as JavaScript reads it.
    pub(crate) ts: f64,
    /// Byte offset of the trimmed line in the log.
    pub(crate) offset: u64,
    /// Length of the trimmed line.
    pub(crate) len: u32,
    /// How many bytes JSON-escaping the line adds (at most one per byte:
    /// a valid line's only raw control characters are tabs and CRs between
    /// tokens, so this never overflows).
    pub(crate) escape_extra: u32,
    /// [`Record::OUTPUT`], [`Record::KIND_ESCAPED`] and [`Record::KIND_FAR`],
    /// found while parsing so rendering never looks at the kind twice; in
    /// the bits from [`Record::TS_LEN_SHIFT`] the length of the `ts_ms` text
    /// when it is written exactly as JavaScript prints the number, and from
    /// [`Record::TS_START_SHIFT`] where that text starts in the line (see
    /// [`Record::ts_text`]).
    pub(crate) flags: u32,
    /// Where the raw `type` string's content (escapes kept) is in the line:
    /// its start in the low 16 bits, its length in the high 16. A `type`
    /// that does not fit (rare: a line with a long member before it, or a
    /// long `type`) is marked [`Record::KIND_FAR`] instead, and found again
    /// by scanning the line when it is asked for.
    pub(crate) kind: u32,
}

impl Record {
    /// `ts_ms` as a double, as JavaScript reads it (the sort key).
    #[inline]
    pub fn ts_ms(&self) -> f64 {
        self.ts
    }

    /// Byte offset of the trimmed line in the bytes the record was parsed
    /// from (the log; in [`RecordMode::Js`](crate::RecordMode::Js) the
    /// re-serialised arena: [`Replay::source_offset`](crate::Replay::source_offset)
    /// gives the log's offset).
    #[inline]
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The `type`, unescaped.
    pub fn kind(&self, log: &[u8]) -> String {
        let mut out = String::new();
        json::decode_string(self.kind_raw(log), &mut out);
        out
    }

    /// Where the trimmed line is in the log.
    #[inline]
    pub(crate) fn span(&self) -> std::ops::Range<usize> {
        self.offset as usize..self.offset as usize + self.len as usize
    }

    /// The trimmed line, as written, in `log`.
    #[inline]
    pub fn line<'a>(&self, log: &'a [u8]) -> &'a [u8] {
        &log[self.span()]
    }

    /// The raw `type` content (escapes not decoded) in `log`.
    #[inline]
    pub fn kind_raw<'a>(&self, log: &'a [u8]) -> &'a [u8] {
        if self.flags & Record::KIND_FAR != 0 {
            return self.kind_far(log);
        }
        let s = self.offset as usize + (self.kind & 0xFFFF) as usize;
        &log[s..s + (self.kind >> 16) as usize]
    }

    /// [`Record::kind_raw`] for a `type` whose place did not fit in
    /// [`Record::kind`]: the line was valid when it was parsed, and the same
    /// scan finds the same member again.
    #[cold]
    fn kind_far<'a>(&self, log: &'a [u8]) -> &'a [u8] {
        let line = self.line(log);
        match crate::parse::scan::scan_line(line, usize::MAX, &mut Vec::new()).map(|s| s.kind) {
            Ok(Member::String { start, len }) => &line[start as usize..(start + len) as usize],
            _ => unreachable!("a parsed record's line has a string `type`"),
        }
    }

    /// The packed [`Record::kind`] and the flag for a `type` content of
    /// `len` bytes at `start` in the line.
    #[inline]
    fn pack_kind(start: u32, len: u32) -> (u32, u32) {
        if start <= 0xFFFF && len <= 0xFFFF {
            (start | len << 16, 0)
        } else {
            (0, Record::KIND_FAR)
        }
    }

    /// Flag: the `type` is `text_output` (after unescaping), which makes
    /// the record an assistant message.
    pub(crate) const OUTPUT: u32 = 1;
    /// Flag: the raw `type` contains backslash escapes.
    pub(crate) const KIND_ESCAPED: u32 = 2;
    /// Flag: the latest `text_input`, unanswered, rendered with a first line
    /// `PENDING_USER_INPUT` (set by a [`crate::Selection`] with
    /// `mark_pending`, never by parsing).
    pub(crate) const PENDING: u32 = 4;
    /// Flag: the `type`'s place is not in [`Record::kind`] (it did not fit).
    pub(crate) const KIND_FAR: u32 = 8;
    /// Where the length of a canonical `ts_ms` text starts in
    /// [`Record::flags`] (five bits; 0: not canonical).
    pub(crate) const TS_LEN_SHIFT: u32 = 8;
    /// Where the start of a canonical `ts_ms` text in the line is kept in
    /// [`Record::flags`] (the top 19 bits). A `ts_ms` further into its line
    /// than that is not copied but formatted, which prints the same text.
    pub(crate) const TS_START_SHIFT: u32 = 13;

    /// The `ts_ms` text as written in the line, when it is exactly what
    /// JavaScript's `String(ts_ms)` prints (an integer of at most 15 digits,
    /// not `-0`): rendering copies it instead of formatting the number.
    #[inline]
    pub fn ts_text<'a>(&self, log: &'a [u8]) -> Option<&'a [u8]> {
        let len = (self.flags >> Record::TS_LEN_SHIFT) as usize & 0x1F;
        if len == 0 {
            return None;
        }
        let s = self.offset as usize + (self.flags >> Record::TS_START_SHIFT) as usize;
        log.get(s..s + len)
    }

    /// Whether the record is an assistant message (`type` is `text_output`).
    #[inline]
    pub fn is_output(&self) -> bool {
        self.flags & Record::OUTPUT != 0
    }

    /// Whether the record is marked as the pending user input.
    #[inline]
    pub fn is_pending(&self) -> bool {
        self.flags & Record::PENDING != 0
    }

    /// Whether the `type` is `name` (after unescaping).
    pub fn kind_is(&self, log: &[u8], name: &str) -> bool {
        let raw = self.kind_raw(log);
        if self.kind_escaped() {
            crate::parse::json::string_equals(raw, name)
        } else {
            raw == name.as_bytes()
        }
    }

    /// Whether `other` is this record as parsed from the same line at any
    /// offset: the same `ts_ms`, length, escapes, flags and `type`.
    #[cfg(feature = "server")]
    pub(crate) fn same_as(&self, other: &Record) -> bool {
        self.ts.to_bits() == other.ts.to_bits()
            && self.len == other.len
            && self.escape_extra == other.escape_extra
            && self.flags == other.flags
            && self.kind == other.kind
    }

    /// Whether the raw `type` has escapes to decode.
    #[inline]
    pub(crate) fn kind_escaped(&self) -> bool {
        self.flags & Record::KIND_ESCAPED != 0
    }
}

/// Why a line was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// Not one valid JSON value; counted in `skipped_invalid_json`.
    InvalidJson {
        /// What is wrong.
        kind: JsonErrorKind,
        /// Byte offset within the trimmed line.
        column: u32,
    },
    /// Longer than 4 GiB − 1; counted in `skipped_invalid_json`.
    LineTooLong,
    /// Valid JSON but not an object; counted in `skipped_invalid_shape`.
    NotAnObject,
    /// No `type` member.
    MissingType,
    /// `type` is not a string.
    TypeNotString,
    /// No `ts_ms` member.
    MissingTsMs,
    /// `ts_ms` is not a number.
    TsMsNotNumber,
}

impl SkipReason {
    /// Whether this counts as invalid JSON (as opposed to an invalid shape).
    pub fn is_invalid_json(&self) -> bool {
        matches!(
            self,
            SkipReason::InvalidJson { .. } | SkipReason::LineTooLong
        )
    }

    /// A short machine-readable name: `invalid_json` or `invalid_shape`.
    pub fn category(&self) -> &'static str {
        if self.is_invalid_json() {
            "invalid_json"
        } else {
            "invalid_shape"
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::InvalidJson { kind, column } => {
                write!(f, "invalid JSON: {kind} at column {}", column + 1)
            }
            SkipReason::LineTooLong => f.write_str("invalid JSON: line longer than 4 GiB"),
            SkipReason::NotAnObject => f.write_str("not a JSON object"),
            SkipReason::MissingType => f.write_str("no \"type\" member"),
            SkipReason::TypeNotString => f.write_str("\"type\" is not a string"),
            SkipReason::MissingTsMs => f.write_str("no \"ts_ms\" member"),
            SkipReason::TsMsNotNumber => f.write_str("\"ts_ms\" is not a number"),
        }
    }
}

/// How lines are validated. Both are exact (they accept exactly what the
/// grammar accepts); they differ in speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Validator {
    /// The one-pass scanner: validates, finds the
    /// members and measures escaping in a single pass. The default.
    #[default]
    Scan,
    /// simd-json's tape parser, with every line it rejects decided again by
    /// [`json::validate`], then a second pass for the members. Lines longer
    /// than [`SIMD_JSON_MAX_LINE`] go to [`json::validate`] directly.
    SimdJson,
}

/// The longest line [`Validator::SimdJson`] hands to simd-json (16 MiB).
/// simd-json copies the line and sizes its buffers and tape from it (several
/// times the line), with allocations that abort when they fail; longer lines
/// are validated in place by [`json::validate`], with the same answer.
pub const SIMD_JSON_MAX_LINE: usize = 16 << 20;

impl std::str::FromStr for Validator {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "scan" => Ok(Validator::Scan),
            "simd-json" => Ok(Validator::SimdJson),
            _ => Err(format!(
                "unknown validator {s:?} (expected scan or simd-json)"
            )),
        }
    }
}

/// Per-thread parsing state: simd-json's buffers, a padded copy of the
/// current line, and the validators' stack. Reused for every line.
pub struct LineParser {
    max_depth: usize,
    validator: Validator,
    buffers: simd_json::Buffers,
    tape: Option<simd_json::Tape<'static>>,
    scratch: Vec<u8>,
    stack: Vec<bool>,
}

impl LineParser {
    /// A parser that accepts nesting up to `max_depth` levels, with the
    /// default validator.
    pub fn new(max_depth: usize) -> Self {
        Self::with_validator(max_depth, Validator::default())
    }

    /// A parser with the given validator.
    pub fn with_validator(max_depth: usize, validator: Validator) -> Self {
        LineParser {
            max_depth,
            validator,
            buffers: simd_json::Buffers::with_max_depth(4096, max_depth),
            tape: Some(simd_json::Tape(Vec::new())),
            scratch: Vec::new(),
            stack: Vec::new(),
        }
    }

    /// Classifies one trimmed, non-empty line found at `offset` in the log.
    pub fn parse(&mut self, line: &[u8], offset: u64) -> Result<Record, SkipReason> {
        self.parse_with(line, offset, false)
    }

    /// [`LineParser::parse`] for a line already known to be UTF-8.
    pub fn parse_with(
        &mut self,
        line: &[u8],
        offset: u64,
        utf8_known_valid: bool,
    ) -> Result<Record, SkipReason> {
        self.parse_inner(line, offset, utf8_known_valid, None)
    }

    /// Classifies a line written by [`crate::parse::js::JsStringifier`] (valid
    /// UTF-8). `ts_if_null`: the `ts_ms` `JSON.parse` read when it overflowed
    /// to ±Infinity, which `JSON.stringify` writes as `null`; the record is
    /// kept with that `ts_ms`, as Node keeps it.
    pub fn parse_canonical(
        &mut self,
        line: &[u8],
        offset: u64,
        ts_if_null: Option<f64>,
    ) -> Result<Record, SkipReason> {
        self.parse_inner(line, offset, true, ts_if_null)
    }

    fn parse_inner(
        &mut self,
        line: &[u8],
        offset: u64,
        utf8_known_valid: bool,
        ts_if_null: Option<f64>,
    ) -> Result<Record, SkipReason> {
        let Ok(len) = u32::try_from(line.len()) else {
            return Err(SkipReason::LineTooLong);
        };
        let invalid = |e: json::JsonError| SkipReason::InvalidJson {
            kind: e.kind,
            column: e.column as u32,
        };
        let (fields, escape_extra) = match self.validator {
            Validator::Scan => {
                let r =
                    scan::scan_line_with(line, self.max_depth, &mut self.stack, utf8_known_valid)
                        .map_err(invalid)?;
                (r.fields(), r.escape_extra)
            }
            Validator::SimdJson => {
                if !self.simd_valid(line) {
                    json::validate(line, self.max_depth, &mut self.stack).map_err(invalid)?;
                }
                (json::scan_fields(line), escape::escaped_extra(line) as u64)
            }
        };
        record(line, len, offset, fields, escape_extra, ts_if_null)
    }

    /// The line splitter and the parser in one pass, for the line at the
    /// start of `s` (at `offset` in the log; `s` is valid UTF-8 and reaches
    /// at least to the line's `\n` to be decided here). Returns the
    /// line's classification, where its trimmed content ends and where its
    /// `\n` is; or `None` when this path cannot decide (see
    /// [`scan::scan_next_line`]): the caller then splits the line and calls
    /// [`LineParser::parse_with`], which decides every line.
    ///
    /// Compiled into its caller (the replay's line loop), with the scanner,
    /// so that loop can be compiled once with AVX2 (see
    /// [`scan::next_line`]).
    #[inline(always)]
    pub fn parse_next_line(
        &mut self,
        s: &[u8],
        offset: u64,
    ) -> Option<(Result<Record, SkipReason>, usize, usize)> {
        if self.validator != Validator::Scan {
            return None;
        }
        let next = scan::next_line(s, self.max_depth, &mut self.stack)?;
        let line = &s[..next.end];
        let fields = next.scan.fields();
        let r = record(
            line,
            next.end as u32,
            offset,
            fields,
            next.scan.escape_extra,
            None,
        );
        Some((r, next.end, next.newline))
    }

    /// simd-json's verdict. `true` means valid; `false` means "decide
    /// exactly" (it may still be valid).
    fn simd_valid(&mut self, line: &[u8]) -> bool {
        // simd-json needs a padded copy of the line and buffers and a tape
        // sized from it, all allocated infallibly: a longer line is left to
        // the exact path, which reads it in place (a sparse file's one 1 GiB
        // line aborted the process under a memory limit).
        if line.len() > SIMD_JSON_MAX_LINE {
            return false;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(line);
        self.scratch
            .resize(line.len() + simd_json::INPUT_PADDING, b' ');
        // simd-json rejects everything the grammar forbids (raw control
        // characters and invalid UTF-8 included), so its "valid" is final.
        let mut tape = match self.tape.take() {
            Some(t) => t.reset(),
            None => simd_json::Tape(Vec::new()),
        };
        let ok = simd_json::fill_tape_padded(
            &mut self.scratch,
            line.len(),
            &mut self.buffers,
            &mut tape,
        )
        .is_ok();
        self.tape = Some(tape.reset());
        ok
    }
}

/// A record from a valid line's members, or why the line is not one.
#[inline(always)]
fn record(
    line: &[u8],
    len: u32,
    offset: u64,
    fields: json::Fields,
    escape_extra: u64,
    ts_if_null: Option<f64>,
) -> Result<Record, SkipReason> {
    if !fields.is_object {
        return Err(SkipReason::NotAnObject);
    }
    let (kind_start, kind_len) = match fields.kind {
        Member::String { start, len } => (start, len),
        Member::Absent => return Err(SkipReason::MissingType),
        _ => return Err(SkipReason::TypeNotString),
    };
    let (ts, ts_start, ts_len) = match fields.ts_ms {
        Member::Number { start, len } => {
            let text = &line[start as usize..(start + len) as usize];
            let (ts, as_written) = json::number_and_form(text);
            let copied = as_written && start < 1 << (32 - Record::TS_START_SHIFT);
            (ts, start, if copied { len } else { 0 })
        }
        Member::Absent => return Err(SkipReason::MissingTsMs),
        Member::Other if ts_if_null.is_some() => (ts_if_null.unwrap_or(0.0), 0, 0),
        _ => return Err(SkipReason::TsMsNotNumber),
    };
    let kind = &line[kind_start as usize..(kind_start + kind_len) as usize];
    let escaped = kind.contains(&b'\\');
    let output = if escaped {
        json::StringUnits::new(kind).eq("text_output".encode_utf16())
    } else {
        kind == b"text_output"
    };
    let (kind, far) = Record::pack_kind(kind_start, kind_len);
    // A `ts_ms` text that is not copied keeps no start.
    let ts_start = if ts_len == 0 { 0 } else { ts_start };
    Ok(Record {
        ts,
        offset,
        len,
        escape_extra: escape_extra as u32,
        flags: (output as u32 * Record::OUTPUT)
            | (escaped as u32 * Record::KIND_ESCAPED)
            | far
            | (ts_len << Record::TS_LEN_SHIFT)
            | (ts_start << Record::TS_START_SHIFT),
        kind,
    })
}

#[cfg(test)]
mod tests;
