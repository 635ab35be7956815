//! Priorities, fair share and preemption through the real runtime (the
//! default model): a priority-0 request arriving while 32 priority-5
//! streams hold every slot gets its first token in one step plus its
//! prefill, and every stream it preempted (its state saved to host memory
//! and restored through llama.cpp) finishes with the output of its solo
//! run (the near-tie rule: other batch shapes); under `--fair-share` a
//! light key's first token waits no more steps beside a heavy key's 24
//! streams than alone, and the steps its requests interrupt lose nothing.
//! Assertions are on step counts and counters, never on time.

use crate::common;

use std::sync::Arc;

use common::wait_for;
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::{
    EngineConfig, EngineHandle, Finished, GenerateRequest, RequestStream, SchedulingPolicy,
    Tenancy, TokenId,
};

async fn engine(slots: usize, f: impl FnOnce(&mut EngineConfig)) -> EngineHandle {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.n_threads = 1;
    c.model.n_threads_batch = 1;
    c.admit.max_seqs = slots;
    c.admit.ctx_per_seq = 256;
    c.admit.max_waiting = 64;
    c.step.prompt_budget = 256;
    c.step.max_prefill_seqs = 8;
    // Solo runs and preempted ones compute every token (no reuse).
    c.admit.prefix_cache = false;
    c.admit.prefix_host_bytes = 256 << 20;
    f(&mut c);
    common::start(c).await
}

async fn prompt(h: &EngineHandle, i: usize) -> Vec<TokenId> {
    let text = format!("Tell me fact number {i} about the sea, in one line.");
    h.preparer()
        .chat(steward_engine::chat::ChatPrompt::new(vec![
            serde_json::json!({"role": "user", "content": text}),
        ]))
        .await
        .unwrap()
        .tokens
}

fn req(id: String, p: Vec<TokenId>, n: u32, tenant: &str, priority: i32) -> GenerateRequest {
    GenerateRequest {
        ignore_eos: true,
        logprobs: Some(2),
        tenancy: Tenancy {
            tenant: Arc::from(tenant),
            priority,
            ..Tenancy::default()
        },
        ..GenerateRequest::greedy(id, p, n)
    }
}

