//! KV-cache events for routers that track which replica holds which prompt
//! prefix (vLLM's format: llm-d's KV indexer, Dynamo, AIBrix read it).
//!
//! A block is `BLOCK_TOKENS` consecutive tokens at a multiple of that
//! position in some slot's cells (the cell map, `owner/kv/cells.rs`); only full
//! blocks count. Its hash chains its parent's: `block_hash(parent, key,
//! tokens)` is the first 8 bytes (little-endian) of SHA-256 over the
//! parent's hash (0 for the first block), the prefix identity (model,
//! adapters, media: 3 × u64) and the token IDs (i32), all little-endian. A
//! block is *stored* when the first slot comes to hold it and *removed*
//! when the last one stops (cells cleared, truncated or evicted): the
//! replica's set of blocks, not each copy. The wire encoding (msgpack over
//! ZeroMQ) is the server's (`steward_server::kvevents`).

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::owner::kv::key::PrefixKey;
use crate::runtime::TokenId;

/// Tokens per block: the block size `vllm:cache_config_info` reports.
pub const BLOCK_TOKENS: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub enum KvEvent {
    /// Consecutive new blocks of one chain: `parent` precedes the first;
    /// `tokens` are all their tokens (`hashes.len() * BLOCK_TOKENS`).
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: Vec<TokenId>,
        lora_id: Option<i64>,
    },
    Removed {
        hashes: Vec<u64>,
    },
    /// Every block is gone (a start, or a resync after a dropped batch: a
    /// full `Stored` snapshot follows).
    Cleared,
}

/// One step's events from one model, to the publisher.
#[derive(Debug, Clone)]
pub struct KvBatch {
    pub topic: Arc<str>,
    /// Unix seconds.
    pub ts: f64,
    pub events: Vec<KvEvent>,
    /// `"GPU"` when the model's layers are offloaded, else `"CPU"`.
    pub medium: &'static str,
}

/// Where an engine sends its batches (bounded; the owner never waits: a
/// full queue drops the batch and the next one is a resync).
#[derive(Debug, Clone)]
pub struct KvSink {
    pub topic: Arc<str>,
    pub tx: tokio::sync::mpsc::Sender<KvBatch>,
}

/// The chained hash of one block (see the module note).
pub fn block_hash(parent: u64, key: &PrefixKey, tokens: &[TokenId]) -> u64 {
    let mut h = Sha256::new();
    h.update(parent.to_le_bytes());
    h.update(key.model.to_le_bytes());
    h.update(key.adapters.to_le_bytes());
    h.update(key.media.to_le_bytes());
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The `lora_id` of blocks computed under `key` (none without adapters).
pub fn lora_id(key: &PrefixKey) -> Option<i64> {
    (key.adapters != 0).then_some((key.adapters & 0x7fff_ffff) as i64)
}
