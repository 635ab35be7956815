//! ③ execute — the step's plan, pure: which sequences decode, which prompt
//! chunks run (`scheduler`), and what a step costs (`cost`, the fitted
//! step-time model the budget is derived from), who goes first and who may
//! be preempted (`tenancy`: priorities, fair share). No runtime, no I/O: tested
//! with plain values.
//!
//! May use: nothing of the engine but token ids. The owner (`owner/budget.rs`,
//! `owner/mod.rs`) applies the plans.

pub mod adapter_sets;
pub mod admit;
pub mod cost;
pub mod scheduler;
pub mod tenancy;
