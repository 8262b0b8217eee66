//! The prompt-cache simulator's own tests (hand-made cases whose answers
//! are worked out by hand), run from `bench/cache/sim.rs`.

#[path = "../bench/cache/sim.rs"]
#[allow(dead_code)]
mod sim;
