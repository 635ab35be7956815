//! ② admit — the two ledgers admission obeys, named apart:
//! - `memory`: the **process memory ledger** — where the process's bytes go
//!   (weights, KV pool, cached prefixes, buffers, other = RSS), the
//!   operational budget, sizing the KV pool to it, placement on devices.
//! - `kv`: the **KV ledger** — the KV pool's cells: used, reserved growth,
//!   cached, and the permit each admitted sequence holds until it retires.
//!
//! The decision itself (which waiting request gets a slot, what it reuses,
//! what must be evicted or spilled first) is the owner's `owner/admit.rs`.
//!
//! May use: `deliver::stats` (the published snapshot the memory ledger
//! reads). Must not use the owner.

pub mod kv;
pub mod memory;
