//! One chunk's result as a parse worker leaves it: its records, stats,
//! line count, and (when asked) its re-serialised records and rendered
//! messages. Shared by the two chunk loops (`chunks.rs`, `js_chunk.rs`).

use super::rendered::ChunkRender;
use super::stats::ReplayStats;
use crate::parse::Record;

/// One chunk's records and stats; its buffers are reused for later chunks.
pub(super) struct ChunkResult {
    pub(super) records: Vec<Record>,
    pub(super) stats: ReplayStats,
    /// Physical lines of the chunk (skips' line numbers are relative to it,
    /// 0-based).
    pub(super) lines: u64,
    /// [`RecordMode::Js`]: the chunk's re-serialised records (record offsets
    /// are relative to it).
    pub(super) arena: Option<Vec<u8>>,
    /// The chunk's messages, when rendered while parsing.
    pub(super) rendered: Option<ChunkRender>,
}

impl ChunkResult {
    pub(super) fn new(js: bool) -> Self {
        ChunkResult {
            records: Vec::new(),
            stats: ReplayStats::default(),
            lines: 0,
            arena: js.then(Vec::new),
            rendered: None,
        }
    }

    /// Empties the result, keeping its buffers' memory.
    pub(super) fn clear(&mut self) {
        self.records.clear();
        let mut skips = std::mem::take(&mut self.stats.skips);
        skips.clear();
        self.stats = ReplayStats {
            skips,
            ..ReplayStats::default()
        };
        self.lines = 0;
        if let Some(a) = &mut self.arena {
            a.clear();
        }
    }
}
