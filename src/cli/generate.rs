//! `wmreplay gen`: a deterministic, realistic log for benchmarks and tests.

use std::path::PathBuf;

use crate::__internals::corpus;
use clap::Args;

use super::Failure;
use super::args::*;

/// Arguments of `wmreplay gen`.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// Where to write the log ("-" for stdout).
    pub out: PathBuf,
    /// How much to write, e.g. 100MiB, 1GiB, 64k (K/M/G/T with or without "iB"
    /// are powers of 1024; KB/MB/GB/TB powers of 1000).
    #[arg(long, value_parser = parse_size)]
    pub size: u64,
    /// RNG seed: the same seed and options give the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Share of records arriving late, with an earlier ts_ms.
    #[arg(long, default_value_t = 0.03, value_parser = parse_share)]
    pub disorder: f64,
    /// Share of malformed lines (truncated, trailing garbage, wrong shape, blank, NUL padding).
    #[arg(long, default_value_t = 0.002, value_parser = parse_share)]
    pub bad: f64,
}

/// `wmreplay gen`.
pub fn run(args: GenArgs) -> Result<(), Failure> {
    let GenArgs {
        out,
        size,
        seed,
        disorder,
        bad,
    } = args;
    let options = corpus::GenOptions {
        size,
        seed,
        disorder,
        bad,
    };
    generate(&out, &options)
}

fn generate(out: &std::path::Path, options: &corpus::GenOptions) -> Result<(), Failure> {
    let bar = progress_bar(options.size, format!("writing {}", out.display()));
    let inc = |n: u64| {
        if let Some(b) = &bar {
            b.inc(n)
        }
    };
    let result = if out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut w = stdout.lock();
        corpus::generate(options, &mut w, &inc).map_err(Failure::from)
    } else {
        let file = std::fs::File::create(out)
            .map_err(|e| Failure::Io(format!("{}: cannot create: {e}", out.display())))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        corpus::generate(options, &mut w, &inc)
            .map_err(|e| Failure::Io(format!("{}: cannot write: {e}", out.display())))
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    result.map(|_| ())
}
