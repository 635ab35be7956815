//! The streaming detokenizer with stop strings: tokens of arbitrary bytes
//! (split at 0xFF), stop strings from the input's first line. Never panics,
//! never emits a stop string, and what it emits is a prefix of the text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_engine::detok::StreamDetokenizer;

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&[][..], data),
    };
    let stops: Vec<String> = String::from_utf8_lossy(head)
        .split('|')
        .filter(|s| !s.is_empty())
        .take(4)
        .map(str::to_string)
        .collect();
    let mut d = StreamDetokenizer::new(stops.clone());
    let mut out = String::new();
    let mut stopped = false;
    for tok in body.split(|&b| b == 0xFF) {
        let o = d.push(tok);
        out.push_str(&o.text);
        if o.stopped {
            stopped = true;
            break;
        }
    }
    if !stopped {
        out.push_str(&d.finish().text);
    }
    for s in &stops {
        assert!(!out.contains(s.as_str()), "emitted stop {s:?}: {out:?}");
    }
    let all = String::from_utf8_lossy(
        &body
            .iter()
            .copied()
            .filter(|&b| b != 0xFF)
            .collect::<Vec<_>>(),
    )
    .into_owned();
    if !all.contains('\u{FFFD}') {
        assert!(all.starts_with(&out), "{out:?} not a prefix of {all:?}");
    }
});
