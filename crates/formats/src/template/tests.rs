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

/// String literals inside tags read as Jinja2 reads them (Python's string
/// escapes: a backslash before a line ending joins the lines); text,
/// comments and raw blocks keep their backslashes. The expected text is
/// Jinja2 3.1's render of this template.
#[test]
fn string_literals_read_as_jinja2() {
    let src = r#"{%- set intro = "You help with gardening.\
 Keep answers short.\
 Ask when a plant is unclear." -%}
{{ intro }}
{{ 'tab:\there|nl:\nend|bs:\\|sq:\'|dq:\"|u:\u00e9|x:\x41|q:\q|a:\a|v:\v|slash:\/|U:\U0001F331|oct:\101\777|\é' }}
{# a comment's 'lit\
eral' stays #}{% raw %}{{ 'raw\
kept' }}{% endraw %}
text outside a tag keeps its backslash\
and its newline {{ "dq\
joined" }} {{ {'k': 'v\
w'}['k'] }}
"#;
    let expected = "You help with gardening. Keep answers short. Ask when a plant is unclear.\n\
        tab:\there|nl:\nend|bs:\\|sq:'|dq:\"|u:\u{e9}|x:A|q:\\q|a:\x07|v:\x0b|slash:\\/|U:\u{1F331}|oct:A\u{1FF}|\\xe9\n\
        {{ 'raw\\\nkept' }}text outside a tag keeps its backslash\\\nand its newline dqjoined vw";
    assert_eq!(render(&one(src), json!([]), json!({})).unwrap(), expected);
    // Windows line endings inside a literal read as `\n`, also after a
    // backslash.
    let t = one("{{ 'a\r\nb|c\\\r\nd' }}");
    assert_eq!(render(&t, json!([]), json!({})).unwrap(), "a\nb|cd");
    // Not followed: `\N{…}` stays as written (Jinja2 looks the name up)
    // and a surrogate pair is one character (two lone ones in Python).
    let t = one(r"{{ '\N{BULLET}|\ud83c\udf31|\
' }}");
    assert_eq!(
        render(&t, json!([]), json!({})).unwrap(),
        "\\N{BULLET}|\u{1F331}|"
    );
}

/// The rewrite leaves a template whose literals read the same in both
/// untouched, and its output reads the same again (idempotent).
#[test]
fn string_literal_rewrite_is_minimal() {
    use super::literals::python_literals;
    let same = r#"{{ 'a\nb\t\\\'\"\x41\u00e9\q' }}{% if x == "y\\" %}\
{% endif %}"#;
    assert!(matches!(
        python_literals(same),
        std::borrow::Cow::Borrowed(_)
    ));
    let src = "{{ 'a\\\nb' ~ \"\\a\\/\" }}{{ x }}text\\\n";
    let once = python_literals(src).into_owned();
    assert_eq!(once, "{{ 'ab' ~ \"\x07\\\\/\" }}{{ x }}text\\\n");
    assert_eq!(python_literals(&once), once);
}
