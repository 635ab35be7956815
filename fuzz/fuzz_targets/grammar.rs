//! Grammar and schema compilation under the request limits, on a thread
//! with the grammar pool's stack: never panics, never aborts (a stack
//! overflow would), whatever the text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_engine::constraint::{ConstraintCompiler, Grammar};
use steward_engine::model::Vocab;
use steward_server::validate::{check_grammar, Limits};

fn vocab() -> Vocab {
    let mut v = Vocab::default();
    for b in 0..=255u8 {
        v.token_bytes.push(vec![b].into_boxed_slice());
        v.token_text_special.push(vec![b].into_boxed_slice());
        v.eog.push(false);
    }
    for w in [
        "true", "false", "null", "\"a\"", "{\"", "\": ", ", ", "[", "]", "}",
    ] {
        v.token_bytes.push(w.as_bytes().into());
        v.token_text_special.push(w.as_bytes().into());
        v.eog.push(false);
    }
    v.token_bytes.push(Box::new([]));
    v.token_text_special.push(b"</s>".as_slice().into());
    v.eog.push(true);
    v.eog_ids = vec![v.eog.len() as i32 - 1];
    v
}

fuzz_target!(|data: &[u8]| {
    static CC: std::sync::OnceLock<ConstraintCompiler> = std::sync::OnceLock::new();
    let cc = CC.get_or_init(|| ConstraintCompiler::new(&vocab()).expect("compiler"));
    let text = String::from_utf8_lossy(data).into_owned();
    let g = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v @ serde_json::Value::Object(_)) => Grammar::JsonSchema(v),
        _ => Grammar::Lark(text),
    };
    if check_grammar(&g, "grammar", &Limits::default()).is_err() {
        return;
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(steward_engine::prepare::GRAMMAR_STACK)
            .spawn_scoped(s, || {
                let _ = cc.compile(&g);
            })
            .expect("thread")
            .join()
            .expect("no panic");
    });
});
