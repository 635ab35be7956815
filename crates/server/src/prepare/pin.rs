//! A pin of the prompt a chat request asks for (`GenSpec::pin`): the
//! prompt's state kept in host memory for a while (the engine's
//! `Pin`, within `--pin-budget-mb`, at most `--pin-max-ttl-s`), so a later
//! prompt starting with it restores it instead of computing it.
//!
//! Asked for by `cache_pin` (Steward's extension, what Anthropic's
//! `cache_control` breakpoints become: a TTL and the messages it covers),
//! or OpenAI's `prompt_cache_key` / `prompt_cache_retention` (the whole
//! prompt, 5 minutes or 24 hours).
//!
//! How far a pin reaches in tokens when it covers the first `n` messages of
//! `m` (`n < m`): the same conversation is rendered again with message
//! `n`'s content replaced by a probe, and the pin covers the tokens both
//! renders share from the start. Everything before message `n`'s content
//! is rendered the same way in both (the template sees the same message
//! list, roles and flags), so the shared part is exactly the prompt up to
//! that content; wherever a template makes an earlier part depend on it,
//! the shared part is shorter, never wrong. A chat with media, or a probe
//! that fails, pins the whole prompt.

use std::time::Duration;

use serde_json::Value;
use steward_engine::chat::ChatPrompt;
use steward_engine::{Pin, Preparer, TokenId};

use super::spec::GenSpec;
use crate::http::error::ApiError;

/// A pin's TTL when none is named (Anthropic's default, and OpenAI's
/// in-memory retention).
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// OpenAI's `prompt_cache_retention: "24h"`, and the longest `ttl_s`
/// `cache_pin` takes.
pub const LONG_TTL: Duration = Duration::from_secs(24 * 3600);

/// What a request asks for: the pin (its tokens still unknown) and how
/// many leading messages it covers (`None`: the whole prompt).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Asked {
    pub pin: Option<Pin>,
    pub messages: Option<usize>,
}

impl Asked {
    pub fn apply(self, spec: &mut GenSpec) {
        spec.pin = self.pin;
        spec.pin_messages = self.messages;
    }
}

/// The pin a chat body asks for (`cache_pin`, `prompt_cache_key`,
/// `prompt_cache_retention`; `null` reads as absent): a 400 naming the
/// field when one is malformed.
pub fn asked(body: &Value) -> Result<Asked, ApiError> {
    let get = |k: &str| body.get(k).filter(|v| !v.is_null());
    let retention = match get("prompt_cache_retention") {
        None => None,
        Some(v) => Some(match v.as_str() {
            Some("in_memory" | "in-memory") => DEFAULT_TTL,
            Some("24h") => LONG_TTL,
            _ => {
                return Err(ApiError::invalid_value(
                    format!("`prompt_cache_retention` must be `in_memory` or `24h`; got {v}"),
                    "prompt_cache_retention",
                ))
            }
        }),
    };
    let keyed = match get("prompt_cache_key") {
        None => false,
        Some(Value::String(_)) => true,
        Some(_) => {
            return Err(ApiError::invalid_value(
                "`prompt_cache_key` must be a string",
                "prompt_cache_key",
            ))
        }
    };
    if let Some(p) = get("cache_pin") {
        return cache_pin(p);
    }
    let ttl = match (retention, keyed) {
        (Some(t), _) => t,
        (None, true) => DEFAULT_TTL,
        (None, false) => return Ok(Asked::default()),
    };
    Ok(Asked {
        pin: Some(Pin { ttl, tokens: None }),
        messages: None,
    })
}

/// `cache_pin: {"ttl_s": seconds, "messages"?: n}`.
fn cache_pin(p: &Value) -> Result<Asked, ApiError> {
    let Some(o) = p.as_object() else {
        return Err(ApiError::invalid_value(
            "`cache_pin` must be an object: {\"ttl_s\": seconds, \"messages\": n}",
            "cache_pin",
        ));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "ttl_s" | "messages"))
    {
        let shown: String = k.chars().take(64).collect();
        let param = format!("cache_pin.{shown}");
        return Err(ApiError::invalid_value(
            format!("`{param}`: unknown field (`cache_pin` takes `ttl_s` and `messages`)"),
            &param,
        ));
    }
    let max = LONG_TTL.as_secs_f64();
    let ttl = match o.get("ttl_s").and_then(Value::as_f64) {
        Some(s) if s > 0.0 && s <= max => Duration::from_secs_f64(s),
        _ => {
            return Err(ApiError::invalid_value(
                format!("`cache_pin.ttl_s` must be a number of seconds above 0 and at most {max}"),
                "cache_pin.ttl_s",
            ))
        }
    };
    let messages = match o.get("messages").filter(|v| !v.is_null()) {
        None => None,
        Some(v) => match v.as_u64().and_then(|n| usize::try_from(n).ok()) {
            Some(n) => Some(n),
            None => {
                return Err(ApiError::invalid_value(
                    "`cache_pin.messages` must be a non-negative integer",
                    "cache_pin.messages",
                ))
            }
        },
    };
    Ok(Asked {
        pin: Some(Pin { ttl, tokens: None }),
        messages,
    })
}

