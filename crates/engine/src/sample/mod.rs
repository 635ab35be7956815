//! ④ sample, decode text — a row's logits to a token (`sampler`: the
//! sampling kernels, penalties, grammar masks, logprobs) and tokens to
//! UTF-8 text that never splits a character or a stop string (`detok`).
//! Called by the owner per row (`owner/rows.rs`).
//!
//! May use: `runtime` (token ids, vocabulary), `prepare::constraint` (the
//! compiled grammar a row is masked by). Must not use the owner.

pub mod detok;
pub mod sampler;
