//! The decoder and the collector against files made here with the image
//! crate's encoders (and hostile ones written by hand).

use std::io::Cursor;

use image::{ImageFormat, Rgb, RgbImage};

use super::*;

fn picture(w: u32, h: u32) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| Rgb([x as u8, y as u8, (x ^ y) as u8]))
}

fn encoded(img: &RgbImage, f: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, f).unwrap();
    out.into_inner()
}

fn limits() -> MediaLimits {
    MediaLimits::default()
}

fn decode(bytes: &[u8]) -> Result<Media, String> {
    decode_image(bytes, &limits(), u64::MAX)
}

#[test]
fn png_jpeg_gif_webp_decode_to_rgb() {
    let img = picture(37, 21);
    for f in [
        ImageFormat::Png,
        ImageFormat::Jpeg,
        ImageFormat::Gif,
        ImageFormat::WebP,
    ] {
        let m = decode(&encoded(&img, f)).unwrap_or_else(|e| panic!("{f:?}: {e}"));
        let Media::Image { nx, ny, rgb } = m else {
            panic!("not an image")
        };
        assert_eq!((nx, ny, rgb.len()), (37, 21, 37 * 21 * 3), "{f:?}");
        if f == ImageFormat::Png {
            assert_eq!(rgb, img.clone().into_raw(), "PNG is lossless");
        }
    }
}

#[test]
fn truncated_files_are_refused() {
    let img = picture(64, 64);
    for f in [ImageFormat::Png, ImageFormat::Jpeg] {
        let b = encoded(&img, f);
        let e = decode(&b[..b.len() * 2 / 3]).unwrap_err();
        assert!(
            e.contains("truncated") || e.contains("does not decode"),
            "{f:?}: {e}"
        );
    }
}

/// A PNG whose header says 50,000 x 50,000 and whose data is a few bytes:
/// refused from the header, before any decoding.
pub fn png_bomb() -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut c = kind.to_vec();
        c.extend_from_slice(data);
        out.extend_from_slice(&c);
        out.extend_from_slice(&crc32(&c).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&50_000u32.to_be_bytes());
    ihdr.extend_from_slice(&50_000u32.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    // A zlib stream of zeros (stored, empty): a tiny IDAT.
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
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

#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    let b = png_bomb();
    assert!(b.len() < 100);
    let e = decode(&b).unwrap_err();
    assert!(
        e.contains("50000x50000") && e.contains("--media-max-pixels"),
        "{e}"
    );
    // Within the per-image limit but past what the request has left.
    let png = encoded(&picture(100, 100), ImageFormat::Png);
    let e = decode_image(&png, &limits(), 9_999).unwrap_err();
    assert!(e.contains("--media-max-request-pixels"), "{e}");
}

#[test]
fn non_images_svg_and_animations_are_refused() {
    let e = decode(b"hello, this is text and not a picture at all").unwrap_err();
    assert!(e.contains("not an image"), "{e}");
    let svg =
        br#"<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>"#;
    let e = decode(svg).unwrap_err();
    assert!(e.contains("SVG"), "{e}");
    let e = decode(b"<svg width='1' height='1'></svg>").unwrap_err();
    assert!(e.contains("SVG"), "{e}");
    // Two frames.
    let mut out = Vec::new();
    {
        let mut enc = image::codecs::gif::GifEncoder::new(&mut out);
        for v in [0u8, 255] {
            let f = image::RgbaImage::from_pixel(8, 8, image::Rgba([v, v, v, 255]));
            enc.encode_frame(image::Frame::new(f)).unwrap();
        }
    }
    let e = decode(&out).unwrap_err();
    assert!(e.contains("animated"), "{e}");
}

fn wav(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for &s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    out.into_inner()
}

