//! The naive replay (serde_json, one thread, `sort_by`) and the engine give
//! the same body and stats on the benchmark corpus, so the benchmarks
//! compare two implementations of the same answer.

mod naive;

use wmreplay::__internals::corpus::{GenOptions, generate};
use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};

#[test]
fn naive_and_engine_agree_on_the_benchmark_corpus() {
    for seed in [1, 2] {
        let mut log = Vec::new();
        let options = GenOptions {
            size: 6 << 20,
            seed,
            ..GenOptions::default()
        };
        generate(&options, &mut log, &|_| {}).unwrap();
        let (want, stats) = naive::respond(&log, SYSTEM_RULE, "q", Some("s"));
        let r = replay(&log, &ReplayOptions::default());
        let got = r.render_request(
            Format::Anthropic,
            SYSTEM_RULE,
            &CurrentRequest {
                text: "q",
                session_id: Some("s"),
            },
        );
        let s = r.stats();
        assert_eq!(
            (
                s.total_lines,
                s.parsed_entries,
                s.skipped_invalid_json,
                s.skipped_invalid_shape
            ),
            (
                stats.total_lines,
                stats.parsed_entries,
                stats.skipped_invalid_json,
                stats.skipped_invalid_shape
            )
        );
        assert!(s.skipped_invalid_json > 0 && s.skipped_invalid_shape > 0);
        assert!(got == want, "seed {seed}: bodies differ");
    }
}
