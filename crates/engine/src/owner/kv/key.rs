//! The key a prefix was computed under, and the common-prefix length of two
//! token runs: the leaf every KV module builds on (events, blocks, the
//! cell map, the prefix cache, the host tier).

use crate::runtime::TokenId;

/// What a prefix was computed under. Reuse requires equality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PrefixKey {
    /// Hash of the model identity (weights hash, tokenizer, template).
    pub model: u64,
    /// Hash of the loaded adapters and their load generation (0: none).
    pub adapters: u64,
    /// Hash of multimodal inputs (0: text only).
    pub media: u64,
}

/// Length of the common prefix of two token sequences.
pub(crate) fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}
