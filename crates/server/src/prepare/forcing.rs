//! The grammar a chat request's output is held to, in the model family's
//! own syntax (`steward_formats::grammar`): a forced tool call
//! (`tool_choice` required or named), or `response_format` for a model
//! trained to reason (its reasoning block first, then the JSON). Written
//! after the template ran: it depends on whether the prompt opened the
//! reasoning block, and the block's budget on `max_tokens`.

use serde_json::json;
use steward_engine::EngineHandle;

use super::spec::{Api, GenSpec};
use crate::http::error::ApiError;

pub(crate) fn chat_grammar(
    spec: &mut GenSpec,
    api: Api,
    engine: &EngineHandle,
    in_reasoning: bool,
    max_tokens: u32,
) -> Result<(), ApiError> {
    // A forced call's grammar: the family's syntax, its reasoning block
    // allowed first (at most half of max_tokens).
    if let Some(plan) = spec.tools.as_ref().filter(|_| api == Api::Chat) {
        let pr = engine.preparer();
        let special = |text: &str| pr.special_id(text).map(|t| t as u32);
        let reasoning = steward_formats::grammar::Reasoning {
            trained: pr.template_info().reasons,
            open: in_reasoning,
            budget: (max_tokens as usize / 2).max(1),
        };
        if let Some(g) = plan
            .forced_grammar(pr.family(), pr.variant(), reasoning, &special)
            .transpose()
            .map_err(|m| ApiError::unsupported(m, "tool_choice"))?
        {
            tracing::debug!(grammar = %g, "forced call grammar");
            spec.grammar = Some((steward_engine::constraint::Grammar::Lark(g), "tools"));
        }
    }
    // `response_format` for a model trained to reason: its reasoning block
    // first, then the JSON.
    if let (Api::Chat, Some((g, "response_format"))) = (api, &spec.grammar) {
        let pr = engine.preparer();
        let schema = match g {
            steward_engine::constraint::Grammar::JsonObject => Some(json!({"type": "object"})),
            steward_engine::constraint::Grammar::JsonSchema(s) => Some(s.clone()),
            _ => None,
        };
        if let Some(schema) = schema.filter(|_| pr.template_info().reasons || in_reasoning) {
            let special = |text: &str| pr.special_id(text).map(|t| t as u32);
            let reasoning = steward_formats::grammar::Reasoning {
                trained: pr.template_info().reasons,
                open: in_reasoning,
                budget: (max_tokens as usize / 2).max(1),
            };
            let force = steward_formats::grammar::Force::Json(schema);
            if let Ok(l) = steward_formats::grammar::grammar(
                pr.family(),
                pr.variant(),
                &force,
                reasoning,
                &special,
            ) {
                spec.grammar = Some((
                    steward_engine::constraint::Grammar::Lark(l),
                    "response_format",
                ));
            }
        }
    }
    Ok(())
}
