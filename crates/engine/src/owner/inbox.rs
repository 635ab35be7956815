//! ③ execute — the owner's inbox: every message the handle sends the
//! owner (`Command`), a generation request with its outbox (`Submission`),
//! an embedding request (`EmbedSubmission`). A leaf: the handle and the
//! owners (`owner/mod.rs`, `owner/embed.rs`) both use it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use crate::config::{AdapterInfo, AdapterSpec};
use crate::deliver::stream::{CancelNote, Event, GenerationError};
use crate::owner::kv::cells::CellSlot;
use crate::request::GenerateRequest;
use crate::runtime::TokenId;

pub(crate) enum Command {
    Submit(Box<Submission>),
    /// Cancel by request ID; unknown or already retired IDs are ignored.
    Cancel(String),
    /// End every queued and admitted request with a `Shutdown` error.
    CancelAll,
    /// Stop the owner as if every handle had been dropped.
    Stop,
    /// Load a LoRA adapter while running.
    LoadAdapter(
        AdapterSpec,
        tokio::sync::oneshot::Sender<Result<AdapterInfo, String>>,
    ),
    /// Embed (or score) tokenized inputs: embedding models only.
    Embed(Box<EmbedSubmission>),
    /// Every slot's tokens in the cell map (`/debug/cells`).
    CellMap(tokio::sync::oneshot::Sender<Vec<CellSlot>>),
    /// Nothing: the owner's timed work is due (`owner/pins.rs`'s alarm).
    Wake,
}

pub(crate) struct Submission {
    pub req: GenerateRequest,
    pub outbox: mpsc::Sender<Event>,
    pub note: Arc<CancelNote>,
}

/// One embedding request: inputs already tokenized and checked to fit a
/// batch each.
pub struct EmbedSubmission {
    pub id: String,
    pub inputs: Vec<Vec<TokenId>>,
    pub reply: oneshot::Sender<Result<EmbedOutput, GenerationError>>,
    pub deadline: Option<Instant>,
}

/// A request's result: one raw (unnormalised) output per input.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedOutput {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: u32,
    pub queue_ms: f64,
    pub compute_ms: f64,
}
