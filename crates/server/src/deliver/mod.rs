//! Stages ④ and ⑤, the answer's side: engine events read back as a chat's
//! output (`output`: text, reasoning, tool calls), logprobs shapes
//! (`logprobs`), and the reply itself, whole or SSE (`reply`), in OpenAI's
//! shape or through another API's (`shape`: the `Dialect` traits the
//! translated APIs implement).
//!
//! May use `prepare/` (the checked request) and `http/`.

pub mod logprobs;
pub mod output;
pub(crate) mod reply;
pub(crate) mod shape;
