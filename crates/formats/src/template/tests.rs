use super::*;
use serde_json::json;

fn one(src: &str) -> ChatTemplates {
    ChatTemplates::new(Some(src), &[]).unwrap()
}

fn render(t: &ChatTemplates, messages: Json, kwargs: Json) -> Result<String, TemplateError> {
    let m = messages.as_array().unwrap().clone();
    let k = kwargs.as_object().unwrap().clone();
    t.render(&RenderArgs {
        messages: &m,
        kwargs: &k,
        add_generation_prompt: true,
        ..Default::default()
    })
}

#[test]
fn python_conventions() {
    let t = one(
        "{% for m in messages %}\n  {{ m.role }}={{ m.content }}|{{ m.x }}|{{ m.content.split(',') }}\n{% endfor %}{{ tools }}|{{ true }}|{{ messages[0] | tojson }}",
    );
    let out = render(
        &t,
        json!([{"role": "user", "content": "a,b", "x": null}]),
        json!({}),
    )
    .unwrap();
    assert_eq!(
        out,
        "  user=a,b||['a', 'b']\nNone|True|{\"role\": \"user\", \"content\": \"a,b\"}"
    );
}

#[test]
fn loop_controls_and_immutable_lists() {
    let t = one(
        "{% set ns = namespace(ids=[]) %}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{% set ns.ids = ns.ids + [m.content] %}{% endfor %}{{ ns.ids }}",
    );
    let m = json!([{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]);
    assert_eq!(render(&t, m.clone(), json!({})).unwrap(), "['a', 'b']");
    // transformers' sandbox refuses in-place changes: so does Steward.
    let t = one("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append(1) %}");
    assert!(render(&t, m, json!({})).is_err());
}

#[test]
fn none_keys_dropped_and_reasoning_aliased() {
    let t = one("{% for m in messages %}{{ m | tojson }}{% endfor %}");
    let m = json!([{"role": "assistant", "content": null, "reasoning_content": "r"}]);
    assert_eq!(
        render(&t, m, json!({})).unwrap(),
        r#"{"thinking": "r", "role": "assistant", "reasoning_content": "r"}"#
    );
}

#[test]
fn tests_as_python() {
    let t = one(
        "{{ none is iterable }} {{ 'x' is sequence }} {{ true is number }} {{ {} is mapping }}",
    );
    assert_eq!(
        render(&t, json!([]), json!({})).unwrap(),
        "False True True True"
    );
}

#[test]
fn raise_exception_is_a_render_error() {
    let t = one("{{ raise_exception('no system role') }}");
    assert!(
        matches!(render(&t, json!([]), json!({})), Err(TemplateError::Render(m)) if m.contains("no system role"))
    );
}

#[test]
fn endless_template_runs_out_of_fuel() {
    let t = one("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
    assert!(
        matches!(render(&t, json!([]), json!({})), Err(TemplateError::Render(m)) if m.contains("budget"))
    );
}

#[test]
fn variants_chosen_as_transformers() {
    let t = ChatTemplates::new(
        Some("D"),
        &[("tool_use".into(), "T".into()), ("rag".into(), "R".into())],
    )
    .unwrap();
    let k = Map::new();
    let tools = json!([]);
    let base = RenderArgs {
        kwargs: &k,
        ..Default::default()
    };
    assert_eq!(t.render(&base).unwrap(), "D");
    assert_eq!(
        t.render(&RenderArgs {
            tools: Some(&tools),
            ..base.clone()
        })
        .unwrap(),
        "T"
    );
    assert_eq!(
        t.render(&RenderArgs {
            variant: Some("rag"),
            ..base.clone()
        })
        .unwrap(),
        "R"
    );
    assert!(matches!(
        t.render(&RenderArgs {
            variant: Some("nope"),
            ..base
        }),
        Err(TemplateError::Input(_))
    ));
}

#[test]
fn continue_final_message_cuts_after_the_text() {
    let t = one("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>{% endfor %}");
    let m = vec![
        json!({"role":"user","content":"hi"}),
        json!({"role":"assistant","content":"Sure, "}),
    ];
    let k = Map::new();
    let out = t
        .render(&RenderArgs {
            messages: &m,
            kwargs: &k,
            continue_final_message: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out, "<user>hi</s><assistant>Sure,");
    let keep = one("{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}");
    let out = keep
        .render(&RenderArgs {
            messages: &m,
            kwargs: &k,
            continue_final_message: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out, "<user>hi</s><assistant>Sure, ");
    let both = RenderArgs {
        messages: &m,
        kwargs: &k,
        continue_final_message: true,
        add_generation_prompt: true,
        ..Default::default()
    };
    assert!(matches!(t.render(&both), Err(TemplateError::Input(_))));
}

#[test]
fn compile_errors_name_the_template() {
    let e = ChatTemplates::new(Some("{% for %}"), &[]).unwrap_err();
    assert!(
        matches!(e, TemplateError::Compile { ref name, .. } if name == "default"),
        "{e}"
    );
}

#[test]
fn reserved_kwargs_refused() {
    let t = one("x");
    assert!(matches!(
        render(&t, json!([]), json!({"messages": 1})),
        Err(TemplateError::Input(_))
    ));
}

#[test]
fn string_filters_as_jinja2() {
    let t = one("{{ ['a', 'b'] | upper }}|{{ '{\n' | indent(4, first=true) }}|{{ 'x\ny\n\nz' | indent(2) }}|{{ '  q ' | trim }}");
    assert_eq!(
        render(&t, json!([]), json!({})).unwrap(),
        "['A', 'B']|    {\n|x\n  y\n\n  z|q"
    );
}
