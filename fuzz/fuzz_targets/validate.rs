//! Request validation: any body, either endpoint. Never panics; every
//! refusal is a 4xx naming what is wrong; an accepted request is within
//! every limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use steward_server::validate::{chat, completion, Limits};

fuzz_target!(|data: &[u8]| {
    let l = Limits::default();
    for r in [chat(data, 1, &l), completion(data, 1, 49_152, &l)] {
        match r {
            Err(e) => {
                assert!(e.status.is_client_error(), "{e:?}");
                assert!(!e.message.is_empty());
            }
            Ok((spec, _)) => {
                assert!(spec.n >= 1 && spec.n <= l.max_n);
                assert!(spec.stop.len() <= l.max_stop);
                assert!(spec.stop.iter().all(|s| s.len() <= l.max_stop_bytes));
                assert!(spec
                    .timeout_s
                    .is_none_or(|t| t > 0.0 && t <= l.max_timeout_s));
                assert!(spec.sampling.temperature.is_finite());
            }
        }
    }
});
