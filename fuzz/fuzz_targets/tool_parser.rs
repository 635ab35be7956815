//! The tool-call parser, streamed (text in arbitrary pieces) and whole.
//! Never panics; the streamed content is the text outside calls.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_server::tools::{parse_all, ToolStream};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_all(&text);
    let mut s = ToolStream::default();
    let mut rest: &str = &text;
    let mut step = 1 + data.first().map_or(0, |b| (*b % 7) as usize);
    while !rest.is_empty() {
        let mut cut = step.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let _ = s.push(&rest[..cut]);
        rest = &rest[cut..];
        step = step % 5 + 1;
    }
    let _ = s.finish();
});
