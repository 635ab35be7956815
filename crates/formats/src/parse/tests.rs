use super::*;

fn opts(family: Family) -> Options {
    Options {
        family,
        tools: true,
        reasoning: true,
        in_reasoning: false,
        tool_defs: None,
    }
}

/// Streamed in every split point pair and one-byte pieces equals whole.
fn check_splits(o: &Options, text: &str) -> Parsed {
    let whole = parse_whole(o.clone(), text);
    let cuts: Vec<usize> = (0..=text.len())
        .filter(|&i| text.is_char_boundary(i))
        .collect();
    let mut seeds = vec![cuts.clone()];
    for step in [1usize, 2, 3, 5, 7, 11] {
        seeds.push(cuts.iter().copied().step_by(step).collect());
    }
    let mut rng = 0x9e3779b97f4a7c15u64;
    for _ in 0..40 {
        let mut v: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng.is_multiple_of(4)
            })
            .collect();
        v.push(text.len());
        seeds.push(v);
    }
    for s in seeds {
        let mut p = OutputParser::new(o.clone());
        let mut got = Parsed::default();
        let mut last = 0;
        for &c in &s {
            if c > last {
                got.apply(p.push(&text[last..c]));
                last = c;
            }
        }
        got.apply(p.push(&text[last..]));
        got.apply(p.finish());
        got.notes.clear();
        let mut w = whole.clone();
        w.notes.clear();
        assert_eq!(got, w, "split {s:?} of {text:?}");
    }
    whole
}

type Call = (Option<String>, String, String);

fn call(name: &str, args: &str) -> Call {
    (None, name.to_string(), args.to_string())
}

#[test]
fn hermes_calls_and_text() {
    let o = opts(Family::Hermes);
    let p = check_splits(
        &o,
        "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"n\": [1, {\"a\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
    );
    assert_eq!(p.content, "Let me check.");
    assert_eq!(
        p.calls,
        vec![
            call(
                "get_weather",
                "{\"city\": \"東京\", \"n\": [1, {\"a\": \"}\"}]}"
            ),
            call("b", "{}")
        ]
    );
}

#[test]
fn qwen3_reasoning_then_call() {
    let o = opts(Family::Hermes);
    let p = check_splits(
        &o,
        "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 1}}\n</tool_call>",
    );
    assert_eq!(p.reasoning, "The user wants weather.");
    assert_eq!(p.content, "");
    assert_eq!(p.calls, vec![call("w", "{\"c\": 1}")]);
    // The prompt opened the block (QwQ, R1 distills).
    let o2 = Options {
        in_reasoning: true,
        ..o
    };
    let p = check_splits(&o2, "Hmm, 2+2.\n</think>\n\nIt is 4.");
    assert_eq!(
        (p.reasoning.as_str(), p.content.as_str()),
        ("Hmm, 2+2.", "It is 4.")
    );
}

#[test]
fn broken_region_degrades_to_text() {
    let o = opts(Family::Hermes);
    let p = check_splits(&o, "a <tool_call> not json </tool_call> b");
    assert!(p.calls.is_empty());
    assert_eq!(p.content, "a<tool_call> not json </tool_call> b");
    let p = parse_whole(o.clone(), "x <tool_call>{\"nam");
    assert!(p.calls.is_empty() && p.content.contains("{\"nam"), "{p:?}");
    assert!(!p.notes.is_empty());
}

#[test]
fn mistral_both_forms() {
    let o = opts(Family::Mistral);
    let p = check_splits(
        &o,
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcABC123\"}, {\"name\": \"b\", \"arguments\": {}}]",
    );
    assert_eq!(p.calls, vec![call("a", "{\"x\": 1}"), call("b", "{}")]);
    let p = check_splits(&o, "[THINK]plan[/THINK]Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]b[ARGS]{}");
    assert_eq!(p.reasoning, "plan");
    assert_eq!(p.content, "Sure.");
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", "{\"city\": \"Paris\"}"),
            call("b", "{}")
        ]
    );
}

