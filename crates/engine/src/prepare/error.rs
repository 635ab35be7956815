//! ① prepare — why a request could not be prepared (`PrepareError`): a
//! leaf the template, the tokenizer pool and the grammar compiler share.

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum PrepareError {
    #[error("the tokenizer queue is full ({0} jobs waiting); retry shortly")]
    Busy(usize),
    #[error("chat template failed: {0}")]
    Template(String),
    #[error("the prompt is empty after tokenization")]
    EmptyPrompt,
    #[error("this model's maximum context length is {limit} tokens; the request has {prompt} prompt tokens and asks for {max_tokens} completion tokens")]
    ContextLength {
        limit: u32,
        prompt: u32,
        max_tokens: u32,
    },
    #[error("`max_tokens` is {requested}; this server allows at most {cap} (--max-tokens-limit)")]
    MaxTokens { requested: u32, cap: u32 },
    #[error("the engine stopped")]
    Stopped,
    /// The grammar or schema does not compile; the text says why.
    #[error("{0}")]
    Grammar(String),
    /// The grammar compiler's queue is full.
    #[error("the grammar compiler is busy ({0} compiles waiting); retry shortly")]
    GrammarBusy(usize),
    /// A media part cannot be used (the text names the part and why).
    #[error("{0}")]
    Media(String),
    /// The media encoder's queue is full.
    #[error("the media encoder is busy ({0} items waiting); retry shortly")]
    MediaBusy(usize),
    /// A media item waited past the encoder's deadline.
    #[error("the media encoder did not get to this request within {0} s; retry shortly")]
    MediaTimeout(u64),
    /// A pool job panicked (a bug; the pool thread lives on, the request
    /// fails alone).
    #[error("internal error while preparing the request: {0}")]
    Internal(String),
}
