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

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};
use serde::Serialize;
use tokio::sync::oneshot;

use crate::constraint::{Constraint, ConstraintCompiler, Grammar};
use crate::model::{LoadedModel, TokenId};
use crate::EngineConfig;

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
    /// A pool job panicked (a bug; the pool thread lives on, the request
    /// fails alone).
    #[error("internal error while preparing the request: {0}")]
    Internal(String),
}

/// A chat message as the template sees it (Hugging Face conventions:
/// assistant `tool_calls` as `{id, type, function: {name, arguments}}` with
/// `arguments` a JSON object, tool results as role `tool`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct TemplateMessage {
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Tool definitions the template renders, and how.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    /// OpenAI `tools` (`[{type: "function", function: {...}}]`).
    pub tools: serde_json::Value,
}

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
                let what = crate::panic_text(p.as_ref());
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

/// ChatML, used when the GGUF carries no template.
const FALLBACK_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

pub struct Preparer {
    model: Arc<LoadedModel>,
    env: Arc<Environment<'static>>,
    tokenizer: Pool,
    grammar: Pool,
    grammar_timeout: std::time::Duration,
    bos_text: String,
    eos_text: String,
    /// The template renders `tools` itself; otherwise Steward writes them
    /// into the system message (see `inline_tools`).
    template_has_tools: bool,
    /// Control tokens' texts: client strings that spell one are kept text.
    specials: Arc<crate::literal::Specials>,
    /// Bytes of the vocabulary's longest token.
    max_token_bytes: usize,
    /// Built on first use (it walks the whole vocabulary).
    compiler: Arc<std::sync::OnceLock<Result<ConstraintCompiler, String>>>,
}

fn raise_exception(msg: String) -> Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

