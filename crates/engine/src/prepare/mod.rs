//! Prepare: chat template rendering and tokenization on a bounded CPU pool,
//! and the limit checks that must pass before admission.
//!
//! Owns: the compiled chat template (from the GGUF's
//! `tokenizer.chat_template`, rendered with minijinja under Hugging Face
//! conventions) and the tokenizer pool's threads and bounded job queue.
//!
//! Invariants: the template is applied once per request, and the token IDs it
//! yields are what the engine sees; pool threads are stateless (pure
//! functions over the shared, immutable vocabulary); a full queue is an
//! immediate `Busy`, never a wait.

pub mod chat;
pub mod constraint;
pub mod encoder;
mod error;
pub mod literal;
pub mod media;

pub use error::PrepareError;

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::prepare::chat::{ChatPrompt, ChatSetup, TemplateInfo};

use crate::config::EngineConfig;
use crate::prepare::constraint::{Constraint, ConstraintCompiler, Grammar};
use crate::runtime::{LoadedModel, TokenId};

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads behind one bounded queue: a full queue is an
/// immediate error, never a wait; a job that panics fails its own request
/// and the thread goes on.
struct Pool {
    jobs: SyncSender<Job>,
    cap: usize,
}

impl Pool {
    fn new(name: &str, threads: usize, cap: usize, stack: Option<usize>) -> Self {
        let cap = cap.max(1);
        let (tx, rx) = sync_channel::<Job>(cap);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let mut b = std::thread::Builder::new().name(format!("{name}-{i}"));
            if let Some(bytes) = stack {
                b = b.stack_size(bytes);
            }
            let _ = b.spawn(move || loop {
                let job = match rx.lock() {
                    Ok(guard) => guard.recv(),
                    Err(_) => return,
                };
                match job {
                    Ok(job) => job(),
                    Err(_) => return,
                }
            });
        }
        Pool { jobs: tx, cap }
    }

    /// Run `f` on the pool. `busy` is the error for a full queue. A job
    /// whose caller has gone by the time a thread takes it is skipped.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, PrepareError> + Send + 'static,
        busy: PrepareError,
    ) -> Result<T, PrepareError> {
        let (tx, rx) = oneshot::channel::<Result<T, PrepareError>>();
        let job: Job = Box::new(move || {
            if tx.is_closed() {
                return;
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
                let what = crate::fatal::panic_text(p.as_ref());
                tracing::error!(panic = %what, "a prepare job panicked; its request fails");
                Err(PrepareError::Internal(what))
            });
            let _ = tx.send(r);
        });
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(busy),
            Err(TrySendError::Disconnected(_)) => return Err(PrepareError::Stopped),
        }
        rx.await.map_err(|_| PrepareError::Stopped)?
    }
}

/// Stack of a grammar-compile thread. llguidance's compiler recurses per
/// level of a schema's `$ref` chain or a grammar's rule chain (~2.6 KB a
/// level: 800 levels overflowed a 2 MiB stack, and a stack overflow aborts
/// the process, which no `catch_unwind` stops). The size limits bound the
/// depth (64 KiB of schema is under ~2,000 levels); this leaves a wide
/// margin. Only the pages a compile touches are ever committed.
pub const GRAMMAR_STACK: usize = 256 << 20;

/// The fallback template names (`--chat-template NAME`).
pub use steward_formats::fallback::builtin as builtin_template;

/// A rendered chat, tokenized.
#[derive(Debug, Clone)]
pub struct ChatTokens {
    pub tokens: Vec<TokenId>,
    /// The prompt left the model inside its reasoning block.
    pub in_reasoning: bool,
    /// Its media spans (placeholder ids in `tokens`).
    pub media: Vec<crate::request::MediaSpan>,
}

pub struct Preparer {
    model: Arc<LoadedModel>,
    chat: Arc<ChatSetup>,
    tokenizer: Pool,
    grammar: Pool,
    grammar_timeout: std::time::Duration,
    /// Control tokens' texts: client strings that spell one are kept text.
    specials: Arc<crate::prepare::literal::Specials>,
    /// Per token: a marker of the chat format (emitted as its text for the
    /// server's parser).
    markers: Arc<Vec<bool>>,
    /// The same for requests without tools: the reasoning markers only
    /// (call markers stay out of the text, as every control token does).
    reasoning_markers: Arc<Vec<bool>>,
    /// Control token ids by text (grammars name markers by id).
    special_ids: Arc<std::collections::HashMap<String, TokenId>>,
    /// Bytes of the vocabulary's longest token.
    max_token_bytes: usize,
    /// Built on first use (it walks the whole vocabulary).
    compiler: Arc<std::sync::OnceLock<Result<ConstraintCompiler, String>>>,
    /// The media encoder (a model with a projector), and the most rows
    /// one media span may have (the runtime's ubatch).
    encoder: Option<(Arc<encoder::Encoder>, usize)>,
}

