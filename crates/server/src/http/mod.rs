//! The HTTP ground every other folder stands on: the one error type and its
//! HTTP mapping (`error`), connections (`conn`: accept loop, limits, TLS
//! handshake, `bind`), API keys, rate limits and TLS config (`access`),
//! token quotas per key (`quota`), per-key usage counters (`usage`), and
//! the HTTP side's counters (`counters`).
//!
//! Uses no sibling folder: everything here is a leaf of the crate.

pub mod access;
pub mod conn;
pub mod counters;
pub mod error;
pub mod quota;
pub mod usage;
