//! ③ execute — speculative decoding: the per-request state, acceptance
//! priors and the step-time line that prices draft rows (`speculate`), and
//! the draft model's own runtime (`drafter`). The owner's phase that drafts
//! and verifies is `owner/drafts.rs`.
//!
//! May use: `runtime`, `sample`. Must not use the owner's phases.

pub mod drafter;
pub mod speculate;
