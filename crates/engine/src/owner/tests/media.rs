//! Owner tests of media spans on the fake backend: a span is decoded whole
//! in a step of its own, its cells are the placeholders the cell map keys
//! it by, a repeated prompt reuses it whole and another picture reuses
//! exactly the text before it.

use super::*;
use crate::request::{placeholder, MediaSpan};

/// Text 1..=10, a picture of 6 rows, text 11..=14. The fake writes a
/// span row's first float's bits to its cells: put the placeholder there.
fn pictured(hash: [u8; 32]) -> GenerateRequest {
    let (start, len, width) = (10, 6, 2);
    let mut prompt: Vec<TokenId> = (1..=10).collect();
    let mut embd = vec![0.5f32; len * width];
    for i in 0..len {
        let id = placeholder(&hash, i);
        prompt.push(id);
        embd[i * width] = f32::from_bits(id as u32);
    }
    prompt.extend(11..=14);
    GenerateRequest {
        media: vec![MediaSpan {
            start,
            len,
            hash,
            embd: embd.into(),
            non_causal: true,
        }],
        ..GenerateRequest::greedy("pic", prompt, 4)
    }
}

#[test]
fn a_span_is_decoded_whole_and_the_cache_keys_it_by_its_picture() {
    let mut c = config(2, 4);
    c.admit.prefix_cache = true;
    let mut h = harness(c);
    let mut a = h.send(pictured([1; 32]), 64);
    h.run_idle();
    let first = done(&events(&mut a)).clone();
    assert_eq!(first.cached_tokens, 0);
    assert_eq!(first.prompt_tokens, 20);
    // The budget is 4 a step; the span went in one piece, alone.
    let spans = h.owner.rt.spans.clone();
    assert_eq!(spans.len(), 1);
    assert_eq!((spans[0].1, spans[0].2), (10, 6));
    h.assert_idle_cached();

    let mut again = h.send(pictured([1; 32]), 64);
    h.run_idle();
    let second = done(&events(&mut again)).clone();
    assert_eq!(second.cached_tokens, 19);
    assert_eq!(second.output_tokens, first.output_tokens);

    let mut other = h.send(pictured([2; 32]), 64);
    h.run_idle();
    let third = done(&events(&mut other)).clone();
    assert_eq!(
        third.cached_tokens, 10,
        "exactly the text before the picture"
    );
    assert_eq!(h.owner.rt.spans.len(), 2);
    h.assert_idle_cached();
}

#[test]
fn the_host_tier_keeps_a_picture_and_restores_it_whole() {
    let mut c = config(1, 16);
    c.admit.prefix_cache = true;
    c.admit.prefix_host_bytes = 1 << 20;
    c.admit.prefix_host_min = 8;
    let mut h = harness(c);
    let mut a = h.send(pictured([1; 32]), 64);
    h.run_idle();
    let first = done(&events(&mut a)).clone();
    // Another prompt takes the one slot: the picture's entry spills.
    let mut b = h.submit_tokens(&(30..60).collect::<Vec<_>>(), 2, "b");
    h.run_idle();
    events(&mut b);
    assert_eq!(h.stats.borrow().prefix_spills, 1);
    let mut again = h.send(pictured([1; 32]), 64);
    h.run_idle();
    let f = done(&events(&mut again)).clone();
    assert_eq!(h.owner.rt.restores, 1);
    assert_eq!(f.cached_tokens, 19, "restored through the picture");
    assert_eq!(f.output_tokens, first.output_tokens);
    // Another picture: the tier offers only the text before it, too short
    // to restore (8 tokens past the slots' offer): computed.
    let mut other = h.send(pictured([2; 32]), 64);
    h.run_idle();
    let g = done(&events(&mut other)).clone();
    assert!(g.cached_tokens <= 10, "{}", g.cached_tokens);
    h.assert_idle_cached();
}