impl Preparer {
    pub(crate) fn new(model: Arc<LoadedModel>, config: &EngineConfig) -> Self {
        let source = model.facts.chat_template.clone().unwrap_or_else(|| {
            tracing::warn!("the GGUF has no chat template; using ChatML");
            FALLBACK_TEMPLATE.to_string()
        });
        let template_has_tools = source.contains("tools");
        let env = environment(source).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "chat template does not compile; using ChatML");
            environment(FALLBACK_TEMPLATE.to_string()).unwrap_or_else(|_| Environment::new())
        });
        let text_of = |t: Option<TokenId>| {
            t.and_then(|t| model.vocab.token_text_special.get(t as usize))
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        let bos_text = text_of(model.facts.bos);
        let eos_text = text_of(model.facts.eos);
        let tokenizer = Pool::new(
            "steward-tok",
            config.tokenizer_threads,
            config.tokenizer_queue,
            None,
        );
        let grammar = Pool::new(
            "steward-grammar",
            config.grammar_threads,
            config.grammar_queue,
            Some(GRAMMAR_STACK),
        );
        let max_token_bytes = model
            .vocab
            .token_bytes
            .iter()
            .map(|b| b.len())
            .max()
            .unwrap_or(1);
        let specials = Arc::new(specials(&model.vocab));
        Preparer {
            model,
            env: Arc::new(env),
            tokenizer,
            grammar,
            grammar_timeout: config.grammar_timeout,
            bos_text,
            eos_text,
            template_has_tools,
            max_token_bytes,
            specials,
            compiler: Arc::new(std::sync::OnceLock::new()),
        }
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

    /// Render the chat template (pure; runs on the pool via `chat`).
    pub fn render_chat(
        &self,
        messages: &[TemplateMessage],
        tools: Option<&ToolSpec>,
    ) -> Result<String, PrepareError> {
        let (m, t) = self.tool_messages(messages, tools);
        render(&self.env, &m, t, &self.bos_text, &self.eos_text)
    }

    /// Messages and `tools` as this template wants them: passed through when
    /// it renders tools, otherwise written into the conversation.
    fn tool_messages<'a>(
        &self,
        messages: &[TemplateMessage],
        tools: Option<&'a ToolSpec>,
    ) -> (Vec<TemplateMessage>, Option<&'a serde_json::Value>) {
        tool_messages(self.template_has_tools, messages, tools)
    }

    async fn on_pool<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, PrepareError> + Send + 'static,
    ) -> Result<T, PrepareError> {
        let busy = PrepareError::Busy(self.tokenizer.cap);
        self.tokenizer.run(f, busy).await
    }

    /// Template + tokenize a chat on the pool.
    pub async fn chat(
        &self,
        messages: Vec<TemplateMessage>,
        tools: Option<ToolSpec>,
    ) -> Result<Vec<TokenId>, PrepareError> {
        let env = self.env.clone();
        let model = self.model.clone();
        let (bos, eos) = (self.bos_text.clone(), self.eos_text.clone());
        let native = self.template_has_tools;
        let specials = self.specials.clone();
        self.on_pool(move || {
            let mut lits = crate::literal::Literals::default();
            let (messages, tools) = protect(&mut lits, &specials, messages, tools)
                .map_err(|e| PrepareError::Template(e.to_string()))?;
            let (messages, tools) = tool_messages(native, &messages, tools.as_ref());
            let text = render(&env, &messages, tools, &bos, &eos)?;
            // The template writes BOS itself when the model wants one; only
            // its own markup is parsed for special tokens.
            let mut toks = Vec::new();
            for (piece, special) in lits.split(&text) {
                toks.extend(model.tokenize(piece, false, special));
            }
            nonempty(toks)
        })
        .await
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

/// The texts of the vocabulary's control tokens (those with no plain-text
/// bytes of their own).
fn specials(v: &crate::model::Vocab) -> crate::literal::Specials {
    crate::literal::Specials::new(
        v.token_bytes
            .iter()
            .zip(&v.token_text_special)
            .filter(|(b, s)| b.is_empty() && !s.is_empty())
            .map(|(_, s)| String::from_utf8_lossy(s).into_owned()),
    )
}

/// Every client string of a chat, with special-token texts replaced by
/// placeholders (`literal`).
fn protect(
    lits: &mut crate::literal::Literals,
    sp: &crate::literal::Specials,
    messages: Vec<TemplateMessage>,
    tools: Option<ToolSpec>,
) -> Result<(Vec<TemplateMessage>, Option<ToolSpec>), crate::literal::TooMany> {
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        out.push(TemplateMessage {
            role: m.role,
            content: lits.protect(&m.content, sp)?,
            tool_calls: match m.tool_calls {
                Some(c) => Some(
                    c.iter()
                        .map(|v| lits.protect_json(v, sp))
                        .collect::<Result<_, _>>()?,
                ),
                None => None,
            },
            tool_call_id: m.tool_call_id.map(|t| lits.protect(&t, sp)).transpose()?,
            name: m.name.map(|t| lits.protect(&t, sp)).transpose()?,
        });
    }
    let tools = match tools {
        Some(t) => Some(ToolSpec {
            tools: lits.protect_json(&t.tools, sp)?,
        }),
        None => None,
    };
    Ok((out, tools))
}

fn nonempty(t: Vec<TokenId>) -> Result<Vec<TokenId>, PrepareError> {
    if t.is_empty() {
        Err(PrepareError::EmptyPrompt)
    } else {
        Ok(t)
    }
}

