//! The server's tests, in one test binary: each module was a binary of its
//! own, and each compiled the same server, client and mock upstream code
//! again (about 20 s apiece); together they compile it once.
//!
//! `cargo test --test service` runs them all; a module's alone by its name,
//! e.g. `cargo test --test service -- respond::`. The tests that need a
//! service from outside (the SDKs, nats-server) are `#[ignore]`d:
//! `cargo test --test service -- --ignored sdk_clients::` or `jetstream`.
//!
//! Tests that measure their own process (resident memory, the open-files
//! limit) or that serialise themselves stay binaries of their own
//! (`many_logs`, `faults_process`, `append`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../mock/mod.rs"]
mod mock;

mod agents;
mod compaction;
mod compat;
mod crashes;
mod doc_blocks;
mod doc_examples;
mod faults;
mod front_doors;
mod hardening;
mod hybrid;
mod inspector;
mod jetstream;
mod jetstream_fleet;
mod log_dir;
mod memory;
mod metrics;
mod model_bounds;
mod provider_rules;
mod real_agents;
mod respond;
mod responses;
mod sdk_clients;
mod search;
mod serve_process;
mod server;
mod startup;
mod streams;
mod tools;
