//! Families whose real templates are in no package here (Mistral v3 and
//! Small 3.1, Gemma 3, Phi-4, Phi-4-mini): each is tested on the
//! properties of its format, with templates written in these tests' own
//! words that have those properties (the markers each prints, where its
//! tools go), not copies of the real ones.

use serde_json::{json, Map, Value};
use steward_formats::adapt::{fit, Profile};
use steward_formats::family::{detect, Family};
use steward_formats::grammar::{grammar, Force, Function, Reasoning, Variant};
use steward_formats::parse::{parse_whole, Options};
use steward_formats::{ChatTemplates, RenderArgs};

/// Mistral v3 / Small 3.1: `[AVAILABLE_TOOLS]` before the last user turn,
/// calls as `[TOOL_CALLS][{…, "id": 9 alphanumerics}]`, results as
/// `[TOOL_RESULTS]{…}[/TOOL_RESULTS]`; Small 3.1 adds `[SYSTEM_PROMPT]`.
const MISTRAL_V3: &str = r#"{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}[SYSTEM_PROMPT]{{ m.content }}[/SYSTEM_PROMPT]{% elif m.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ m.content }}[/INST]{% elif m.role == 'assistant' %}{% if m.tool_calls %}[TOOL_CALLS][{% for c in m.tool_calls %}{% if c.id | length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}{% endif %}{{ {'name': c.function.name, 'arguments': c.function.arguments, 'id': c.id} | tojson }}{% if not loop.last %}, {% endif %}{% endfor %}]{{ eos_token }}{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ {'content': m.content, 'call_id': m.tool_call_id} | tojson }}[/TOOL_RESULTS]{% endif %}{% endfor %}"#;

/// Gemma 3: turns of `<start_of_turn>user|model`, the system text folded
/// into the first user turn, no tool syntax.
const GEMMA3: &str = r#"{{ bos_token }}{% set first = '' %}{% if messages[0].role == 'system' %}{% set first = messages[0].content + '\n\n' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}{% endif %}{% for m in rest %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' }}
{{ first if loop.first else '' }}{{ m.content | trim }}<end_of_turn>
{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}"#;

/// Phi-4: ChatML-like turns with `<|im_sep|>`, no tool syntax.
const PHI4: &str = r#"{% for m in messages %}<|im_start|>{{ m.role }}<|im_sep|>{{ m.content }}<|im_end|>{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif %}"#;

/// Phi-4-mini: tools go in the system message's `tools` key, printed
/// between `<|tool|>` and `<|/tool|>`; calls are written `functools[…]`.
const PHI4_MINI: &str = r#"{% for m in messages %}{% if m.role == 'system' and 'tools' in m and m.tools is not none %}<|system|>{{ m.content }}<|tool|>{{ m.tools }}<|/tool|><|end|>{% else %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"#;