#[test]
fn wav_is_mixed_to_mono_and_resampled() {
    // Stereo at 32 kHz, left +half, right -half: mono is silence.
    let samples: Vec<i16> = (0..3200).flat_map(|_| [16384i16, -16384]).collect();
    let Media::Audio { samples: out } =
        decode_audio(&wav(32_000, 2, &samples), "wav", 16_000, 60.0).unwrap()
    else {
        panic!("not audio")
    };
    assert_eq!(out.len(), 1600);
    assert!(out.iter().all(|s| s.abs() < 1e-6));
    let e = decode_audio(&wav(8_000, 1, &vec![0; 8_000 * 3]), "wav", 16_000, 2.0).unwrap_err();
    assert!(e.contains("--media-max-audio-seconds"), "{e}");
    let e = decode_audio(b"RIFF....nope", "wav", 16_000, 2.0).unwrap_err();
    assert!(e.contains("WAV"), "{e}");
    for f in ["mp3", "flac"] {
        let e = decode_audio(b"not a clip at all, just text", f, 16_000, 2.0).unwrap_err();
        assert!(e.contains(f) && e.contains("does not decode"), "{e}");
    }
    assert!(decode_audio(b"", "ogg", 16_000, 2.0)
        .unwrap_err()
        .contains("ogg"));
    assert_eq!(audio::resample(&[0.0, 1.0], 1, 2), vec![0.0, 0.5, 1.0, 1.0]);
}

#[test]
fn collector_counts_and_checks_before_decoding() {
    let mut l = limits();
    l.max_parts = 2;
    l.max_part_bytes = 30;
    let mut c = Collector::new(&l);
    c.image("m[0].c[0]".into(), "data:image/png;base64,AAAA".into())
        .unwrap();
    let e = c
        .image(
            "m[0].c[1]".into(),
            format!("data:image/png;base64,{}", "A".repeat(44)),
        )
        .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("m[0].c[1]"));
    assert!(
        e.message.contains("--media-max-part-bytes"),
        "{}",
        e.message
    );
    c.image("m[0].c[2]".into(), "data:;base64,AAAA".into())
        .unwrap();
    let e = c
        .image("m[0].c[3]".into(), "data:image/png;base64,AAAA".into())
        .unwrap_err();
    assert!(e.message.contains("--media-max-parts"), "{}", e.message);
    let mut c = Collector::new(&l);
    for (url, why) in [
        ("https://example.com/a.png", "image URLs are off"),
        ("data:image/svg+xml;base64,AAAA", "SVG"),
        ("data:text/plain;base64,AAAA", "not an image"),
        ("data:image/png,rawdata", "must be base64"),
        ("ftp://x/y.png", "not a data URI"),
    ] {
        let e = c.image("p".into(), url.into()).unwrap_err();
        assert!(
            e.message.starts_with("p: ") && e.message.contains(why),
            "{url}: {}",
            e.message
        );
    }
    let e = c
        .audio("a".into(), "AAAA".into(), "ogg".into())
        .unwrap_err();
    assert!(e.message.contains("wav, mp3 or flac"), "{}", e.message);
    l.url_hosts = Some(vec!["good.example".into()]);
    let mut c = Collector::new(&l);
    c.image("u".into(), "https://GOOD.example/x.png".into())
        .unwrap();
    let e = c
        .image("v".into(), "https://evil.example/x.png".into())
        .unwrap_err();
    assert!(
        e.message.contains("not in --media-url-hosts"),
        "{}",
        e.message
    );
}

#[test]
fn modality_is_checked_per_part() {
    let l = limits();
    let mut c = Collector::new(&l);
    c.image(
        "messages[0].content[1]".into(),
        "data:image/png;base64,AAAA".into(),
    )
    .unwrap();
    c.audio("messages[0].content[2]".into(), "AAAA".into(), "wav".into())
        .unwrap();
    let e = check_modality(&c.parts, None).unwrap_err();
    assert_eq!(
        e.message,
        "messages[0].content[1]: this model takes no images (it was served without --mmproj)"
    );
    let vision = ProjectorInfo {
        vision: true,
        audio: false,
        audio_rate: None,
        mrope: false,
        n_embd: 576,
    };
    let e = check_modality(&c.parts, Some(&vision)).unwrap_err();
    assert_eq!(
        e.message,
        "messages[0].content[2]: this model takes no audio"
    );
    assert_eq!(e.status.as_u16(), 400);
}

