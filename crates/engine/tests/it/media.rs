//! Images through the real runtime: the default model paired with a
//! random-weight `gemma3` projector (`scripts/gen-random-mmproj.py`), whose
//! output is noise; what these tests prove is the path, the cache and the
//! arithmetic. The same image gives the same output (exactly when computed
//! alone in the same shapes; through the near-tie rule from the cache), a
//! different image changes it, a repeated conversation reuses its prefix
//! through the end of the image, and one with another image reuses exactly
//! the text before it. The encoder's cache skips a repeated picture.

use crate::common;

use std::sync::atomic::Ordering;

use sha2::{Digest, Sha256};
use steward_engine::chat::ChatPrompt;
use steward_engine::compare::{self, Scored, TIE_NATS};
use steward_engine::model::mtmd::Media;
use steward_engine::prepare::encoder::MediaInput;
use steward_engine::prepare::media::MEDIA_MARKER;
use steward_engine::request::MediaSpan;
use steward_engine::{EngineConfig, EngineHandle, Finished, GenerateRequest, TokenId};

/// `gemma3`: a non-causal span (4 rows); `mlp` (LLaVA's): a causal one (16).
fn projector(kind: &str) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    common::fixture(
        root.join(format!("target/mmproj/{kind}.gguf")),
        &format!("scripts/test-fixtures.sh (target/pyenv/bin/python scripts/gen-random-mmproj.py --kind {kind} --out target/mmproj/{kind}.gguf)"),
    )
}

async fn engine(mmproj: &std::path::Path, prefix_cache: bool) -> EngineHandle {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.mmproj = Some(mmproj.to_path_buf());
    c.model.n_threads = 1;
    c.model.n_threads_batch = 1;
    c.admit.max_seqs = 2;
    c.admit.ctx_per_seq = 512;
    c.step.prompt_budget = 64;
    c.admit.prefix_cache = prefix_cache;
    common::start(c).await
}

/// A deterministic picture: a gradient whose phase is `seed`.
fn picture(nx: u32, ny: u32, seed: u32) -> MediaInput {
    let mut rgb = Vec::with_capacity((nx * ny * 3) as usize);
    for y in 0..ny {
        for x in 0..nx {
            let v = |k: u32| ((x * (3 + k) + y * (5 + 2 * k) + seed * 37 * (k + 1)) % 256) as u8;
            rgb.extend([v(0), v(1), v(2)]);
        }
    }
    MediaInput {
        label: format!("picture {seed}"),
        hash: Sha256::digest(&rgb).into(),
        media: Media::Image { nx, ny, rgb },
    }
}

/// A chat asking about one picture (after `turns` of earlier messages).
async fn prompt(
    h: &EngineHandle,
    pic: MediaInput,
    turns: &[(&str, &str)],
) -> (Vec<TokenId>, Vec<MediaSpan>) {
    let mut m = vec![serde_json::json!({
        "role": "user",
        "content": format!("Look at this picture.\n{MEDIA_MARKER}\nWhat is in it?")
    })];
    for (role, text) in turns {
        m.push(serde_json::json!({"role": role, "content": text}));
    }
    let mut p = ChatPrompt::new(m);
    p.media = vec![pic];
    let t = h.preparer().chat(p).await.expect("prepared");
    (t.tokens, t.media)
}

