//! The engine's integration tests through the real runtime, in one binary
//! (one link instead of seven: the suite's time on 2 cores). Each module is
//! one subject; run one with `cargo test --release -p steward-engine --test
//! it -- real_model::` (a module path filter).

mod common;
mod disk_cache;
mod media;
mod memory_kinds;
mod prefix_cache;
mod real_model;
mod speculative;
mod tenancy;
