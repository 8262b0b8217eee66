//! Fuzz target `settings`: see `check_settings` in `fuzz/checks.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::check_settings(data));
