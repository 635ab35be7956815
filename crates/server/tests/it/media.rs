//! Images and audio through the APIs: a model without a projector refuses
//! media parts by name; with the generated projector
//! (`target/mmproj/gemma3.gguf`, random weights: the path and the
//! arithmetic, not the meaning) a picture counts in the usage, the hostile
//! files of issue 40 are each a 400 naming the part, URLs follow the
//! allowlist and never cross hosts, and the ledger is back at idle after.

use std::io::Cursor;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::common::{self, fixture, Server, HANG_GUARD};

const MAKE: &str =
    "target/pyenv/bin/python scripts/gen-random-mmproj.py --kind gemma3 --out target/mmproj/gemma3.gguf";

fn projector() -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    fixture(root.join("target/mmproj/gemma3.gguf"), MAKE)
}

fn png(w: u32, h: u32, seed: u8) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([x as u8 ^ seed, y as u8, (x + y) as u8])
    });
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

fn encoded(f: image::ImageFormat) -> Vec<u8> {
    let img = image::RgbImage::from_fn(64, 64, |x, y| {
        image::Rgb([(x * 7 + y * 3) as u8, (x * y) as u8, (x ^ y) as u8 * 4])
    });
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, f).unwrap();
    out.into_inner()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn data_uri(mime: &str, bytes: &[u8]) -> String {
    format!("data:{mime};base64,{}", b64(bytes))
}

/// A chat body: text then the given parts, in one user message.
fn chat(parts: Vec<Value>) -> String {
    let mut content = vec![json!({"type": "text", "text": "Describe: "})];
    content.extend(parts);
    json!({"model": "smol", "max_tokens": 2, "temperature": 0,
           "messages": [{"role": "user", "content": content}]})
    .to_string()
}

fn image_part(url: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": url}})
}

/// A 400 whose message starts with the part's label and says `why`.
fn assert_refused(status: u16, v: &Value, label: &str, why: &str) {
    assert_eq!(status, 400, "{v}");
    let m = v["error"]["message"].as_str().unwrap_or_default();
    assert!(
        m.starts_with(&format!("{label}: ")) && m.contains(why),
        "{v}"
    );
    assert_eq!(v["error"]["param"], json!(label), "{v}");
}

