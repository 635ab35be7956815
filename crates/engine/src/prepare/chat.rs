//! The chat prompt: a request's messages through the model's template
//! (`steward_formats`), client strings protected (`literal`), tokenized in
//! pieces. The template set is loaded and checked at startup: one that does
//! not compile stops the server with one line naming it, unless
//! `--chat-template` replaces it; a GGUF without one gets the fallback its
//! vocabulary fits (`steward_formats::fallback`), logged once.

use serde_json::{Map, Value};
use steward_formats::adapt::{fit, Profile};
use steward_formats::{ChatTemplates, RenderArgs, TemplateError};

use crate::prepare::error::PrepareError;
use crate::prepare::literal::{Literals, Specials};
use crate::runtime::LoadedModel;

/// One chat request as the template gets it.
#[derive(Debug, Clone, Default)]
pub struct ChatPrompt {
    /// Hugging Face message dicts (OpenAI's shape; `arguments` as objects).
    pub messages: Vec<Value>,
    pub tools: Option<Value>,
    /// `chat_template_kwargs` (over the special tokens' texts).
    pub kwargs: Map<String, Value>,
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    /// A named template variant (`tool_use`, `rag`, …).
    pub variant: Option<String>,
    /// Media parts, in the order of the `media::MEDIA_MARKER`s the
    /// messages' text holds for them.
    pub media: Vec<crate::prepare::encoder::MediaInput>,
}

impl ChatPrompt {
    pub fn new(messages: Vec<Value>) -> Self {
        ChatPrompt {
            messages,
            add_generation_prompt: true,
            ..Default::default()
        }
    }
}

/// Where the model's template came from, for `/v1/models` and the log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TemplateInfo {
    /// `gguf`, `--chat-template <what>`, or `fallback <name>`.
    pub source: String,
    pub variants: Vec<String>,
    pub native_tools: bool,
    /// Call arguments go to the template as JSON text (not objects).
    pub args_as_text: bool,
    pub family: String,
    pub sha256: String,
    /// The special tokens' texts templates get as `bos_token`/`eos_token`.
    pub bos_token: String,
    pub eos_token: String,
    /// The template prints the family's reasoning block (the model was
    /// trained to reason first).
    pub reasons: bool,
}

pub(crate) struct ChatSetup {
    pub templates: ChatTemplates,
    pub profile: Profile,
    pub family: steward_formats::family::Family,
    pub variant: steward_formats::grammar::Variant,
    pub info: TemplateInfo,
    /// Special tokens' texts every render gets (`bos_token`, `eos_token`).
    pub base_kwargs: Map<String, Value>,
}

