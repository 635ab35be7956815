//! Constrained decoding: a grammar (JSON schema, `json_object`, or a Lark
//! grammar) compiled by llguidance into a per-request matcher that masks the
//! logits before every sample and advances on every accepted token.
//!
//! Owns: the `ParserFactory` (built once per model from its vocabulary; the
//! token trie inside is immutable and shared by `Arc`). Each request gets its
//! own `Constraint`: compiled on the prepare pool (so a bad schema is a 400
//! before admission), then moved into its sequence, advanced only by the
//! execution owner, never shared, dropped with the sequence.
//!
//! Cost: `mask` runs on the owner thread once per generated token of a
//! constrained request; its time is counted (`Constraint::host_ns`) and
//! exported as `steward_constraint_seconds_total`.

use std::sync::Arc;
use std::time::Instant;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

use crate::runtime::{TokenId, Vocab};

/// What the output must match.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (`response_format: {"type":"json_object"}`).
    JsonObject,
    /// A JSON schema (`response_format: {"type":"json_schema", ...}`).
    JsonSchema(Value),
    /// A grammar in llguidance's Lark dialect (which also embeds JSON
    /// schemas with `%json { ... }`).
    Lark(String),
}

/// JSON layout unless the schema's own `x-guidance` says otherwise: one
/// space after `:` and `,`, no other whitespace. A small model given free
/// whitespace can spend its whole budget on newlines.
fn with_layout(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            })
        });
    }
    schema
}

/// Builds per-request constraints for one model.
pub struct ConstraintCompiler {
    factory: Arc<ParserFactory>,
}

impl ConstraintCompiler {
    /// Build the token trie from the model's vocabulary: output bytes per
    /// token; control tokens as their text behind llguidance's 0xFF marker;
    /// every end-of-generation token registered as EOS.
    pub fn new(vocab: &Vocab) -> Result<Self, String> {
        let n = vocab.token_bytes.len() as u32;
        let eos = vocab.eog_ids.first().copied().unwrap_or(0) as u32;
        let words: Vec<Vec<u8>> = (0..vocab.token_bytes.len())
            .map(|i| {
                let b = &vocab.token_bytes[i];
                if !b.is_empty() {
                    return b.to_vec();
                }
                let s = &vocab.token_text_special[i];
                if s.is_empty() {
                    Vec::new()
                } else {
                    let mut m = Vec::with_capacity(s.len() + 1);
                    m.push(0xFF);
                    m.extend_from_slice(s);
                    m
                }
            })
            .collect();
        let eog: Vec<u32> = vocab.eog_ids.iter().map(|&t| t as u32).collect();
        let trie = TokTrie::from(&TokRxInfo::new(n, eos), &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| e.to_string())?;
        factory.quiet();
        Ok(ConstraintCompiler {
            factory: Arc::new(factory),
        })
    }

    /// Compile a grammar. The error says what is wrong with it.
    pub fn compile(&self, g: &Grammar) -> Result<Constraint, String> {
        let top = match g {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(with_layout(
                serde_json::json!({"type": "object"}),
            )),
            Grammar::JsonSchema(s) => {
                if !s.is_object() {
                    return Err("the JSON schema must be an object".into());
                }
                TopLevelGrammar::from_json_schema(with_layout(s.clone()))
            }
            Grammar::Lark(src) => {
                if src.trim().is_empty() {
                    return Err("the grammar is empty".into());
                }
                TopLevelGrammar::from_lark(src.clone())
            }
        };
        // llguidance reports unsupported or unsatisfiable schemas as errors;
        // a panic inside it must not take the pool thread down either.
        let factory = self.factory.clone();
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            factory.create_parser(top)
        }))
        .map_err(|_| "the grammar compiler failed on this input".to_string())?
        .map_err(|e| e.to_string())?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        // The first mask here, on the compile pool: a grammar too costly to
        // mask (llguidance's per-step fuel) is refused before admission
        // instead of failing on the owner thread.
        if let Err(e) = matcher.compute_mask() {
            return Err(e.to_string());
        }
        Ok(Constraint {
            matcher,
            host_ns: 0,
            steps: 0,
        })
    }
}

/// One request's grammar state.
pub struct Constraint {
    matcher: Matcher,
    /// Owner-thread time spent masking and advancing, nanoseconds.
    pub host_ns: u64,
    /// Tokens masked.
    pub steps: u64,
}

/// An independent copy (the parser state is deep-cloned: `n` > 1 choices
/// each advance their own).
impl Clone for Constraint {
    fn clone(&self) -> Self {
        Constraint {
            matcher: self.matcher.deep_clone(),
            host_ns: self.host_ns,
            steps: self.steps,
        }
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("steps", &self.steps)
            .finish()
    }
}