async fn run(
    h: &EngineHandle,
    (tokens, media): (Vec<TokenId>, Vec<MediaSpan>),
) -> (Finished, Scored<TokenId>) {
    let r = GenerateRequest {
        ignore_eos: true,
        logprobs: Some(3),
        media,
        ..GenerateRequest::greedy("m", tokens, 8)
    };
    compare::collect_scored(h.submit(r).unwrap())
        .await
        .expect("the request ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_causal_span_the_same_picture_the_same_output_and_the_cache_reuses_it_whole() {
    same_picture("gemma3", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_causal_span_the_same_picture_the_same_output_and_the_cache_reuses_it_whole() {
    same_picture("mlp", false).await;
}

async fn same_picture(kind: &str, non_causal: bool) {
    let Some(proj) = projector(kind) else { return };
    let plain = engine(&proj, false).await;
    let enc = plain
        .preparer()
        .encoder()
        .expect("an encoder")
        .counters
        .clone();
    let a = prompt(&plain, picture(64, 64, 1), &[]).await;
    let span = a.1[0].clone();
    assert!(span.len > 0 && span.start > 0);
    assert_eq!(span.non_causal, non_causal);
    assert!(a.0[span.start..span.start + span.len]
        .iter()
        .all(|&t| t < 0));
    // Alone, in the same shapes, without a cache: exactly the same.
    let (f1, s1) = run(&plain, a.clone()).await;
    let (f2, s2) = run(&plain, prompt(&plain, picture(64, 64, 1), &[]).await).await;
    assert_eq!(f1.output_tokens, f2.output_tokens);
    assert_eq!(s1, s2, "logprobs of the same picture twice");
    assert_eq!(
        f1.prompt_tokens as usize,
        a.0.len(),
        "image rows count as prompt"
    );
    // The second prompt's picture came from the encoder's cache.
    assert_eq!(enc.encodes.load(Ordering::Relaxed), 1);
    assert_eq!(enc.cache_hits.load(Ordering::Relaxed), 1);

    // Another picture: the same text, other rows, another output.
    let b = prompt(&plain, picture(64, 64, 2), &[]).await;
    assert_eq!(b.0.len(), a.0.len());
    assert_eq!(b.0[..span.start], a.0[..span.start]);
    assert_ne!(b.0[span.start], a.0[span.start]);
    let (_, sb) = run(&plain, b.clone()).await;
    let moved = (s1.top[0][0].1 - sb.top[0][0].1).abs();
    assert!(
        s1.top[0] != sb.top[0] && (moved > 1e-4 || s1.top[0][0].0 != sb.top[0][0].0),
        "a different picture left the first logprobs as they were: {:?} {:?}",
        s1.top[0],
        sb.top[0]
    );
    // Another size: the projector resizes it; its own hash, its own rows.
    let c = prompt(&plain, picture(200, 120, 1), &[]).await;
    assert_ne!(c.0[span.start], a.0[span.start]);
    drop(plain);

    let cached = engine(&proj, true).await;
    let (g1, _) = run(&cached, a.clone()).await;
    assert_eq!(g1.cached_tokens, 0, "cold cache");
    assert_eq!(
        g1.output_tokens, f1.output_tokens,
        "a cold cache computes as none"
    );
    // The same conversation again: reused through the end of the picture.
    let (g2, _) = run(&cached, a.clone()).await;
    assert_eq!(g2.cached_tokens as usize, a.0.len() - 1);
    compare::assert_greedy_agree(&g2.output_tokens, &s1, TIE_NATS, "the same picture, cached");
    // Its next turn reuses the first turn, picture included.
    let turns = [("assistant", "Colours."), ("user", "Which ones?")];
    let next = prompt(&cached, picture(64, 64, 1), &turns).await;
    let (g3, _) = run(&cached, next.clone()).await;
    assert!(
        g3.cached_tokens as usize >= span.start + span.len,
        "{} cached, the picture ends at {}",
        g3.cached_tokens,
        span.start + span.len
    );
    // Another picture in the same place: exactly the text before it.
    let (g4, sb_cached) = run(&cached, b).await;
    assert_eq!(g4.cached_tokens as usize, span.start);
    compare::assert_greedy_agree(&g4.output_tokens, &sb, TIE_NATS, "another picture");
    let _ = sb_cached;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_a_projector_refuses_media_naming_the_part() {
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.n_threads = 1;
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = 256;
    let h = common::start(c).await;
    let mut p = ChatPrompt::new(vec![serde_json::json!({
        "role": "user", "content": format!("{MEDIA_MARKER} hi")
    })]);
    p.media = vec![picture(8, 8, 3)];
    let e = h.preparer().chat(p).await.unwrap_err();
    assert!(
        e.to_string().contains("picture 3") && e.to_string().contains("no media"),
        "{e}"
    );
}

/// Two seconds of a tone at the projector's rate (padded to a 30 s chunk).
fn tone(rate: u32, hz: f32) -> MediaInput {
    let samples: Vec<f32> = (0..rate * 2)
        .map(|i| 0.3 * (i as f32 * hz * std::f32::consts::TAU / rate as f32).sin())
        .collect();
    let bytes: Vec<u8> = samples.iter().flat_map(|s| s.to_le_bytes()).collect();
    MediaInput {
        label: format!("tone {hz}"),
        hash: Sha256::digest(&bytes).into(),
        media: Media::Audio { samples },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_through_an_ultravox_projector_the_same_clip_the_same_output() {
    let Some(proj) = projector("ultravox") else {
        return;
    };
    let h = engine(&proj, false).await;
    let info = h.preparer().encoder().expect("an encoder").info.clone();
    assert!(info.audio && !info.vision, "{info:?}");
    let rate = info.audio_rate.expect("an audio rate");
    let (a1, a2, b) = (
        prompt(&h, tone(rate, 440.0), &[]).await,
        prompt(&h, tone(rate, 440.0), &[]).await,
        prompt(&h, tone(rate, 660.0), &[]).await,
    );
    assert_eq!(a1.1.len(), 1);
    assert!(!a1.1[0].non_causal);
    assert_eq!(a1.0, a2.0);
    assert_ne!(a1.0[a1.1[0].start], b.0[b.1[0].start]);
    let (f1, s1) = run(&h, a1).await;
    let (f2, s2) = run(&h, a2).await;
    assert_eq!((f1.output_tokens, s1), (f2.output_tokens, s2));
}

#[test]
fn a_projector_for_another_model_is_a_one_line_startup_error() {
    let Some(proj) = projector("gemma3-960") else {
        return;
    };
    let path = steward_engine::fetch::ensure_default_model().expect("default model");
    let mut c = EngineConfig::new(path);
    c.model.mmproj = Some(proj);
    c.admit.max_seqs = 1;
    c.admit.ctx_per_seq = 256;
    let e = match steward_engine::Engine::start(c) {
        Ok(_) => panic!("a 960-wide projector loaded against a 576-wide model"),
        Err(e) => e.to_string(),
    };
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(e.contains("gemma3-960.gguf") && e.contains("576"), "{e}");
}
