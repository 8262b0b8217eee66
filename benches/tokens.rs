//! A scoped token's check (`serve --token-file`): 1,000 tokens, each
//! opening a few of 1,000 logs (ids and a prefix), and the check a request
//! pays: the presented token hashed, its grant looked up, the log tested.
//!
//! `cargo bench --bench tokens` (target: ≤ 10 µs a check).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use wmreplay::server::{Access, TokenFile, token_line_hash};

fn file() -> TokenFile {
    let mut text = String::new();
    for t in 0..1000 {
        let logs: Vec<String> = (0..5)
            .map(|k| format!("log-{}", (t * 7 + k * 131) % 1000))
            .chain([format!("team-{t}-*")])
            .collect();
        text.push_str(&format!(
            "{} write {}\n",
            token_line_hash(&format!("wmr_token_number_{t:04}_0123456789abcdef")),
            logs.join(",")
        ));
    }
    TokenFile::parse(&text, "bench").unwrap()
}

fn bench(c: &mut Criterion) {
    let f = file();
    let mut g = c.benchmark_group("tokens");
    let token = b"wmr_token_number_0500_0123456789abcdef";
    g.bench_function("check-1000-tokens-1000-logs/allowed", |b| {
        b.iter(|| {
            let grant = f.grant(black_box(token)).unwrap();
            assert!(grant.opens(black_box("log-631"), Access::Write));
        })
    });
    g.bench_function("check-1000-tokens-1000-logs/refused", |b| {
        b.iter(|| {
            let grant = f.grant(black_box(token)).unwrap();
            assert!(!grant.opens(black_box("log-632"), Access::Write));
        })
    });
    g.bench_function("check-1000-tokens-1000-logs/unknown-token", |b| {
        b.iter(|| {
            assert!(
                f.grant(black_box(b"wmr_not_a_token_of_the_file_at_all"))
                    .is_none()
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