/// The ledger back at idle: no live state, no reserved growth.
async fn ledger_idle(s: &Server) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let l = s.get_json("/debug/ledger").await;
        if l["live_state"] == json!(0) && l["reserved_growth"] == json!(0) {
            return;
        }
        assert!(Instant::now() < deadline, "the ledger stays busy: {l}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_text_model_refuses_media_parts_by_name() {
    let s = common::server().await;
    let img = data_uri("image/png", &png(8, 8, 0));
    let (st, _, v) = s
        .post("/v1/chat/completions", &chat(vec![image_part(&img)]))
        .await;
    assert_refused(
        st,
        &v,
        "messages[0].content[1]",
        "this model takes no images",
    );
    let audio =
        json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}});
    let (st, _, v) = s.post("/v1/chat/completions", &chat(vec![audio])).await;
    assert_refused(
        st,
        &v,
        "messages[0].content[1]",
        "this model takes no audio",
    );
    // Checked while the body is read, before the model: URLs off, the count.
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat(vec![image_part("https://example.com/a.png")]),
        )
        .await;
    assert_refused(st, &v, "messages[0].content[1]", "image URLs are off");
    let many = (0..100)
        .map(|_| image_part("data:image/png;base64,AAAA"))
        .collect();
    let (st, _, v) = s.post("/v1/chat/completions", &chat(many)).await;
    assert_refused(st, &v, "messages[0].content[17]", "--media-max-parts");
    // Anthropic's shape, and the Responses API's.
    let body = json!({"model": "smol", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png(8, 8, 0))}}]}]});
    let (st, _, v) = s.post("/v1/messages", &body.to_string()).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("takes no images"),
        "{v}"
    );
    let body = json!({"model": "smol", "max_output_tokens": 2, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": img}]}]});
    let (st, _, v) = s.post("/v1/responses", &body.to_string()).await;
    assert_refused(st, &v, "messages[0].content[1]", "takes no images");
    let m = s.get_json("/v1/models").await;
    assert_eq!(m["data"][0]["modalities"], json!(["text"]), "{m}");
    ledger_idle(&s).await;
}

/// A server on the default model with the generated projector.
async fn vision_server(opts: steward_server::ServerOptions) -> Option<Server> {
    let p = projector()?;
    Some(common::server_opts(move |c| c.model.mmproj = Some(p), opts, Default::default()).await)
}

#[tokio::test]
async fn a_picture_counts_in_usage_and_the_introspection_routes() {
    let Some(s) = vision_server(Default::default()).await else {
        return;
    };
    let m = s.get_json("/v1/models").await;
    assert_eq!(m["data"][0]["modalities"], json!(["text", "image"]), "{m}");
    let img = data_uri("image/png", &png(64, 64, 1));
    let body = chat(vec![image_part(&img)]);
    let (st, _, v) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let u = &v["usage"];
    let image_tokens = u["prompt_tokens_details"]["image_tokens"].as_u64().unwrap();
    assert!(image_tokens > 0, "{v}");
    // The same request again: the picture from the encoder cache.
    let (st, _, v2) = s.post("/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v2}");
    assert_eq!(v2["usage"]["prompt_tokens"], u["prompt_tokens"], "{v2}");
    assert!(s.metric("steward_media_encodes_total").await >= 1.0);
    assert!(s.metric("steward_media_cache_hits_total").await >= 1.0);
    // The template shows the marker; render and count_tokens count the rows.
    let (st, _, t) = s.post("/apply-template", &body).await;
    assert_eq!(st, 200, "{t}");
    assert!(t["prompt"].as_str().unwrap().contains("<__media__>"), "{t}");
    let (st, _, r) = s.post("/v1/chat/completions/render", &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["num_tokens"], u["prompt_tokens"], "{r}");
    assert_eq!(r["image_tokens"].as_u64(), Some(image_tokens), "{r}");
    let (st, _, k) = s.post("/tokenize", &body).await;
    assert_eq!(st, 200, "{k}");
    assert_eq!(k["count"], u["prompt_tokens"], "{k}");
    assert_eq!(k["image_tokens"].as_u64(), Some(image_tokens), "{k}");
    let count = json!({"model": "smol", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Describe: "},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&png(64, 64, 1))}}]}]});
    let (st, _, c) = s
        .post("/v1/messages/count_tokens", &count.to_string())
        .await;
    assert_eq!(st, 200, "{c}");
    assert!(c["input_tokens"].as_u64().unwrap() > image_tokens, "{c}");
    // Through Anthropic Messages and Responses: served.
    let mut msg = count.clone();
    msg["max_tokens"] = json!(2);
    let (st, _, a) = s.post("/v1/messages", &msg.to_string()).await;
    assert_eq!(st, 200, "{a}");
    let body = json!({"model": "smol", "max_output_tokens": 2, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Describe: "}, {"type": "input_image", "image_url": img}]}]});
    let (st, _, r) = s.post("/v1/responses", &body.to_string()).await;
    assert_eq!(st, 200, "{r}");
    // No audio projector: an audio part is refused by name.
    let audio =
        json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}});
    let (st, _, v) = s.post("/v1/chat/completions", &chat(vec![audio])).await;
    assert_refused(
        st,
        &v,
        "messages[0].content[1]",
        "this model takes no audio",
    );
    ledger_idle(&s).await;
}

/// A PNG whose header says 50,000 x 50,000 (a few bytes of data).
fn png_bomb() -> Vec<u8> {
    let mut b = png(1, 1, 0);
    // IHDR's width and height sit at bytes 16..24; its CRC at 29..33.
    b[16..20].copy_from_slice(&50_000u32.to_be_bytes());
    b[20..24].copy_from_slice(&50_000u32.to_be_bytes());
    let crc = crc32(&b[12..29]);
    b[29..33].copy_from_slice(&crc.to_be_bytes());
    b
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &x in data {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn animated_gif() -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = image::codecs::gif::GifEncoder::new(&mut out);
        for v in [0u8, 255] {
            let f = image::RgbaImage::from_pixel(8, 8, image::Rgba([v, v, v, 255]));
            enc.encode_frame(image::Frame::new(f)).unwrap();
        }
    }
    out
}

#[tokio::test]
async fn hostile_media_are_each_a_400_naming_the_part() {
    let Some(s) = vision_server(Default::default()).await else {
        return;
    };
    let png_ok = encoded(image::ImageFormat::Png);
    let jpeg_ok = encoded(image::ImageFormat::Jpeg);
    let bomb = png_bomb();
    assert!(bomb.len() < 4096);
    let svg = br#"<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>"#;
    let cases: Vec<(String, &str)> = vec![
        (
            data_uri("image/png", &png_ok[..png_ok.len() / 2]),
            "does not decode",
        ),
        (
            data_uri("image/jpeg", &jpeg_ok[..jpeg_ok.len() / 2]),
            "truncated",
        ),
        (data_uri("image/png", &bomb), "--media-max-pixels"),
        (
            data_uri("image/png", b"%PDF-1.4 not a picture at all"),
            "not an image",
        ),
        (data_uri("image/gif", &animated_gif()), "animated"),
        (data_uri("image/svg+xml", svg), "SVG"),
        (data_uri("image/png", svg), "SVG"),
        ("data:image/png;base64,@@@@".into(), "not valid base64"),
        ("https://example.com/a.png".into(), "image URLs are off"),
    ];
    for (url, why) in &cases {
        let body = chat(vec![
            image_part(&data_uri("image/png", &png_ok)),
            image_part(url),
        ]);
        let (st, _, v) = s.post("/v1/chat/completions", &body).await;
        assert_refused(st, &v, "messages[0].content[2]", why);
    }
    let many = (0..100)
        .map(|_| image_part(&data_uri("image/png", &png_ok)))
        .collect();
    let (st, _, v) = s.post("/v1/chat/completions", &chat(many)).await;
    assert_refused(st, &v, "messages[0].content[17]", "--media-max-parts");
    // Anthropic's shape for one of them.
    let body = json!({"model": "smol", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&bomb)}}]}]});
    let (st, _, v) = s.post("/v1/messages", &body.to_string()).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--media-max-pixels"),
        "{v}"
    );
    // The server still serves, and holds nothing for the refused requests.
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat(vec![image_part(&data_uri("image/png", &png_ok))]),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    ledger_idle(&s).await;
}