impl Preparer {
    /// Fails (naming the template) when the chat template cannot serve.
    pub(crate) fn new(model: Arc<LoadedModel>, config: &EngineConfig) -> Result<Self, String> {
        let texts = special_texts(&model.vocab);
        let specials = Arc::new(crate::prepare::literal::Specials::new(
            texts.iter().map(|(_, t)| t.clone()),
        ));
        let names: Vec<String> = texts.iter().map(|(_, t)| t.clone()).collect();
        let chat =
            crate::prepare::chat::setup(&model, &names, config.prepare.chat_template.as_ref())?;
        let special_ids: std::collections::HashMap<String, TokenId> =
            texts.iter().map(|(id, t)| (t.clone(), *id)).collect();
        let table = |wanted: &[&str]| {
            let mut m = vec![false; model.vocab.token_bytes.len()];
            for (id, t) in &texts {
                if wanted.contains(&t.as_str()) && !model.vocab.is_eog(*id) {
                    m[*id as usize] = true;
                }
            }
            m
        };
        let markers = table(chat.family.markers());
        let reasoning_markers = table(&chat.family.reasoning_markers());
        let tokenizer = Pool::new(
            "steward-tok",
            config.prepare.tokenizer_threads,
            config.prepare.tokenizer_queue,
            None,
        );
        let grammar = Pool::new(
            "steward-grammar",
            config.prepare.grammar_threads,
            config.prepare.grammar_queue,
            Some(GRAMMAR_STACK),
        );
        let max_token_bytes = model
            .vocab
            .token_bytes
            .iter()
            .map(|b| b.len())
            .max()
            .unwrap_or(1);
        Ok(Preparer {
            model,
            chat: Arc::new(chat),
            tokenizer,
            grammar,
            grammar_timeout: config.prepare.grammar_timeout,
            max_token_bytes,
            specials,
            markers: Arc::new(markers),
            reasoning_markers: Arc::new(reasoning_markers),
            special_ids: Arc::new(special_ids),
            compiler: Arc::new(std::sync::OnceLock::new()),
            encoder: None,
        })
    }

    /// The chat format's family.
    pub fn family(&self) -> steward_formats::family::Family {
        self.chat.family
    }

    /// The syntax variant of the family's template.
    pub fn variant(&self) -> steward_formats::grammar::Variant {
        self.chat.variant
    }

    pub fn template_info(&self) -> &TemplateInfo {
        &self.chat.info
    }

    /// The format's marker tokens, for `GenerateRequest::markers`: all of
    /// them when calls are read (`tools`), the reasoning ones otherwise.
    pub fn markers(&self, tools: bool) -> Arc<Vec<bool>> {
        if tools {
            self.markers.clone()
        } else {
            self.reasoning_markers.clone()
        }
    }

    /// The control token with exactly this text.
    pub fn special_id(&self, text: &str) -> Option<TokenId> {
        self.special_ids.get(text).copied()
    }

    /// Compile a grammar for one request on the grammar pool (the first
    /// call also builds the vocabulary's token trie), within the compile
    /// deadline. A caller that leaves first (client gone) drops this
    /// future; a compile not yet started is then skipped.
    pub async fn constraint(&self, g: Grammar) -> Result<Constraint, PrepareError> {
        let model = self.model.clone();
        let compiler = self.compiler.clone();
        let job = self.grammar.run(
            move || {
                let cc = compiler
                    .get_or_init(|| ConstraintCompiler::new(&model.vocab))
                    .as_ref()
                    .map_err(|e| {
                        PrepareError::Grammar(format!("constrained decoding is unavailable: {e}"))
                    })?;
                cc.compile(&g).map_err(PrepareError::Grammar)
            },
            PrepareError::GrammarBusy(self.grammar.cap),
        );
        let t = self.grammar_timeout;
        tokio::time::timeout(t, job).await.map_err(|_| {
            PrepareError::Grammar(format!(
                "compiling it took longer than {} s (--grammar-timeout-s)",
                t.as_secs_f64()
            ))
        })?
    }

