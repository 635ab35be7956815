//! Model families: which tool-call syntax and reasoning markers a
//! template's model writes, told from the template's own text (the markers
//! it prints for assistant calls), as llama.cpp's `common/chat.cpp` tells
//! them. A template with no known call syntax is `Generic`: Steward writes
//! Hermes tool instructions for it and reads Hermes calls back.

use crate::template::ChatTemplates;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`: Qwen2.5,
    /// Qwen3, QwQ, Hermes 2 Pro / 3, SmolLM3, Granite 4.0.
    Hermes,
    /// `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>`:
    /// Qwen3-Coder, Qwen3.5.
    QwenXml,
    /// A bare `{"name": …, "parameters": {…}}` (or after `<|python_tag|>`):
    /// Llama 3.1 / 3.2 / 3.3.
    Llama3,
    /// `[TOOL_CALLS][{"name": …, "arguments": {…}}]` (v3, Nemo, Small 3.1)
    /// or `[TOOL_CALLS]NAME[ARGS]{…}` (Small 3.2, Devstral, Ministral 3,
    /// Magistral); reasoning `[THINK]…[/THINK]`.
    Mistral,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>…`
    /// (R1 and its distills) or `…<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…` (V3.1).
    DeepSeek,
    /// Harmony channels: `<|channel|>analysis<|message|>…<|end|>`,
    /// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>`,
    /// `<|channel|>final<|message|>…`: gpt-oss.
    Harmony,
    /// `<function=NAME>{…}</function>`: Functionary v3.1.
    FunctionaryV31,
    /// `>>>NAME\n{…}` segments, `>>>all\n` for text: Functionary v3.2.
    FunctionaryV32,
    /// `<|START_ACTION|>[{"tool_call_id": …, "tool_name": …, "parameters": {…}}]<|END_ACTION|>`,
    /// reasoning `<|START_THINKING|>…<|END_THINKING|>`: Command R7B.
    CommandR,
    /// `<|tool_call|>[{"name": …, "arguments": {…}}]`: Granite 3.3, Phi-4-mini.
    ToolCallToken,
    /// `functools[{"name": …, "arguments": {…}}]`: Firefunction v2, Phi-4-mini's text form.
    Functools,
    /// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}<|tool_call_end|>…`: Kimi K2.
    Kimi,
    /// `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>`: GLM-4.5/4.6/4.7.
    Glm,
    /// `<|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>`, reasoning
    /// `<|channel>thought\n…<channel|>`: Gemma 4.
    Gemma4,
    /// No call syntax of its own (SmolLM2, Gemma 2/3, Phi-3.5): Hermes.
    Generic,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Hermes => "hermes",
            Family::QwenXml => "qwen3-coder",
            Family::Llama3 => "llama3",
            Family::Mistral => "mistral",
            Family::DeepSeek => "deepseek",
            Family::Harmony => "harmony",
            Family::FunctionaryV31 => "functionary-v3.1",
            Family::FunctionaryV32 => "functionary-v3.2",
            Family::CommandR => "command-r",
            Family::ToolCallToken => "tool-call-token",
            Family::Functools => "functools",
            Family::Kimi => "kimi-k2",
            Family::Glm => "glm",
            Family::Gemma4 => "gemma4",
            Family::Generic => "generic",
        }
    }

    /// The reasoning block's markers (open, close).
    pub fn reasoning(self) -> Option<(&'static str, &'static str)> {
        match self {
            Family::Mistral => Some(("[THINK]", "[/THINK]")),
            Family::CommandR => Some(("<|START_THINKING|>", "<|END_THINKING|>")),
            Family::Gemma4 => Some(("<|channel>thought", "<channel|>")),
            Family::Harmony => None,
            _ => Some(("<think>", "</think>")),
        }
    }

    /// Every marker text the parsers read: the detokenizer lets a control
    /// token with one of these texts through (to the parser, never to the
    /// client's text).
    pub fn markers(self) -> &'static [&'static str] {
        match self {
            Family::Hermes | Family::Generic => {
                &["<tool_call>", "</tool_call>", "<think>", "</think>"]
            }
            Family::QwenXml => &["<tool_call>", "</tool_call>", "<think>", "</think>"],
            Family::Llama3 => &["<|python_tag|>", "<think>", "</think>"],
            Family::Mistral => &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"],
            Family::DeepSeek => &[
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜>",
                "<｜tool▁sep｜>",
                "<think>",
                "</think>",
            ],
            Family::Harmony => &[
                "<|channel|>",
                "<|message|>",
                "<|start|>",
                "<|end|>",
                "<|constrain|>",
                "<|call|>",
                "<|return|>",
            ],
            Family::FunctionaryV31 => &["<|python_tag|>", "<think>", "</think>"],
            Family::FunctionaryV32 => &["<think>", "</think>"],
            Family::CommandR => &[
                "<|START_ACTION|>",
                "<|END_ACTION|>",
                "<|START_THINKING|>",
                "<|END_THINKING|>",
                "<|START_RESPONSE|>",
                "<|END_RESPONSE|>",
            ],
            Family::ToolCallToken => &["<|tool_call|>", "<|/tool_call|>", "<think>", "</think>"],
            Family::Functools => &["<think>", "</think>"],
            Family::Kimi => &[
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
                "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
                "<think>",
                "</think>",
            ],
            Family::Glm => &[
                "<tool_call>",
                "</tool_call>",
                "<arg_key>",
                "</arg_key>",
                "<arg_value>",
                "</arg_value>",
                "<think>",
                "</think>",
            ],
            Family::Gemma4 => &[
                "<|tool_call>",
                "<tool_call|>",
                "<|\"|>",
                "<|channel>",
                "<channel|>",
            ],
        }
    }

    /// One call as this family writes it (`args`: JSON text), for the
    /// instructions Steward writes to a model whose template does not
    /// print `tools`. `None` for a family without a call syntax.
    pub fn call_text(self, newer: bool, name: &str, args: &str) -> Option<String> {
        Some(match self {
            Family::Hermes => format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>"),
            Family::QwenXml => format!("<tool_call>\n<function={name}>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>"),
            Family::Llama3 => format!("{{\"name\": \"{name}\", \"parameters\": {args}}}"),
            Family::Mistral if newer => format!("[TOOL_CALLS]{name}[ARGS]{args}"),
            Family::Mistral => format!("[TOOL_CALLS][{{\"name\": \"{name}\", \"arguments\": {args}}}]"),
            Family::DeepSeek if newer => format!("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            Family::DeepSeek => format!("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            Family::Harmony => format!("<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>"),
            Family::FunctionaryV31 => format!("<function={name}>{args}</function>"),
            Family::FunctionaryV32 => format!(">>>{name}\n{args}"),
            Family::CommandR => format!("<|START_ACTION|>[{{\"tool_call_id\": \"0\", \"tool_name\": \"{name}\", \"parameters\": {args}}}]<|END_ACTION|>"),
            Family::ToolCallToken => format!("<|tool_call|>[{{\"name\": \"{name}\", \"arguments\": {args}}}]"),
            Family::Functools => format!("functools[{{\"name\": \"{name}\", \"arguments\": {args}}}]"),
            Family::Kimi => format!("<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"),
            Family::Glm => format!("<tool_call>{name}\n<arg_key>ARG</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>"),
            Family::Gemma4 => format!("<|tool_call>call:{name}{{ARG:VALUE}}<tool_call|>"),
            Family::Generic => return None,
        })
    }

    /// The markers reasoning needs (all of harmony's: its channels carry it).
    pub fn reasoning_markers(self) -> Vec<&'static str> {
        match self {
            Family::Harmony => self.markers().to_vec(),
            Family::CommandR => vec![
                "<|START_THINKING|>",
                "<|END_THINKING|>",
                "<|START_RESPONSE|>",
                "<|END_RESPONSE|>",
            ],
            Family::Gemma4 => vec!["<|channel>", "<channel|>"],
            f => f.reasoning().map(|(o, c)| vec![o, c]).unwrap_or_default(),
        }
    }

    /// Tool call ids as this family's templates accept them: Mistral's
    /// require 9 alphanumerics; Kimi's are `functions.NAME:INDEX`;
    /// others take OpenAI's `call_…`.
    pub fn call_id(self, seed: &str, index: u32, name: &str) -> String {
        match self {
            Family::Mistral => alnum9(seed, index),
            Family::Kimi => format!("functions.{name}:{index}"),
            _ => format!("call_{}", alnum(seed, index, 24)),
        }
    }
}

