//! Inputs the `tool_parser` fuzz target found (fuzz/fuzz_targets/tool_parser.rs):
//! streamed in the target's pieces, every parser gives what it gives whole.

use steward_formats::family::Family;
use steward_formats::parse::{parse_whole, Options, OutputParser, Parsed};

fn check(family: Family, tools: bool, in_reasoning: bool, head: u8, text: &str) {
    let opts = Options {
        family,
        tools,
        reasoning: true,
        in_reasoning,
        tool_defs: None,
    };
    let mut whole = parse_whole(opts.clone(), text);
    let mut p = OutputParser::new(opts);
    let mut got = Parsed::default();
    let mut rest: &str = text;
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
    assert_eq!(got, whole, "{text:?}");
}

#[test]
fn hermes_call_region_with_a_qwen_xml_function_inside() {
    let bytes: &[u8] = &[
        0x00, 0x3f, 0x9b, 0x72, 0x72, 0x32, 0x72, 0x96, 0x02, 0x00, 0x30, 0x50, 0x61, 0x20, 0x3c,
        0x74, 0x6f, 0x6f, 0x3c, 0x74, 0x6f, 0x6f, 0x6c, 0x5f, 0x63, 0x61, 0x6c, 0x6c, 0x3e, 0x3c,
        0x66, 0x75, 0x6e, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x3d, 0x3e, 0x7b, 0xd6, 0xa3, 0x8d, 0x8d,
        0x8d, 0x8d, 0x93, 0xc1, 0x7b, 0x22, 0x5c, 0x6e, 0x26, 0x6d, 0x00, 0x00, 0x5d, 0x75, 0x72,
        0x65, 0x0d, 0x00, 0x00, 0xd1,
    ];
    let text = String::from_utf8_lossy(bytes);
    check(Family::Hermes, true, false, 0, &text);
}

#[test]
fn a_second_open_think_marker_is_reasoning_however_the_stream_is_cut() {
    let text = " \t<think> \t<think>\t\t\t\t\t\t\t\tc\t\t\t\t\t\t\t\t\t\t\t\t\u{fffd}\u{fffd}ink>\t\t\t\tm";
    check(Family::Hermes, true, true, 97, text);
    check(Family::Hermes, true, false, 97, text);
    for head in 0..7 {
        check(Family::Hermes, true, true, head, "<think><think>a</think>b");
    }
}