/// The tool-use instructions Steward writes for a template that does not
/// render `tools` (the Hermes convention, which Qwen2.5 and many fine-tunes
/// follow); calls are read back from `<tool_call>` blocks.
fn tools_preamble(tools: &serde_json::Value) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools.as_array().into_iter().flatten() {
        s.push('\n');
        s.push_str(&t.to_string());
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// The text of one assistant tool call as the model writes it.
pub fn tool_call_text(name: &str, arguments: &serde_json::Value) -> String {
    format!(
        "<tool_call>\n{}\n</tool_call>",
        serde_json::json!({"name": name, "arguments": arguments})
    )
}

fn tool_messages<'a>(
    native: bool,
    messages: &[TemplateMessage],
    tools: Option<&'a ToolSpec>,
) -> (Vec<TemplateMessage>, Option<&'a serde_json::Value>) {
    if native {
        return (messages.to_vec(), tools.map(|t| &t.tools));
    }
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(t) = tools {
        let pre = tools_preamble(&t.tools);
        match messages.first() {
            Some(m) if m.role == "system" || m.role == "developer" => {
                out.push(TemplateMessage {
                    role: "system".into(),
                    content: format!("{}\n\n{pre}", m.content),
                    ..Default::default()
                });
            }
            _ => out.push(TemplateMessage {
                role: "system".into(),
                content: pre,
                ..Default::default()
            }),
        }
    }
    let skip = usize::from(
        tools.is_some()
            && messages
                .first()
                .is_some_and(|m| m.role == "system" || m.role == "developer"),
    );
    for m in &messages[skip..] {
        match m.role.as_str() {
            "assistant" if m.tool_calls.is_some() => {
                let mut content = m.content.clone();
                for c in m.tool_calls.iter().flatten() {
                    let f = &c["function"];
                    let name = f["name"].as_str().unwrap_or_default();
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&tool_call_text(name, &f["arguments"]));
                }
                out.push(TemplateMessage {
                    role: "assistant".into(),
                    content,
                    ..Default::default()
                });
            }
            "tool" => out.push(TemplateMessage {
                role: "user".into(),
                content: format!("<tool_response>\n{}\n</tool_response>", m.content),
                ..Default::default()
            }),
            _ => out.push(TemplateMessage {
                role: m.role.clone(),
                content: m.content.clone(),
                ..Default::default()
            }),
        }
    }
    (out, None)
}

/// The template environment for `source` (Hugging Face conventions: the
/// Python string methods, `raise_exception`, the builtins).
fn environment(source: String) -> Result<Environment<'static>, JinjaError> {
    let mut env = Environment::new();
    minijinja_contrib::add_to_environment(&mut env);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_template_owned("chat", source)?;
    Ok(env)
}

/// A chat as one template renders it, the client's strings protected and
/// the result in tokenizer pieces (text, parse special tokens): the
/// prepare path without a model, for tests and fuzzing. `specials`: the
/// control tokens' texts.
pub fn render_pieces(
    source: &str,
    specials: &[&str],
    messages: Vec<TemplateMessage>,
    tools: Option<ToolSpec>,
) -> Result<Vec<(String, bool)>, PrepareError> {
    let env = environment(source.to_string()).map_err(|e| PrepareError::Template(e.to_string()))?;
    let sp = crate::literal::Specials::new(specials.iter().map(|s| s.to_string()));
    let mut lits = crate::literal::Literals::default();
    let (messages, tools) = protect(&mut lits, &sp, messages, tools)
        .map_err(|e| PrepareError::Template(e.to_string()))?;
    let (messages, tools) = tool_messages(tools.is_some(), &messages, tools.as_ref());
    let text = render(&env, &messages, tools, "", "")?;
    Ok(lits
        .split(&text)
        .into_iter()
        .map(|(t, sp)| (t.to_string(), sp))
        .collect())
}

/// The fallback template (ChatML), for tests and fuzzing.
pub const CHATML: &str = FALLBACK_TEMPLATE;

fn render(
    env: &Environment<'static>,
    messages: &[TemplateMessage],
    tools: Option<&serde_json::Value>,
    bos: &str,
    eos: &str,
) -> Result<String, PrepareError> {
    let tmpl = env
        .get_template("chat")
        .map_err(|e| PrepareError::Template(e.to_string()))?;
    tmpl.render(context! {
        messages => messages,
        tools => tools,
        add_generation_prompt => true,
        bos_token => bos,
        eos_token => eos,
    })
    .map_err(|e| PrepareError::Template(e.to_string()))
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

    #[test]
    fn template_raise_exception_is_an_error_not_a_panic() {
        let mut env = Environment::new();
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(
            "chat",
            "{{ raise_exception('no system role') }}".to_string(),
        )
        .unwrap();
        let r = render(&env, &[], None, "", "");
        assert!(matches!(r, Err(PrepareError::Template(m)) if m.contains("no system role")));
    }

    #[test]
    fn fallback_chatml_renders() {
        let mut env = Environment::new();
        env.add_template_owned("chat", FALLBACK_TEMPLATE.to_string())
            .unwrap();
        let out = render(
            &env,
            &[TemplateMessage {
                role: "user".into(),
                content: "hi".into(),
                ..Default::default()
            }],
            None,
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