fn alnum(seed: &str, index: u32, n: usize) -> String {
    const A: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    // FNV-1a over the seed and index, stretched by a xorshift.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in seed.bytes().chain(index.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (0..n)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            A[(h % A.len() as u64) as usize] as char
        })
        .collect()
}

fn alnum9(seed: &str, index: u32) -> String {
    alnum(seed, index, 9)
}

/// The family of a model's templates (its `tool_use` variant first: that
/// is where the call syntax is printed).
pub fn detect(t: &ChatTemplates) -> Family {
    let tool = t.source_for(None, true).unwrap_or_default();
    let dflt = t.default_source();
    let f = detect_source(&tool);
    if f != Family::Generic {
        return f;
    }
    detect_source(dflt)
}

pub fn detect_source(s: &str) -> Family {
    let has = |m: &str| s.contains(m);
    if has("<|channel|>") && has("<|message|>") {
        Family::Harmony
    } else if has("[TOOL_CALLS]") {
        Family::Mistral
    } else if has("tool▁calls▁begin") || has("tool▁call▁begin") {
        Family::DeepSeek
    } else if has("<|tool_calls_section_begin|>") {
        Family::Kimi
    } else if has("<|START_ACTION|>") {
        Family::CommandR
    } else if has("<arg_key>") {
        Family::Glm
    } else if has("<|tool_call>") {
        Family::Gemma4
    } else if has("<function=") && has("<parameter=") {
        Family::QwenXml
    } else if has(">>>") && has("<|start_header_id|>") {
        Family::FunctionaryV32
    } else if has("<function=") {
        Family::FunctionaryV31
    } else if has("<|tool_call|>") {
        Family::ToolCallToken
    } else if has("functools") {
        Family::Functools
    } else if has("<tool_call>") {
        Family::Hermes
    } else if has("<|start_header_id|>") && (has("<|python_tag|>") || has("\"parameters\"")) {
        Family::Llama3
    } else {
        Family::Generic
    }
}