    async fn on_pool<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, PrepareError> + Send + 'static,
    ) -> Result<T, PrepareError> {
        let busy = PrepareError::Busy(self.tokenizer.cap);
        self.tokenizer.run(f, busy).await
    }

    /// The chat's prompt text (`/apply-template`), on the pool.
    pub async fn render(&self, p: ChatPrompt) -> Result<String, PrepareError> {
        let (chat, specials) = (self.chat.clone(), self.specials.clone());
        self.on_pool(move || {
            let (text, lits) = crate::prepare::chat::render(&chat, &specials, &p)?;
            Ok(lits.split(&text).into_iter().map(|(t, _)| t).collect())
        })
        .await
    }

    /// The media encoder, for a model with a projector.
    pub(crate) fn set_encoder(&mut self, e: Arc<encoder::Encoder>, max_span: usize) {
        self.encoder = Some((e, max_span));
    }

    /// The media encoder, if the model has a projector.
    pub fn encoder(&self) -> Option<&encoder::Encoder> {
        self.encoder.as_ref().map(|e| e.0.as_ref())
    }

    /// Template + tokenize a chat on the pool; its media, if any, through
    /// the encoder.
    pub async fn chat(&self, mut p: ChatPrompt) -> Result<ChatTokens, PrepareError> {
        if p.media.is_empty() {
            return self.chat_text(p).await;
        }
        let Some((enc, max_span)) = self.encoder.clone() else {
            let label = p.media[0].label.clone();
            return Err(PrepareError::Media(format!(
                "{label}: this model takes no media (it was served without --mmproj)"
            )));
        };
        let inputs = std::mem::take(&mut p.media);
        let n = inputs.len();
        let (chat, specials) = (self.chat.clone(), self.specials.clone());
        let model = self.model.clone();
        let (texts, in_reasoning) = self
            .on_pool(move || {
                let (text, lits) = crate::prepare::chat::render(&chat, &specials, &p)?;
                let in_reasoning = steward_formats::parse::starts_in_reasoning(chat.family, &text);
                let mut texts = vec![Vec::new()];
                for (piece, special) in lits.split(&text) {
                    let parts = if special {
                        piece.split(media::MEDIA_MARKER).collect()
                    } else {
                        vec![piece]
                    };
                    for (i, part) in parts.into_iter().enumerate() {
                        if i > 0 {
                            texts.push(Vec::new());
                        }
                        if let Some(t) = texts.last_mut() {
                            t.extend(model.tokenize(part, false, special));
                        }
                    }
                }
                media::split_text(&"\u{0}".repeat(texts.len() - 1), 0).ok();
                if texts.len() != n + 1 {
                    return Err(media::split_text("", n).unwrap_err());
                }
                Ok((texts, in_reasoning))
            })
            .await?;
        let mut encoded = Vec::with_capacity(n);
        for input in inputs {
            let (hash, label) = (input.hash, input.label.clone());
            let pieces = enc.encode(input).await.map_err(|e| match e {
                encoder::EncodeFailure::Busy(n) => PrepareError::MediaBusy(n),
                encoder::EncodeFailure::Timeout(d) => PrepareError::MediaTimeout(d.as_secs()),
                encoder::EncodeFailure::Stopped => PrepareError::Stopped,
                encoder::EncodeFailure::Failed(why) => PrepareError::Media(format!(
                    "{label}: the projector could not encode it: {why}"
                )),
            })?;
            encoded.push((hash, pieces, label));
        }
        let a = media::assemble(texts, &encoded, max_span)?;
        Ok(ChatTokens {
            tokens: nonempty(a.tokens)?,
            in_reasoning,
            media: a.media,
        })
    }

    /// Template + tokenize a text-only chat on the pool.
    async fn chat_text(&self, p: ChatPrompt) -> Result<ChatTokens, PrepareError> {
        let (chat, specials) = (self.chat.clone(), self.specials.clone());
        let model = self.model.clone();
        self.on_pool(move || {
            let (text, lits) = crate::prepare::chat::render(&chat, &specials, &p)?;
            let in_reasoning = steward_formats::parse::starts_in_reasoning(chat.family, &text);
            // The template writes BOS itself when the model wants one; only
            // its own markup is parsed for special tokens.
            let mut toks = Vec::new();
            for (piece, special) in lits.split(&text) {
                toks.extend(model.tokenize(piece, false, special));
            }
            Ok(ChatTokens {
                tokens: nonempty(toks)?,
                in_reasoning,
                media: Vec::new(),
            })
        })
        .await
    }

    /// Tokenize text for `/tokenize` (special-token text parsed when asked).
    pub async fn tokenize(
        &self,
        text: String,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>, PrepareError> {
        let model = self.model.clone();
        self.on_pool(move || {
            // An embedding model's inputs carry its specials at both ends.
            if add_special && model.facts.pooling.is_some() {
                return Ok(model.tokenize_with_specials(&text));
            }
            let add_bos = add_special && model.facts.add_bos;
            Ok(model.tokenize(&text, add_bos, parse_special))
        })
        .await
    }

    /// Tokenize embedding inputs on the pool, each with the vocabulary's
    /// special tokens around it (BERT: `[CLS] … [SEP]`).
    pub async fn embed_inputs(
        &self,
        texts: Vec<String>,
    ) -> Result<Vec<Vec<TokenId>>, PrepareError> {
        let model = self.model.clone();
        self.on_pool(move || {
            Ok(texts
                .iter()
                .map(|t| model.tokenize_with_specials(t))
                .collect())
        })
        .await
    }

    /// Token ids back to text (control tokens spelled out).
    pub fn detokenize(&self, tokens: &[TokenId]) -> Result<String, TokenId> {
        let v = &self.model.vocab;
        let mut bytes = Vec::new();
        for &t in tokens {
            if t < 0 || t as usize >= v.token_bytes.len() {
                return Err(t);
            }
            bytes.extend_from_slice(v.special_text(t));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Tokenize a raw completion prompt on the pool (BOS added when the model
    /// asks for it; control-token text is parsed as control tokens, as
    /// llama-server does).
    pub async fn text(&self, text: String) -> Result<Vec<TokenId>, PrepareError> {
        let model = self.model.clone();
        self.on_pool(move || {
            let add_bos = model.facts.add_bos;
            nonempty(model.tokenize(&text, add_bos, true))
        })
        .await
    }

    pub fn n_vocab(&self) -> usize {
        self.model.facts.n_vocab
    }

    /// Refuse text that cannot fit the context whatever it tokenizes to
    /// (each token covers at most the vocabulary's longest token of text),
    /// before the template and tokenizer spend time on it.
    pub fn check_text_fits(&self, bytes: usize, ctx_limit: u32) -> Result<(), PrepareError> {
        let least = bytes / self.max_token_bytes.max(1);
        if least >= ctx_limit as usize {
            return Err(PrepareError::ContextLength {
                limit: ctx_limit,
                prompt: least.min(u32::MAX as usize) as u32,
                max_tokens: 0,
            });
        }
        Ok(())
    }

    /// Check prompt + completion against the context limit and resolve
    /// `max_tokens` (absent: whatever room the context leaves, capped).
    pub fn resolve_max_tokens(
        prompt_len: usize,
        requested: Option<u32>,
        ctx_limit: u32,
        cap: u32,
    ) -> Result<u32, PrepareError> {
        let prompt = prompt_len as u32;
        let room = ctx_limit.saturating_sub(prompt);
        if let Some(r) = requested.filter(|&r| r > cap) {
            return Err(PrepareError::MaxTokens { requested: r, cap });
        }
        let max_tokens = requested.unwrap_or_else(|| room.min(cap));
        if prompt >= ctx_limit || max_tokens > room || max_tokens == 0 && room == 0 {
            return Err(PrepareError::ContextLength {
                limit: ctx_limit,
                prompt,
                max_tokens,
            });
        }
        Ok(max_tokens)
    }
}

/// The vocabulary's control tokens (no plain-text bytes of their own) and
/// their texts.
fn special_texts(v: &crate::runtime::Vocab) -> Vec<(TokenId, String)> {
    v.token_bytes
        .iter()
        .zip(&v.token_text_special)
        .enumerate()
        .filter(|(_, (b, s))| b.is_empty() && !s.is_empty())
        .map(|(i, (_, s))| (i as TokenId, String::from_utf8_lossy(s).into_owned()))
        .collect()
}

fn nonempty(t: Vec<TokenId>) -> Result<Vec<TokenId>, PrepareError> {
    if t.is_empty() {
        Err(PrepareError::EmptyPrompt)
    } else {
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_checks() {
        assert_eq!(Preparer::resolve_max_tokens(10, Some(5), 100, 50), Ok(5));
        assert_eq!(Preparer::resolve_max_tokens(10, None, 100, 50), Ok(50));
        assert_eq!(Preparer::resolve_max_tokens(90, None, 100, 50), Ok(10));
        assert!(matches!(
            Preparer::resolve_max_tokens(90, Some(11), 100, 50),
            Err(PrepareError::ContextLength { .. })
        ));
        assert!(Preparer::resolve_max_tokens(100, None, 100, 50).is_err());
        // An explicit max_tokens above the cap is refused, not generated.
        assert_eq!(
            Preparer::resolve_max_tokens(10, Some(51), 100, 50),
            Err(PrepareError::MaxTokens {
                requested: 51,
                cap: 50
            })
        );
    }
}
