//! OpenAI wire types, serde only. Shared by the server (which parses and
//! answers them) and the bench tool (which sends and reads them). Each
//! also derives utoipa's `ToSchema`: the server's `/openapi.json` takes
//! their schemas from these definitions (doc comments are the fields'
//! descriptions; `#[schema(...)]` adds the value ranges the server checks).
//!
//! Invariants: request types keep every field optional that OpenAI keeps
//! optional, and accept (and ignore) unknown fields, as OpenAI's clients send
//! fields a server may not know. Validation of values lives in the server,
//! not here: these types only say what is on the wire.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `stop`: a string or a list of strings.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

impl StopSpec {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSpec::One(s) => vec![s],
            StopSpec::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and limit fields shared by both generation endpoints.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
pub struct SamplingFields {
    /// At least 1 (0 is accepted by `/v1/completions`: score the prompt
    /// only), at most the server's `--max-tokens-limit` and what the
    /// context leaves after the prompt.
    #[schema(minimum = 0)]
    pub max_tokens: Option<i64>,
    /// As `max_tokens`, which it overrides.
    #[schema(minimum = 0)]
    pub max_completion_tokens: Option<i64>,
    #[schema(minimum = 0.0, maximum = 2.0)]
    pub temperature: Option<f64>,
    #[schema(exclusive_minimum = 0.0, maximum = 1.0)]
    pub top_p: Option<f64>,
    /// Extension (llama-server, vLLM): 0 disables.
    #[schema(minimum = -1, maximum = 100000)]
    pub top_k: Option<i64>,
    /// Extension (llama-server, vLLM): 0 disables.
    #[schema(minimum = 0.0, maximum = 1.0)]
    pub min_p: Option<f64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub frequency_penalty: Option<f64>,
    #[schema(minimum = -2.0, maximum = 2.0)]
    pub presence_penalty: Option<f64>,
    /// Extension (llama-server, vLLM): 1 disables.
    #[schema(minimum = 0.01, maximum = 10.0)]
    pub repetition_penalty: Option<f64>,
    pub seed: Option<i64>,
    /// At most `--max-stop` sequences (default 4), each non-empty and at
    /// most `--max-stop-bytes` long.
    pub stop: Option<StopSpec>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    /// Choices, at most the server's `--max-n` (default 16).
    #[schema(minimum = 1)]
    pub n: Option<i64>,
    pub user: Option<String>,
    /// Chat: a boolean. Legacy completions: the number of alternatives per
    /// token, 0 to 20.
    pub logprobs: Option<Value>,
    /// Chat, with `logprobs: true`: alternatives per token.
    #[schema(value_type = Option<u32>, maximum = 20)]
    pub top_logprobs: Option<Value>,
    /// Token ID (as a string) to a bias from -100 to 100; at most 300.
    #[schema(value_type = Option<std::collections::BTreeMap<String, f64>>)]
    pub logit_bias: Option<Value>,
    /// Extension (llama-server, vLLM): do not stop at end-of-generation.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Extension: end the request after this many seconds (capped by the
    /// server's `--request-timeout-s`).
    #[schema(exclusive_minimum = 0.0)]
    pub timeout: Option<f64>,
    /// Extension: return a `timings` object with the response.
    #[serde(default)]
    pub timings: bool,
    /// Extension: a grammar in llguidance's Lark dialect the output must
    /// match (`%json { schema }` embeds a JSON schema).
    #[schema(value_type = Option<String>)]
    pub grammar: Option<Value>,
    /// Extension: speculative decoding for this request (default: the
    /// server's `--speculative`). Output is the same as without it: greedy
    /// gives the same tokens, sampling the same distribution.
    pub speculative: Option<SpeculativeOptions>,
    /// Extension (vLLM's): the request's priority, an integer; lower runs
    /// first under `--scheduling-policy priority` (default 0). An API key's
    /// `priority=` is a floor: the request runs at the larger of the two.
    #[schema(value_type = Option<i32>)]
    pub priority: Option<Value>,
}

/// Speculative decoding options of one request.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpeculativeOptions {
    /// `off`, `ngram` (drafts looked up in the prompt and the output so
    /// far) or `draft` (the server's `--draft-model`).
    #[schema(pattern = "^(off|ngram|draft)$")]
    pub mode: Option<String>,
    /// Most tokens drafted per step, 0 to 32 (default: the server's
    /// `--draft-max`); fewer are drafted while acceptance is low or the
    /// batch is busy.
    #[schema(minimum = 0, maximum = 32)]
    pub max_draft: Option<i64>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatMessage {
    #[schema(pattern = "^(system|developer|user|assistant|tool)$")]
    pub role: String,
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Assistant turns that called tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    /// Tool turns: the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Assistant turns: the reasoning before the answer (given back to
    /// templates that print it; `thinking` and `reasoning` are read too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// Message content: a string, or a list of typed parts (`text`; `image_url`
/// and `input_audio` for a model served with a projector).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// `image_url` parts: `{"url": ...}` (a `data:` URI, or an `http(s)`
    /// URL where the server allows them), or the URL as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_url: Option<ImageUrl>,
    /// `input_audio` parts: base64 `data` and its `format`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio: Option<InputAudio>,
}

/// An `image_url` part's image: `{"url", "detail"}` or the URL alone.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ImageUrl {
    Url(String),
    Object {
        url: String,
        /// Accepted and ignored (the projector decides the resolution).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

impl ImageUrl {
    pub fn into_url(self) -> String {
        match self {
            ImageUrl::Url(u) | ImageUrl::Object { url: u, .. } => u,
        }
    }
}

/// An `input_audio` part's clip.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct InputAudio {
    /// The encoded file, base64.
    pub data: String,
    /// `wav`, `mp3` or `flac`.
    pub format: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatCompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// At least one, at most the server's `--max-messages` (default 1024).
    #[schema(min_items = 1)]
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    pub response_format: Option<Value>,
    /// Keyword arguments for the chat template (vLLM, llama-server).
    #[serde(default)]
    pub chat_template_kwargs: Option<Value>,
    /// Shortcut for `chat_template_kwargs.enable_thinking` (and `thinking`).
    #[serde(default)]
    pub enable_thinking: Option<Value>,
    /// `low`, `medium` or `high`: `chat_template_kwargs.reasoning_effort`.
    #[serde(default)]
    pub reasoning_effort: Option<Value>,
    /// Open a new assistant turn after the messages (default: yes, unless
    /// the last message is the assistant's, which is then continued).
    #[serde(default)]
    pub add_generation_prompt: Option<Value>,
    /// Continue the final (assistant) message instead of starting a turn.
    #[serde(default)]
    pub continue_final_message: Option<Value>,
    /// `none`: leave reasoning in `content`; otherwise (default) it is
    /// returned as `reasoning_content`.
    #[serde(default)]
    pub reasoning_format: Option<Value>,
    /// A named template variant of the model (`tool_use`, `rag`, …).
    #[serde(default)]
    pub chat_template_name: Option<Value>,
}

/// Legacy completions prompt: a string, a list with one string, or token IDs.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum PromptSpec {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CompletionRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub prompt: PromptSpec,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    pub echo: Option<bool>,
    /// Not supported: absent or empty.
    pub suffix: Option<String>,
    /// Only 1 is supported.
    #[schema(minimum = 1, maximum = 1)]
    pub best_of: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    /// OpenAI's `prompt_tokens_details.cached_tokens`: prompt tokens whose
    /// state came from the prefix cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct PromptTokensDetails {
    pub cached_tokens: u32,
    /// Prompt positions that are images (embedding rows, not text tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_tokens: Option<u32>,
    /// Prompt positions that are audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_tokens: Option<u32>,
}

