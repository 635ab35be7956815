//! Every family's output parser, streamed (text in arbitrary pieces) and
//! whole: never panics, and both give the same text, reasoning and calls.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_formats::family::Family;
use steward_formats::parse::{parse_whole, Options, OutputParser, Parsed};

const FAMILIES: [Family; 15] = [
    Family::Hermes,
    Family::QwenXml,
    Family::Llama3,
    Family::Mistral,
    Family::DeepSeek,
    Family::Harmony,
    Family::FunctionaryV31,
    Family::FunctionaryV32,
    Family::CommandR,
    Family::ToolCallToken,
    Family::Functools,
    Family::Kimi,
    Family::Glm,
    Family::Gemma4,
    Family::Generic,
];

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let opts = Options {
        family: FAMILIES[head as usize % FAMILIES.len()],
        tools: head & 0x80 == 0,
        reasoning: true,
        in_reasoning: head & 0x40 != 0,
        tool_defs: None,
    };
    let mut whole = parse_whole(opts.clone(), &text);
    let mut p = OutputParser::new(opts);
    let mut got = Parsed::default();
    let mut rest: &str = &text;
    let mut step = 1 + (head % 7) as usize;
    while !rest.is_empty() {
        let mut cut = step.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        got.apply(p.push(&rest[..cut]));
        rest = &rest[cut..];
        step = step % 5 + 1;
    }
    got.apply(p.finish());
    got.notes.clear();
    whole.notes.clear();
    assert_eq!(got, whole);
});
