//! Template rendering of arbitrary conversations, client strings protected
//! from becoming special tokens: never panics, a client string never yields
//! a piece parsed for special tokens that spells one, and the pieces put
//! together are the conversation as ChatML writes it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_engine::chat::render_pieces;
use steward_formats::fallback::CHATML;

const SPECIALS: [&str; 3] = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // (A `tool` message is rewritten as a user turn for templates without
    // tools; the Hermes rewrite has its own tests.)
    let roles = ["system", "user", "assistant"];
    let messages: Vec<serde_json::Value> = text
        .split('\u{1}')
        .take(64)
        .enumerate()
        .map(|(i, c)| serde_json::json!({"role": roles[i % roles.len()], "content": c}))
        .collect();
    let want: String = messages
        .iter()
        .map(|m| {
            format!(
                "<|im_start|>{}\n{}<|im_end|>\n",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .chain(std::iter::once("<|im_start|>assistant\n".to_string()))
        .collect();
    let pieces = render_pieces(CHATML, &SPECIALS, messages).expect("ChatML renders");
    let joined: String = pieces.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(joined, want);
    // Parsed pieces hold exactly the template's markup: as many specials as
    // ChatML writes for the messages, no more.
    let parsed: usize = pieces
        .iter()
        .filter(|p| p.1)
        .map(|p| {
            SPECIALS
                .iter()
                .map(|s| p.0.matches(s).count())
                .sum::<usize>()
        })
        .sum();
    let turns = want.matches("<|im_start|>").count();
    assert!(
        parsed <= 2 * turns,
        "{parsed} specials parsed for {turns} turns"
    );
});