/// Load the template set: an override (`--chat-template`: a label and its
/// source), else the GGUF's, else the vocabulary's fallback.
pub(crate) fn setup(
    model: &LoadedModel,
    special_texts: &[String],
    over: Option<&(String, String)>,
) -> Result<ChatSetup, String> {
    let text_of = |t: Option<crate::runtime::TokenId>| {
        t.and_then(|t| model.vocab.token_text_special.get(t as usize))
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let mut base_kwargs = Map::new();
    base_kwargs.insert("bos_token".into(), text_of(model.facts.bos).into());
    base_kwargs.insert("eos_token".into(), text_of(model.facts.eos).into());
    let facts = &model.facts;
    let (source, templates) = if let Some((label, src)) = over {
        let t = ChatTemplates::new(Some(src), &[])
            .map_err(|e| format!("--chat-template {label}: {e}"))?;
        (format!("--chat-template {label}"), t)
    } else if facts.chat_template.is_some() || !facts.chat_template_variants.is_empty() {
        let t = ChatTemplates::new(facts.chat_template.as_deref(), &facts.chat_template_variants)
            .map_err(|e| match e {
                TemplateError::Compile { name, msg } => format!(
                    "the GGUF's chat template {:?} does not compile ({msg}); pass --chat-template FILE|chatml|gemma|plain to replace it",
                    if name == "default" { "tokenizer.chat_template".to_string() } else { format!("tokenizer.chat_template.{name}") }
                ),
                e => e.to_string(),
            })?;
        ("gguf".to_string(), t)
    } else {
        let name =
            steward_formats::fallback::for_vocabulary(special_texts.iter().map(String::as_str));
        let src =
            steward_formats::fallback::builtin(name).unwrap_or(steward_formats::fallback::CHATML);
        tracing::warn!(
            fallback = name,
            "the GGUF has no chat template: using Steward's {name} template (pass --chat-template FILE to use another)"
        );
        (
            format!("fallback {name}"),
            ChatTemplates::new(Some(src), &[]).map_err(|e| e.to_string())?,
        )
    };
    let profile = Profile::probe(&templates, &base_kwargs);
    // The family the model is told to call in and is read back in.
    let family = profile.family;
    let variant = steward_formats::grammar::Variant::detect(
        family,
        &templates.source_for(None, true).unwrap_or_default(),
    );
    use sha2::Digest;
    let sha256 = hex(&sha2::Sha256::digest(templates.default_source().as_bytes()));
    let info = TemplateInfo {
        source,
        variants: templates.variants().to_vec(),
        native_tools: profile.native_tools,
        args_as_text: profile.args_as_text,
        family: family.name().to_string(),
        sha256,
        reasons: family.reasoning().is_some_and(|(open, _)| {
            templates.default_source().contains(open)
                || templates
                    .source_for(None, true)
                    .is_some_and(|s| s.contains(open))
        }) || family == steward_formats::family::Family::Harmony,
        bos_token: base_kwargs["bos_token"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        eos_token: base_kwargs["eos_token"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    tracing::info!(source = %info.source, family = %info.family, native_tools = info.native_tools, variants = ?info.variants, "chat template");
    Ok(ChatSetup {
        templates,
        profile,
        family,
        variant,
        info,
        base_kwargs,
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn template_err(e: TemplateError) -> PrepareError {
    PrepareError::Template(e.to_string())
}

/// Render a chat: client strings protected, messages fitted to the
/// template, rendered. Returns the text and the table to split it by.
pub(crate) fn render(
    setup: &ChatSetup,
    specials: &Specials,
    p: &ChatPrompt,
) -> Result<(String, Literals), PrepareError> {
    let mut lits = Literals::default();
    let too_many = |e: crate::prepare::literal::TooMany| PrepareError::Template(e.to_string());
    let messages: Vec<Value> = p
        .messages
        .iter()
        .map(|m| lits.protect_json(m, specials))
        .collect::<Result<_, _>>()
        .map_err(too_many)?;
    let tools = p
        .tools
        .as_ref()
        .map(|t| lits.protect_json(t, specials))
        .transpose()
        .map_err(too_many)?;
    let mut kwargs = setup.base_kwargs.clone();
    for (k, v) in &p.kwargs {
        kwargs.insert(k.clone(), lits.protect_json(v, specials).map_err(too_many)?);
    }
    let (messages, tools) = fit(&setup.profile, &messages, tools.as_ref());
    let text = setup
        .templates
        .render(&RenderArgs {
            messages: &messages,
            tools: tools.as_ref(),
            documents: None,
            add_generation_prompt: p.add_generation_prompt,
            continue_final_message: p.continue_final_message,
            kwargs: &kwargs,
            variant: p.variant.as_deref(),
        })
        .map_err(template_err)?;
    Ok((text, lits))
}

/// A chat as one template renders it, the client's strings protected and
/// the result in tokenizer pieces (text, parse special tokens): the
/// prepare path without a model, for tests and fuzzing. `specials`: the
/// control tokens' texts.
pub fn render_pieces(
    source: &str,
    specials: &[&str],
    messages: Vec<Value>,
) -> Result<Vec<(String, bool)>, PrepareError> {
    let templates = ChatTemplates::new(Some(source), &[]).map_err(template_err)?;
    let base_kwargs = Map::new();
    let setup = ChatSetup {
        profile: Profile::probe(&templates, &base_kwargs),
        family: steward_formats::family::detect(&templates),
        variant: steward_formats::grammar::Variant::Plain,
        info: TemplateInfo {
            source: "test".into(),
            variants: vec![],
            native_tools: false,
            args_as_text: false,
            family: String::new(),
            sha256: String::new(),
            bos_token: String::new(),
            eos_token: String::new(),
            reasons: false,
        },
        templates,
        base_kwargs,
    };
    let sp = Specials::new(specials.iter().map(|s| s.to_string()));
    let (text, lits) = render(&setup, &sp, &ChatPrompt::new(messages))?;
    Ok(lits
        .split(&text)
        .into_iter()
        .map(|(t, s)| (t.to_string(), s))
        .collect())
}