async fn finish(s: RequestStream) -> (Finished, Scored<TokenId>) {
    compare::collect_scored(s)
        .await
        .expect("finishes, never an error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_request_preempts_and_every_victim_matches_its_solo_run() {
    let h = engine(32, |c| c.admit.policy = SchedulingPolicy::Priority).await;
    let mut reqs = Vec::new();
    for i in 0..32 {
        reqs.push(req(format!("bulk{i}"), prompt(&h, i).await, 40, "", 5));
    }
    let streams: Vec<RequestStream> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
    wait_for(&h, "32 streams decoding", |s| {
        s.running == 32 && s.prefilling == 0
    })
    .await;
    let urgent = req("urgent".into(), prompt(&h, 99).await, 8, "", 0);
    let prefill_steps = urgent.prompt.len().div_ceil(256) as u64;
    let (f, _) = finish(h.submit(urgent).unwrap()).await;
    assert!(
        f.wait_steps <= 1 + prefill_steps,
        "first token after {} steps (one step plus {prefill_steps} of prefill)",
        f.wait_steps
    );
    let mut victims = Vec::new();
    for (r, s) in reqs.into_iter().zip(streams) {
        let (f, sc) = finish(s).await;
        assert_eq!(f.completion_tokens, 40, "{}", r.id);
        if f.preemptions > 0 {
            victims.push((r, sc));
        }
    }
    let st = h.stats();
    assert!(!victims.is_empty(), "a stream was preempted");
    assert_eq!(st.preempt_swapped as usize, victims.len());
    assert_eq!(
        (st.preempt_recomputed, st.preempt_recomputed_tokens),
        (0, 0)
    );
    assert_eq!(st.preempt_resumed, st.preempt_swapped);
    for (r, got) in victims {
        let id = r.id.clone();
        let (_, solo) = finish(h.submit(r).unwrap()).await;
        compare::assert_greedy_agree(&got.tokens, &solo, TIE_NATS, &id);
    }
    wait_for(&h, "everything released", |s| {
        s.running == 0 && s.kv_cells_reserved == 0 && s.preempted == 0 && s.preempted_bytes == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_fair_share_a_light_key_waits_no_more_steps_than_alone() {
    let h = engine(8, |c| c.admit.fair_share = true).await;
    let light = |i: usize, p: Vec<TokenId>| req(format!("light{i}"), p, 6, "light", 0);
    let alone = finish(h.submit(light(0, prompt(&h, 50).await)).unwrap())
        .await
        .0
        .wait_steps;
    let mut heavy = Vec::new();
    for i in 0..24 {
        let r = req(format!("heavy{i}"), prompt(&h, i).await, 24, "heavy", 0);
        heavy.push(h.submit(r).unwrap());
    }
    wait_for(&h, "the heavy key holds every slot", |s| {
        s.running == 8 && s.prefilling == 0
    })
    .await;
    // One light stream: each request after the last one's answer.
    for i in 1..=3 {
        let (f, _) = finish(h.submit(light(i, prompt(&h, 50 + i).await)).unwrap()).await;
        let bound = (alone as f64 * 1.5).floor() as u64;
        assert!(
            f.wait_steps <= bound.max(alone),
            "light request {i}: first token after {} steps, {alone} alone",
            f.wait_steps
        );
    }
    for s in heavy {
        assert_eq!(finish(s).await.0.completion_tokens, 24);
    }
    let st = h.stats();
    assert!(st.preempt_swapped >= 1, "the light key took a slot");
    assert_eq!(st.preempt_recomputed, 0);
}

/// Steps interrupted for a newcomer (llama.cpp's abort callback between
/// graph nodes, `owner/interrupt.rs`) lose nothing: a light key's requests
/// under `--fair-share` interrupt the heavy key's decoding steps, and every
/// heavy stream's output equals its solo run. The light key sends its next
/// request after each answer, while the heavy key's 4 streams decode; it
/// arrives inside a step nearly always (the owner's gap between steps is a
/// small part of its time), so some of up to 30 requests interrupt one
/// (each misses with p < 0.5: a false failure below 1e-9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupted_steps_lose_nothing() {
    let h = engine(8, |c| c.admit.fair_share = true).await;
    let mut reqs = Vec::new();
    for i in 0..4 {
        reqs.push(req(
            format!("heavy{i}"),
            prompt(&h, i).await,
            160,
            "heavy",
            0,
        ));
    }
    let streams: Vec<RequestStream> = reqs.iter().map(|r| h.submit(r.clone()).unwrap()).collect();
    wait_for(&h, "the heavy key decodes", |s| {
        s.running == 4 && s.prefilling == 0
    })
    .await;
    let light = prompt(&h, 77).await;
    for i in 0..30 {
        if h.stats().steps_interrupted >= 2 {
            break;
        }
        let r = req(format!("light{i}"), light.clone(), 4, "light", 0);
        let (f, _) = finish(h.submit(r).unwrap()).await;
        assert_eq!(f.completion_tokens, 4);
    }
    let st = h.stats();
    assert!(st.steps_interrupted >= 1, "no step was interrupted");
    for (r, s) in reqs.into_iter().zip(streams) {
        let (f, got) = finish(s).await;
        assert_eq!(f.completion_tokens, 160, "{}", r.id);
        let id = r.id.clone();
        let (_, solo) = finish(h.submit(r).unwrap()).await;
        compare::assert_greedy_agree(&got.tokens, &solo, TIE_NATS, &id);
    }
    wait_for(&h, "everything released", |s| {
        s.running == 0 && s.kv_cells_reserved == 0
    })
    .await;
}