/// The probe that finds how far a pin of the first messages reaches in
/// tokens (see the module's note): `None` when the pin takes the whole
/// prompt (no pin, no message count, every message covered, or media).
pub fn probe(spec: &GenSpec, c: &ChatPrompt, media: bool) -> Option<ChatPrompt> {
    spec.pin?;
    let n = spec.pin_messages?;
    if media || n >= c.messages.len() {
        return None;
    }
    let mut p = c.clone();
    let m = p.messages.get_mut(n)?.as_object_mut()?;
    let starts_with = |ch| {
        m.get("content")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(ch))
    };
    let text = if starts_with('~') { "#" } else { "~" };
    m.insert("content".into(), text.into());
    Some(p)
}

/// The pin's tokens: those the probe's render shares with the prompt
/// (unchanged, the whole prompt, when the probe cannot be rendered).
pub async fn settle(
    spec: &mut GenSpec,
    probe: Option<ChatPrompt>,
    prompt: &[TokenId],
    pr: &Preparer,
) {
    let (Some(pin), Some(p)) = (spec.pin.as_mut(), probe) else {
        return;
    };
    match pr.chat(p).await {
        Ok(t) => pin.tokens = Some(shared(&t.tokens, prompt)),
        Err(e) => tracing::debug!(error = %e, "pin probe not rendered: the whole prompt is pinned"),
    }
}

/// Tokens `a` and `b` share from the start.
fn shared(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pin(ttl_s: u64) -> Option<Pin> {
        Some(Pin {
            ttl: Duration::from_secs(ttl_s),
            tokens: None,
        })
    }

    fn refused(body: Value) -> ApiError {
        match asked(&body) {
            Ok(a) => panic!("expected a 400 for {body}, got {a:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn what_each_field_asks_for() {
        assert_eq!(asked(&json!({})).unwrap(), Asked::default());
        assert_eq!(
            asked(&json!({"prompt_cache_key": null})).unwrap(),
            Asked::default()
        );
        let whole = |ttl_s| Asked {
            pin: pin(ttl_s),
            messages: None,
        };
        assert_eq!(
            asked(&json!({"prompt_cache_key": "k"})).unwrap(),
            whole(300)
        );
        assert_eq!(
            asked(&json!({"prompt_cache_key": "k", "prompt_cache_retention": "24h"})).unwrap(),
            whole(86_400)
        );
        assert_eq!(
            asked(&json!({"prompt_cache_retention": "in_memory"})).unwrap(),
            whole(300)
        );
        assert_eq!(
            asked(&json!({"cache_pin": {"ttl_s": 3600, "messages": 2}})).unwrap(),
            Asked {
                pin: pin(3600),
                messages: Some(2)
            }
        );
        assert_eq!(
            asked(&json!({"cache_pin": {"ttl_s": 300}, "prompt_cache_key": "k"})).unwrap(),
            whole(300)
        );
    }

    #[test]
    fn malformed_fields_are_400s_naming_them() {
        for (body, param) in [
            (json!({"prompt_cache_key": 3}), "prompt_cache_key"),
            (
                json!({"prompt_cache_retention": "1w"}),
                "prompt_cache_retention",
            ),
            (json!({"cache_pin": 300}), "cache_pin"),
            (json!({"cache_pin": {}}), "cache_pin.ttl_s"),
            (json!({"cache_pin": {"ttl_s": 0}}), "cache_pin.ttl_s"),
            (json!({"cache_pin": {"ttl_s": 86_401}}), "cache_pin.ttl_s"),
            (json!({"cache_pin": {"ttl_s": "5m"}}), "cache_pin.ttl_s"),
            (
                json!({"cache_pin": {"ttl_s": 5, "messages": -1}}),
                "cache_pin.messages",
            ),
            (
                json!({"cache_pin": {"ttl_s": 5, "tokens": 9}}),
                "cache_pin.tokens",
            ),
        ] {
            let e = refused(body.clone());
            assert_eq!(
                (e.status.as_u16(), e.param.as_deref()),
                (400, Some(param)),
                "{body}"
            );
            assert!(e.message.contains(param), "{}", e.message);
        }
    }

    #[test]
    fn the_probe_changes_only_the_first_uncovered_content() {
        let c = ChatPrompt::new(vec![
            json!({"role": "system", "content": "rules"}),
            json!({"role": "user", "content": "~tilde"}),
            json!({"role": "assistant", "content": "a"}),
        ]);
        let mut spec = crate::prepare::validate::chat(
            br#"{"messages":[{"role":"user","content":"x"}],"cache_pin":{"ttl_s":5,"messages":1}}"#,
            0,
            &crate::prepare::limits::Limits::default(),
        )
        .unwrap()
        .0;
        assert_eq!(spec.pin_messages, Some(1));
        let p = probe(&spec, &c, false).unwrap();
        assert_eq!(p.messages[0], c.messages[0]);
        assert_eq!(p.messages[1], json!({"role": "user", "content": "#"}));
        assert_eq!(p.messages[2], c.messages[2]);
        assert!(probe(&spec, &c, true).is_none(), "media: the whole prompt");
        spec.pin_messages = Some(3);
        assert!(probe(&spec, &c, false).is_none(), "all covered");
        spec.pin_messages = None;
        assert!(probe(&spec, &c, false).is_none());
        assert_eq!(shared(&[1, 2, 3, 4], &[1, 2, 9]), 2);
        assert_eq!(shared(&[], &[1]), 0);
    }
}