impl Constraint {
    /// Copy `logits` into `out` with every token the grammar forbids at
    /// -inf. Once the grammar is complete only end-of-generation is allowed.
    pub fn mask(&mut self, logits: &[f32], out: &mut Vec<f32>) -> Result<(), String> {
        let t0 = Instant::now();
        let r = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| e.to_string());
        let r = r.and_then(|m| {
            out.clear();
            out.extend_from_slice(logits);
            let mut any = false;
            for (i, l) in out.iter_mut().enumerate() {
                if m.is_allowed(i as u32) {
                    any |= l.is_finite() || *l == f32::INFINITY;
                } else {
                    *l = f32::NEG_INFINITY;
                }
            }
            if any {
                Ok(())
            } else {
                Err("the grammar allows no token here".to_string())
            }
        });
        self.host_ns += t0.elapsed().as_nanos() as u64;
        self.steps += 1;
        r
    }

    /// Advance past a sampled token.
    pub fn accept(&mut self, t: TokenId) -> Result<(), String> {
        let t0 = Instant::now();
        let r = if self.matcher.is_stopped() {
            Ok(())
        } else {
            self.matcher
                .consume_token(t as u32)
                .map_err(|e| e.to_string())
        };
        self.host_ns += t0.elapsed().as_nanos() as u64;
        r
    }

    /// The grammar is complete: nothing more may be generated.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped() && self.matcher.get_error().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level toy vocabulary: one token per printable ASCII byte plus
    /// an end token.
    fn vocab() -> Vocab {
        let mut token_bytes: Vec<Box<[u8]>> =
            (0u8..128).map(|b| vec![b].into_boxed_slice()).collect();
        token_bytes[0] = Box::new([]);
        let mut token_text_special = token_bytes.clone();
        token_text_special[0] = b"</s>".to_vec().into_boxed_slice();
        let mut eog = vec![false; 128];
        eog[0] = true;
        Vocab {
            token_bytes,
            token_text_special,
            eog,
            eog_ids: vec![0],
        }
    }

    fn drive(c: &mut Constraint, text: &str) -> Result<(), String> {
        let logits = vec![0.0f32; 128];
        let mut out = Vec::new();
        for b in text.bytes() {
            c.mask(&logits, &mut out)?;
            if !out[b as usize].is_finite() {
                return Err(format!("byte {:?} forbidden", b as char));
            }
            c.accept(b as TokenId)?;
        }
        Ok(())
    }

    #[test]
    fn schema_allows_matching_text_and_forbids_the_rest() {
        let cc = ConstraintCompiler::new(&vocab()).unwrap();
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}},
            "required": ["a", "b"],
            "additionalProperties": false
        });
        let g = Grammar::JsonSchema(schema);
        let mut c = cc.compile(&g).unwrap();
        drive(&mut c, r#"{"a": 12, "b": "y"}"#).unwrap();
        // Complete: only the end token remains.
        let mut out = Vec::new();
        c.mask(&[0.0; 128], &mut out).unwrap();
        assert!(out[0].is_finite());
        assert!(out[1..].iter().all(|l| !l.is_finite()));

        let mut c = cc.compile(&g).unwrap();
        assert!(drive(&mut c, r#"{"a": "#).is_ok());
        assert!(
            drive(&mut c, r#"""#).is_err(),
            "a string where an integer must be"
        );
        let mut c = cc.compile(&g).unwrap();
        assert!(drive(&mut c, r#"{"b": "z""#).is_err(), "key order and enum");
    }

    #[test]
    fn bad_grammars_are_errors_not_panics() {
        let cc = ConstraintCompiler::new(&vocab()).unwrap();
        for g in [
            Grammar::JsonSchema(serde_json::json!({"type": "frobnicate"})),
            Grammar::JsonSchema(serde_json::json!(5)),
            Grammar::Lark("start: (".into()),
            Grammar::Lark("   ".into()),
        ] {
            assert!(cc.compile(&g).is_err(), "{g:?}");
        }
    }

    #[test]
    fn lark_grammar_and_json_object() {
        let cc = ConstraintCompiler::new(&vocab()).unwrap();
        let mut c = cc
            .compile(&Grammar::Lark(r#"start: "yes" | "no""#.into()))
            .unwrap();
        drive(&mut c, "no").unwrap();
        assert!(c.is_complete());
        let mut c = cc.compile(&Grammar::JsonObject).unwrap();
        assert!(drive(&mut c, "[").is_err());
        let mut c = cc.compile(&Grammar::JsonObject).unwrap();
        drive(&mut c, r#"{"k": [1, {"z": null}]}"#).unwrap();
    }
}