/// A tiny HTTP server: `/img.png` (a picture), `/big` (past the cap),
/// `/away` (302 to the same port under another host name).
async fn origin(png: Vec<u8>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                return;
            };
            let png = png.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (head, body): (String, Vec<u8>) = match path.as_str() {
                    "/img.png" => ("200 OK\r\ncontent-type: image/png".into(), png),
                    "/big" => (
                        "200 OK\r\ncontent-type: image/png".into(),
                        vec![7u8; 3 << 20],
                    ),
                    "/away" => (
                        format!("302 Found\r\nlocation: http://localhost:{port}/img.png"),
                        Vec::new(),
                    ),
                    "/here" => ("302 Found\r\nlocation: /img.png".into(), Vec::new()),
                    _ => ("404 Not Found".into(), Vec::new()),
                };
                let head = format!(
                    "HTTP/1.1 {head}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(&body).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn urls_follow_the_allowlist_and_never_cross_hosts() {
    let mut opts = steward_server::ServerOptions::default();
    opts.limits.media.url_hosts = Some(vec!["127.0.0.1".into(), "localhost".into()]);
    opts.limits.media.max_part_bytes = 1 << 20;
    let Some(s) = vision_server(opts).await else {
        return;
    };
    let port = origin(encoded(image::ImageFormat::Png)).await;
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat(vec![image_part(&url("/img.png"))]),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(
        v["usage"]["prompt_tokens_details"]["image_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    // A redirect within the host is followed.
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat(vec![image_part(&url("/here"))]),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    for (u, why) in [
        (url("/away"), "another host"),
        (url("/big"), "larger than"),
        (url("/missing"), "404"),
        (
            "http://example.com/x.png".to_string(),
            "not in --media-url-hosts",
        ),
    ] {
        let (st, _, v) = s
            .post("/v1/chat/completions", &chat(vec![image_part(&u)]))
            .await;
        assert_refused(st, &v, "messages[0].content[1]", why);
    }
    ledger_idle(&s).await;
}

fn wav(seconds: f32, rate: u32) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for i in 0..(seconds * rate as f32) as usize {
        let v = ((i as f32 * 0.05).sin() * 8000.0) as i16;
        w.write_sample(v).unwrap();
        w.write_sample(-v / 2).unwrap();
    }
    w.finalize().unwrap();
    out.into_inner()
}

#[tokio::test]
async fn an_audio_projector_takes_wav_clips() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let make = "target/pyenv/bin/python scripts/gen-random-mmproj.py --kind ultravox --out target/mmproj/ultravox.gguf";
    let Some(p) = fixture(root.join("target/mmproj/ultravox.gguf"), make) else {
        return;
    };
    let mut opts = steward_server::ServerOptions::default();
    opts.limits.media.max_audio_seconds = 5.0;
    let s = common::server_opts(move |c| c.model.mmproj = Some(p), opts, Default::default()).await;
    let m = s.get_json("/v1/models").await;
    assert_eq!(m["data"][0]["modalities"], json!(["text", "audio"]), "{m}");
    let clip = |bytes: &[u8], format: &str| json!({"type": "input_audio", "input_audio": {"data": b64(bytes), "format": format}});
    let (st, _, v) = s
        .post(
            "/v1/chat/completions",
            &chat(vec![clip(&wav(1.0, 44_100), "wav")]),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let d = &v["usage"]["prompt_tokens_details"];
    assert!(d["audio_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(d.get("image_tokens").is_none(), "{v}");
    for (part, why) in [
        (clip(&wav(6.0, 8_000), "wav"), "--media-max-audio-seconds"),
        (clip(b"ID3 not really", "mp3"), "mp3"),
        (clip(b"RIFF....WAVEjunk", "wav"), "WAV"),
        (
            image_part(&data_uri("image/png", &png(8, 8, 0))),
            "this model takes no images",
        ),
    ] {
        let (st, _, v) = s.post("/v1/chat/completions", &chat(vec![part])).await;
        assert_refused(st, &v, "messages[0].content[1]", why);
    }
    ledger_idle(&s).await;
}
