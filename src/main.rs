//! The `wmreplay` binary: the command line lives in the library
//! (`wmreplay::cli`), documented by `wmreplay --help`.

fn main() -> std::process::ExitCode {
    wmreplay::cli::main()
}
