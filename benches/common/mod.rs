//! What the benches share: the generated corpus, and a scratch copy of it
//! they can append to.

// Each bench that includes this module uses a part of it.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

use wmreplay::__internals::corpus::{GenOptions, generate, parse_size};

/// The seed-1 corpus of `spec` bytes (e.g. `1GiB`), generated once into
/// `target/bench-data/`, and its size.
pub fn corpus(spec: &str) -> (PathBuf, u64) {
    let size = parse_size(spec).expect("a size like 1GiB");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join(format!("bench-{spec}-seed1.log"));
    if std::fs::metadata(&source).map_or(true, |m| m.len() < size) {
        eprintln!("generating {}", source.display());
        let mut f = std::io::BufWriter::new(std::fs::File::create(&source).unwrap());
        let options = GenOptions {
            size,
            seed: 1,
            ..GenOptions::default()
        };
        generate(&options, &mut f, &|_| {}).unwrap();
        f.flush().unwrap();
    }
    (source, size)
}

/// A fresh copy of the seed-1 corpus of `WMREPLAY_LIVE_SIZE` bytes (default
/// 1GiB), named after `name`, and its size.
pub fn scratch_log(name: &str) -> (PathBuf, u64) {
    let spec = std::env::var("WMREPLAY_LIVE_SIZE").unwrap_or_else(|_| "1GiB".into());
    let (source, size) = corpus(&spec);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let scratch = dir.join(format!("{name}-{spec}.log"));
    std::fs::copy(&source, &scratch).unwrap();
    (scratch, size)
}