#[tokio::test]
async fn resolve_decodes_hashes_and_names_failures() {
    use base64::Engine as _;
    let l = limits();
    let png = encoded(&picture(5, 4), ImageFormat::Png);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    let mut c = Collector::new(&l);
    c.image("a".into(), format!("data:image/png;base64,{b64}"))
        .unwrap();
    c.image("b".into(), "data:image/png;base64,aGVsbG8=".into())
        .unwrap();
    let parts = std::mem::take(&mut c.parts);
    let e = resolve(parts, None, &l, &MediaCtx::default())
        .await
        .unwrap_err();
    assert_eq!(e.param.as_deref(), Some("b"));
    let mut c = Collector::new(&l);
    c.image("a".into(), format!("data:image/png;base64,{b64}"))
        .unwrap();
    let r = resolve(std::mem::take(&mut c.parts), None, &l, &MediaCtx::default())
        .await
        .unwrap();
    let want: [u8; 32] = sha2::Sha256::digest(&png).into();
    assert_eq!(r.inputs[0].hash, want);
    assert!(matches!(
        r.inputs[0].media,
        Media::Image { nx: 5, ny: 4, .. }
    ));
}

/// A FLAC file of verbatim frames (mono, 16 bits, 256-sample blocks),
/// written here: no encoder is at hand.
fn flac(rate: u32, samples: &[i16]) -> Vec<u8> {
    fn crc8(d: &[u8]) -> u8 {
        d.iter().fold(0u8, |mut c, &b| {
            c ^= b;
            for _ in 0..8 {
                c = if c & 0x80 != 0 {
                    (c << 1) ^ 0x07
                } else {
                    c << 1
                };
            }
            c
        })
    }
    fn crc16(d: &[u8]) -> u16 {
        d.iter().fold(0u16, |mut c, &b| {
            c ^= u16::from(b) << 8;
            for _ in 0..8 {
                c = if c & 0x8000 != 0 {
                    (c << 1) ^ 0x8005
                } else {
                    c << 1
                };
            }
            c
        })
    }
    let mut out = b"fLaC".to_vec();
    out.extend_from_slice(&[0x80, 0, 0, 34]);
    out.extend_from_slice(&256u16.to_be_bytes());
    out.extend_from_slice(&256u16.to_be_bytes());
    out.extend_from_slice(&[0; 6]);
    let packed = (u64::from(rate) << 44) | (15u64 << 36) | samples.len() as u64;
    out.extend_from_slice(&packed.to_be_bytes());
    out.extend_from_slice(&[0; 16]);
    for (i, block) in samples.chunks(256).enumerate() {
        assert!(i < 128);
        let mut f = vec![0xFF, 0xF8, 0x60, 0x08, i as u8, (block.len() - 1) as u8];
        f.push(crc8(&f));
        f.push(0x02);
        for s in block {
            f.extend_from_slice(&s.to_be_bytes());
        }
        let c = crc16(&f);
        f.extend_from_slice(&c.to_be_bytes());
        out.extend_from_slice(&f);
    }
    out
}

#[test]
fn flac_decodes_and_its_length_is_bounded() {
    let samples: Vec<i16> = (0..4096).map(|i| ((i % 64) * 256) as i16).collect();
    let Media::Audio { samples: out } =
        decode_audio(&flac(8_000, &samples), "flac", 16_000, 5.0).unwrap()
    else {
        panic!("not audio")
    };
    assert_eq!(out.len(), 8192);
    assert!((out[2] - 256.0 / 32768.0).abs() < 1e-6, "{:?}", &out[..4]);
    // 0.512 s against a 0.25 s limit: refused (from the header).
    let e = decode_audio(&flac(8_000, &samples), "flac", 16_000, 0.25).unwrap_err();
    assert!(e.contains("--media-max-audio-seconds"), "{e}");
}