#[test]
fn llama3_bare_json_and_python_tag() {
    let o = opts(Family::Llama3);
    let p = check_splits(&o, "{\"name\": \"f\", \"parameters\": {\"q\": \"x\"}}");
    assert_eq!(p.calls, vec![call("f", "{\"q\": \"x\"}")]);
    let p = check_splits(&o, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
    assert_eq!(p.calls, vec![call("f", "{}")]);
    // JSON that is not a call is text.
    let p = check_splits(&o, "{\"answer\": 4}");
    assert!(p.calls.is_empty());
    assert_eq!(p.content, "{\"answer\": 4}");
}

#[test]
fn deepseek_r1_and_v31() {
    let o = opts(Family::DeepSeek);
    let p = check_splits(&o, "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    assert_eq!(p.content, "ok");
    assert_eq!(
        p.calls,
        vec![
            call("get_weather", "{\"city\": \"Paris\"}"),
            call("b", "{}")
        ]
    );
    let p = check_splits(&o, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    assert_eq!(p.calls, vec![call("get_weather", "{\"city\": \"Paris\"}")]);
}

#[test]
fn harmony_channels() {
    let o = opts(Family::Harmony);
    let p = check_splits(&o, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>");
    assert_eq!(p.reasoning, "Need weather.");
    assert_eq!(p.calls, vec![call("get_weather", "{\"city\": \"Paris\"}")]);
    let p = check_splits(
        &o,
        "<|channel|>analysis<|message|>2+2<|end|><|start|>assistant<|channel|>final<|message|>4",
    );
    assert_eq!((p.reasoning.as_str(), p.content.as_str()), ("2+2", "4"));
}

#[test]
fn other_families() {
    let cases: Vec<(Family, &str, Vec<Call>)> = vec![
        (Family::QwenXml, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>", vec![call("get_weather", "{\"city\":\"Paris\",\"days\":3}")]),
        (Family::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>", vec![(Some("functions.get_weather:0".into()), "get_weather".into(), "{\"city\": \"Paris\"}".into())]),
        (Family::Glm, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>", vec![call("get_weather", "{\"city\":\"Paris\"}")]),
        (Family::CommandR, "<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]<|END_ACTION|>", vec![call("f", "{\"a\": 1}")]),
        (Family::ToolCallToken, "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]", vec![call("f", "{\"a\": 1}")]),
        (Family::Functools, "functools[{\"name\": \"f\", \"arguments\": {}}]", vec![call("f", "{}")]),
        (Family::FunctionaryV31, "<function=f>{\"a\": 1}</function>", vec![call("f", "{\"a\": 1}")]),
        (Family::FunctionaryV32, "all\nLet me look.>>>f\n{\"a\": 1}", vec![call("f", "{\"a\": 1}")]),
        (Family::Gemma4, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>", vec![call("get_weather", "{\"city\":\"Paris\",\"days\":3}")]),
    ];
    for (f, text, want) in cases {
        let p = check_splits(&opts(f), text);
        assert_eq!(p.calls, want, "{f:?}: {p:?}");
    }
}

#[test]
fn no_tools_leaves_text_alone() {
    let o = Options {
        tools: false,
        ..opts(Family::Hermes)
    };
    let p = check_splits(
        &o,
        "<think>r</think>a <tool_call>{\"name\": \"f\"}</tool_call>",
    );
    assert_eq!(p.reasoning, "r");
    assert!(p.calls.is_empty());
    assert_eq!(p.content, "a <tool_call>{\"name\": \"f\"}</tool_call>");
}

#[test]
fn a_named_call_that_breaks_keeps_its_name_streamed_and_whole() {
    // Found by fuzzing: the name had been streamed when the object broke.
    let o = opts(Family::Hermes);
    let p = check_splits(
        &o,
        "a <tool_call>\n{\"name\": \"f\",*\"arguments\": {}} tail",
    );
    assert_eq!(p.calls, vec![call("f", "")]);
    assert_eq!(p.content, "a*\"arguments\": {}} tail");
    let p = check_splits(
        &opts(Family::Mistral),
        "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"x\" 1}] z",
    );
    assert_eq!(p.calls, vec![call("a", "{}")]);
    assert!(p.content.ends_with("{\"x\" 1}] z"), "{p:?}");
}

#[test]
fn an_output_cut_inside_a_call_marker_leaves_no_markup() {
    let o = opts(Family::Hermes);
    let p = check_splits(&o, "Let me check.\n<tool_");
    assert_eq!(p.content, "Let me check.");
    assert!(p.calls.is_empty());
    // A lone `<` (or text that is no marker's start) stays text.
    assert_eq!(check_splits(&o, "a < b and c <").content, "a < b and c <");
    assert_eq!(check_splits(&o, "x <tab").content, "x <tab");
}
