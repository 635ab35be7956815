//! Audio clips into mono samples at the projector's rate: WAV (hound),
//! MP3 and FLAC (symphonia), each clip's length checked against
//! `--media-max-audio-seconds` from its header where the header says it,
//! and while decoding in any case (decoding stops at the limit), then
//! mixed to mono and resampled (linear).

use std::io::Cursor;

use steward_engine::model::mtmd::Media;

/// An audio clip (`wav`, `mp3` or `flac`) into mono samples at `rate`,
/// at most `max_seconds` long.
pub fn decode_audio(
    bytes: &[u8],
    format: &str,
    rate: u32,
    max_seconds: f64,
) -> Result<Media, String> {
    let (mono, from) = match format {
        "wav" => wav(bytes, max_seconds)?,
        "mp3" | "flac" => compressed(bytes, format, max_seconds)?,
        other => {
            return Err(format!(
                "`{other}` audio is not supported; send wav, mp3 or flac"
            ))
        }
    };
    if mono.is_empty() {
        return Err("the clip holds no samples".into());
    }
    Ok(Media::Audio {
        samples: resample(&mono, from, rate),
    })
}

fn too_long(seconds: f64, max_seconds: f64) -> String {
    format!("the clip is {seconds:.1} s; the limit is {max_seconds} s (--media-max-audio-seconds)")
}

/// Interleaved frames averaged to one channel.
fn mix(interleaved: &[f32], channels: usize) -> impl Iterator<Item = f32> + '_ {
    interleaved
        .chunks(channels.max(1))
        .map(|c| c.iter().sum::<f32>() / c.len() as f32)
}

/// A WAV file's mono samples and rate, its length from the header first.
fn wav(bytes: &[u8], max_seconds: f64) -> Result<(Vec<f32>, u32), String> {
    let reader = hound::WavReader::new(Cursor::new(bytes))
        .map_err(|e| format!("the WAV does not read ({e})"))?;
    let spec = reader.spec();
    if spec.sample_rate == 0 {
        return Err("the WAV's sample rate is 0".into());
    }
    let seconds = f64::from(reader.duration()) / f64::from(spec.sample_rate);
    if seconds > max_seconds {
        return Err(too_long(seconds, max_seconds));
    }
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => reader
            .into_samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the WAV does not decode ({e})"))?,
        (hound::SampleFormat::Int, bits @ 1..=32) => {
            let scale = 1.0 / (1u64 << (bits - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
                .map_err(|e| format!("the WAV does not decode ({e})"))?
        }
        (f, b) => return Err(format!("WAV samples of {b} bits ({f:?}) are not supported")),
    };
    let mono = mix(&interleaved, usize::from(spec.channels)).collect();
    Ok((mono, spec.sample_rate))
}

/// An MP3 or FLAC file's mono samples and rate (symphonia): refused from
/// the header when it states a length past the limit, and stopped once
/// the decoded length passes it.
fn compressed(bytes: &[u8], format: &str, max_seconds: f64) -> Result<(Vec<f32>, u32), String> {
    use symphonia::core::audio::SampleBuffer;
    use symphonia::core::errors::Error;
    let bad = |e: Error| format!("the {format} does not decode ({e})");
    let source = symphonia::core::io::MediaSourceStream::new(
        Box::new(Cursor::new(bytes.to_vec())),
        Default::default(),
    );
    let mut hint = symphonia::core::probe::Hint::new();
    hint.with_extension(format);
    let probed = symphonia::default::get_probe()
        .format(&hint, source, &Default::default(), &Default::default())
        .map_err(bad)?;
    let mut reader = probed.format;
    let track = reader
        .default_track()
        .ok_or_else(|| format!("the {format} holds no audio track"))?;
    let params = track.codec_params.clone();
    let id = track.id;
    let rate = params
        .sample_rate
        .filter(|&r| r > 0)
        .ok_or_else(|| format!("the {format} states no sample rate"))?;
    if let Some(n) = params.n_frames {
        let seconds = n as f64 / f64::from(rate);
        if seconds > max_seconds {
            return Err(too_long(seconds, max_seconds));
        }
    }
    let max_frames = (max_seconds * f64::from(rate)) as usize;
    let mut decoder = symphonia::default::get_codecs()
        .make(&params, &Default::default())
        .map_err(bad)?;
    let mut mono = Vec::new();
    loop {
        let packet = match reader.next_packet() {
            Ok(p) => p,
            Err(Error::IoError(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(bad(e)),
        };
        if packet.track_id() != id {
            continue;
        }
        let decoded = match decoder.decode(&packet) {
            Ok(d) => d,
            // A damaged frame is skipped, as players do.
            Err(Error::DecodeError(_)) => continue,
            Err(e) => return Err(bad(e)),
        };
        let spec = *decoded.spec();
        let mut buf = SampleBuffer::<f32>::new(decoded.capacity() as u64, spec);
        buf.copy_interleaved_ref(decoded);
        mono.extend(mix(buf.samples(), spec.channels.count()));
        if mono.len() > max_frames {
            return Err(too_long(mono.len() as f64 / f64::from(rate), max_seconds));
        }
    }
    Ok((mono, rate))
}

/// Linear resampling from `from` to `to` samples per second.
pub fn resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || x.len() < 2 {
        return x.to_vec();
    }
    let n = ((x.len() as u64 * u64::from(to)) / u64::from(from)).max(1) as usize;
    let step = f64::from(from) / f64::from(to);
    (0..n)
        .map(|i| {
            let t = i as f64 * step;
            let j = (t as usize).min(x.len() - 1);
            let k = (j + 1).min(x.len() - 1);
            let f = (t - j as f64) as f32;
            x[j] * (1.0 - f) + x[k] * f
        })
        .collect()
}
