//! How much host time the output parser adds per token: a long output fed
//! in 4-byte pieces (about one token each), per family, and the worst case
//! of one long call region (its arguments are rescanned as they grow).
//!
//!     cargo run --release -p steward-formats --example parse_speed

use std::time::Instant;
use steward_formats::family::Family;
use steward_formats::parse::{Options, OutputParser};

fn run(family: Family, text: &str) -> (f64, usize) {
    let opts = Options {
        family,
        tools: true,
        reasoning: true,
        in_reasoning: false,
        tool_defs: None,
    };
    let mut best = f64::MAX;
    let mut pieces = 0;
    for _ in 0..5 {
        let mut p = OutputParser::new(opts.clone());
        let t = Instant::now();
        let mut rest = text;
        pieces = 0;
        while !rest.is_empty() {
            let mut cut = 4.min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut += 1;
            }
            std::hint::black_box(p.push(&rest[..cut]));
            rest = &rest[cut..];
            pieces += 1;
        }
        std::hint::black_box(p.finish());
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best * 1e6 / pieces as f64, pieces)
}

fn main() {
    let prose = "The quick brown fox jumps over the lazy dog. ".repeat(400);
    let call = |args: &str| {
        format!("<tool_call>\n{{\"name\": \"f\", \"arguments\": {args}}}\n</tool_call>\n")
    };
    let small = format!("{{\"q\": \"{}\"}}", "x".repeat(40));
    let big = format!("{{\"q\": \"{}\"}}", "y".repeat(16_000));
    let cases = [
        ("generic, text only", Family::Generic, prose.clone()),
        ("hermes, reasoning + text", Family::Hermes, format!("<think>{prose}</think>{prose}")),
        ("hermes, 100 small calls", Family::Hermes, call(&small).repeat(100)),
        ("hermes, one 16 KB call", Family::Hermes, call(&big)),
        ("harmony, analysis + final", Family::Harmony, format!("<|channel|>analysis<|message|>{prose}<|end|><|start|>assistant<|channel|>final<|message|>{prose}")),
        ("mistral, 100 small calls", Family::Mistral, format!("[TOOL_CALLS]f[ARGS]{small}").repeat(100)),
    ];
    println!("| output | pieces | µs per piece |");
    println!("|---|---|---|");
    for (name, f, text) in cases {
        let (us, n) = run(f, &text);
        println!("| {name} | {n} | {us:.3} |");
    }
}
