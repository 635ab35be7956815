//! The handlers, one file per API: chat and legacy completions
//! (`generate`: the request's path route → validate → prepare → submit →
//! deliver), the translated APIs (`dialect`: Anthropic Messages, OpenAI
//! Responses), embeddings and rerank (`embed`), models and admin routes
//! (`models`, also `route`: a request's model), template and tokenizer
//! introspection (`introspect`); and what they all share (`state`).
//!
//! May use `deliver/`, `prepare/`, `http/` and `state/` (the Responses
//! store's durable copy).

pub(crate) mod dialect;
pub(crate) mod embed;
pub(crate) mod generate;
pub(crate) mod introspect;
pub(crate) mod models;
pub mod state;
