//! Templates Steward writes itself (its own words): for a GGUF that
//! carries none, and for `--chat-template NAME`. A model without a
//! template gets the one its vocabulary's markers fit: Gemma turns when it
//! has `<start_of_turn>`, ChatML when it has `<|im_start|>`, otherwise
//! plain `User:`/`Assistant:` lines (a base model continues them).

/// ChatML: `<|im_start|>role\ncontent<|im_end|>\n`.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] if message['content'] is string else '') + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma turns: the system text opens the first user turn; the assistant
/// is `model`.
pub const GEMMA: &str = "{{ bos_token }}{% set ns = namespace(system='') %}{% for message in messages %}{% if message['role'] == 'system' %}{% set ns.system = ns.system + message['content'] + '\\n\\n' %}{% else %}{% set role = 'model' if message['role'] == 'assistant' else 'user' %}{{ '<start_of_turn>' + role + '\\n' }}{% if role == 'user' and ns.system %}{{ ns.system }}{% set ns.system = '' %}{% endif %}{{ (message['content'] if message['content'] is string else '') | trim }}{{ '<end_of_turn>\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

/// Plain text turns.
pub const PLAIN: &str = "{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% else %}{{ ('Assistant: ' if message['role'] == 'assistant' else 'User: ') + (message['content'] if message['content'] is string else '') + '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

/// A built-in template by name (`--chat-template chatml|gemma|plain`).
pub fn builtin(name: &str) -> Option<&'static str> {
    match name {
        "chatml" => Some(CHATML),
        "gemma" => Some(GEMMA),
        "plain" => Some(PLAIN),
        _ => None,
    }
}

/// The fallback for a model without a template, by its control tokens.
pub fn for_vocabulary<'a>(mut specials: impl Iterator<Item = &'a str>) -> &'static str {
    let all: Vec<&str> = specials.by_ref().collect();
    if all.contains(&"<start_of_turn>") {
        "gemma"
    } else if all.contains(&"<|im_start|>") {
        "chatml"
    } else {
        "plain"
    }
}

#[cfg(test)]
mod tests {
    use crate::{ChatTemplates, RenderArgs};
    use serde_json::json;

    fn render(name: &str) -> String {
        let t = ChatTemplates::new(super::builtin(name), &[]).unwrap();
        let m = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
            json!({"role": "assistant", "content": "Hello"}),
            json!({"role": "user", "content": "Sky?"}),
        ];
        let mut k = serde_json::Map::new();
        k.insert("bos_token".into(), "<bos>".into());
        t.render(&RenderArgs {
            messages: &m,
            kwargs: &k,
            add_generation_prompt: true,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn fallbacks_render() {
        assert_eq!(
            render("gemma"),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n<start_of_turn>user\nSky?<end_of_turn>\n<start_of_turn>model\n"
        );
        assert!(
            render("chatml").ends_with("<|im_start|>user\nSky?<|im_end|>\n<|im_start|>assistant\n")
        );
        assert_eq!(
            render("plain"),
            "Be brief.\n\nUser: Hi\nAssistant: Hello\nUser: Sky?\nAssistant:"
        );
        assert_eq!(
            super::for_vocabulary(["<bos>", "<start_of_turn>"].into_iter()),
            "gemma"
        );
    }
}