fn kwargs() -> Map<String, Value> {
    let mut k = Map::new();
    k.insert("bos_token".into(), "<s>".into());
    k.insert("eos_token".into(), "</s>".into());
    k
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

fn render(
    t: &ChatTemplates,
    p: &Profile,
    messages: Vec<Value>,
    tools: Option<&Value>,
) -> Result<String, String> {
    let (m, t2) = fit(p, &messages, tools);
    t.render(&RenderArgs {
        messages: &m,
        tools: t2.as_ref(),
        kwargs: &kwargs(),
        add_generation_prompt: true,
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

#[test]
fn mistral_v3_calls_ids_and_grammar() {
    let t = ChatTemplates::new(Some(MISTRAL_V3), &[]).unwrap();
    let p = Profile::probe(&t, &kwargs());
    assert!(p.native_tools);
    assert_eq!((detect(&t), p.family), (Family::Mistral, Family::Mistral));
    assert_eq!(Variant::detect(Family::Mistral, MISTRAL_V3), Variant::Plain);
    // Steward's ids for this family are what the template accepts.
    let id = Family::Mistral.call_id("req-1/0", 0, "get_weather");
    assert!(
        id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{id}"
    );
    let user = json!({"role": "user", "content": "Weather in Paris?"});
    let call = |id: &str| {
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]})
    };
    let result = json!({"role": "tool", "tool_call_id": id, "content": "18 C"});
    let next = render(
        &t,
        &p,
        vec![
            user.clone(),
            call(&id),
            result.clone(),
            json!({"role": "user", "content": "And Tokyo?"}),
        ],
        Some(&tools()),
    )
    .unwrap();
    assert!(next.contains(&format!("[TOOL_CALLS][{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}, \"id\": \"{id}\"}}]")), "{next}");
    assert!(
        next.contains("[AVAILABLE_TOOLS]") && next.ends_with("[INST]And Tokyo?[/INST]"),
        "{next}"
    );
    // OpenAI-style ids are refused by this template, as by the real one.
    assert!(render(
        &t,
        &p,
        vec![user, call("call_abcdefghijklmnopqrstuvwx"), result],
        Some(&tools())
    )
    .is_err());
    // Output: both the spaced and the unspaced array forms.
    let o = Options {
        family: Family::Mistral,
        tools: true,
        reasoning: true,
        in_reasoning: false,
        tool_defs: None,
    };
    for out in [
        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
    ] {
        let r = parse_whole(o.clone(), out);
        assert_eq!(r.calls.len(), 1, "{out}: {r:?}");
        assert_eq!(r.calls[0].2, "{\"city\": \"Paris\"}");
    }
    let f = [Function {
        name: "get_weather".into(),
        params: tools()[0]["function"]["parameters"].clone(),
    }];
    let special = |t: &str| (t == "[TOOL_CALLS]").then_some(5);
    let g = grammar(
        Family::Mistral,
        Variant::Plain,
        &Force::Calls {
            functions: &f,
            named: None,
            parallel: false,
        },
        Reasoning {
            trained: false,
            open: false,
            budget: 10,
        },
        &special,
    )
    .unwrap();
    assert!(g.contains("<[5]> \"[\""), "{g}");
}

#[test]
fn gemma3_tools_become_instructions_in_the_first_user_turn() {
    let t = ChatTemplates::new(Some(GEMMA3), &[]).unwrap();
    let p = Profile::probe(&t, &kwargs());
    assert!(!p.native_tools && p.system_ok);
    assert_eq!(p.family, Family::Generic);
    let out = render(
        &t,
        &p,
        vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Weather?"}),
        ],
        Some(&tools()),
    )
    .unwrap();
    assert!(
        out.starts_with("<s><start_of_turn>user\nBe brief.\n\n# Tools"),
        "{out}"
    );
    assert!(
        out.contains("\"name\":\"get_weather\"")
            && out.ends_with("Weather?<end_of_turn>\n<start_of_turn>model\n"),
        "{out}"
    );
}

#[test]
fn phi4_has_no_call_syntax() {
    let t = ChatTemplates::new(Some(PHI4), &[]).unwrap();
    let p = Profile::probe(&t, &kwargs());
    assert_eq!((p.native_tools, p.family), (false, Family::Generic));
    let out = render(&t, &p, vec![json!({"role": "user", "content": "hi"})], None).unwrap();
    assert_eq!(
        out,
        "<|im_start|>user<|im_sep|>hi<|im_end|><|im_start|>assistant<|im_sep|>"
    );
}

#[test]
fn phi4_mini_tools_in_the_system_message_and_functools_calls() {
    let t = ChatTemplates::new(Some(PHI4_MINI), &[]).unwrap();
    let p = Profile::probe(&t, &kwargs());
    assert!(p.system_tools_key && !p.native_tools);
    assert_eq!(p.family, Family::ToolCallToken);
    let out = render(
        &t,
        &p,
        vec![json!({"role": "user", "content": "Weather?"})],
        Some(&tools()),
    )
    .unwrap();
    assert!(
        out.starts_with("<|system|><|tool|>[{\"type\":\"function\""),
        "{out}"
    );
    assert!(
        out.ends_with("<|/tool|><|end|><|user|>Weather?<|end|><|assistant|>"),
        "{out}"
    );
    let o = Options {
        family: p.family,
        tools: true,
        reasoning: true,
        in_reasoning: false,
        tool_defs: None,
    };
    let r = parse_whole(
        o,
        "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
    );
    assert_eq!(r.calls.len(), 1, "{r:?}");
}