/// Steward's per-request lifecycle, in milliseconds since arrival
/// (returned when the request sets `"timings": true`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct Timings {
    pub tokenized_ms: f64,
    pub admitted_ms: f64,
    pub prefill_done_ms: f64,
    pub first_token_ms: f64,
    /// When the first text left for the client (streaming: the first text
    /// chunk handed to the transport; otherwise the whole body, after
    /// `retired_ms`).
    pub first_text_sent_ms: f64,
    pub retired_ms: f64,
    pub queue_ms: f64,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub decode_tokens_per_s: f64,
    /// Owner-thread time spent in the grammar constraint (0 without one).
    #[serde(default)]
    pub constraint_ms: f64,
    /// Where tokens were sampled: `host` (the logits copied to the CPU and
    /// sampled by Steward's per-request sampler) or `device`.
    #[serde(default)]
    pub sampling_path: String,
    /// Speculative decoding: tokens drafted and accepted (0 without it).
    #[serde(default)]
    pub draft_tokens: u64,
    #[serde(default)]
    pub draft_accepted: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ResponseMessage {
    pub role: String,
    /// `null` when the turn is only tool calls.
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One function call the model made (`arguments` is a JSON text).
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A streamed piece of a tool call: the first carries `id`, `type` and
/// `function.name`; later ones append to `function.arguments`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ToolCallDelta {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub function: FunctionCallDelta,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ResponseMessage,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// Present (and `null` except on the final usage chunk) when the client
    /// asked for `stream_options.include_usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Value>,
}

/// Both the final response and the streamed chunk of `/v1/completions`.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct CompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// Steward extension: the immutable model identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<Value>,
    /// Steward extension: where the chat template came from (`gguf`,
    /// `--chat-template …`, `fallback …`), its variants, family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<Value>,
    /// How the model's memory holds a sequence (Steward extension):
    /// `kind` (`attention`, `sliding_window`, `recurrent`, `hybrid`), the
    /// window, bytes per kind of state, whether checkpoints are taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Value>,
    /// Steward extension (llama-server router's shape): `{"value":
    /// "loaded" | "loading" | "unloaded" | "failed", "error", "pinned",
    /// "footprint_bytes", "load_ms", "loads", "unloads"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// For a LoRA adapter served as `base:adapter`: the base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// For a LoRA adapter: its id (the `lora` field's `id`), name, file
    /// and default scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<Value>,
    /// What the model takes in (while loaded): `text`, and `image` or
    /// `audio` when it was served with a projector that reads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// `{"error": {"message", "type", "param", "code"}}`
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema, PartialEq)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_request_accepts_unknown_fields_and_both_content_shapes() {
        let r: ChatCompletionRequest = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"hi"},
                {"role":"user","content":[{"type":"text","text":"yo"}]}],
                "stop":"x","stream":true,"frobnicate":1}"#,
        )
        .unwrap();
        assert_eq!(r.messages.len(), 2);
        assert!(r.sampling.stream);
        assert_eq!(r.sampling.stop, Some(StopSpec::One("x".into())));
    }

    #[test]
    fn chunk_usage_serializes_null_when_requested() {
        let c = ChatCompletionChunk {
            id: "a".into(),
            object: "chat.completion.chunk".into(),
            created: 0,
            model: "m".into(),
            choices: vec![],
            system_fingerprint: None,
            usage: Some(None),
            timings: None,
        };
        let v = serde_json::to_value(&c).unwrap();
        assert!(v.get("usage").unwrap().is_null());
    }
}
