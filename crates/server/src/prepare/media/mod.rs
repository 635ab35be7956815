//! ① prepare — a request's images and audio clips. Reading the body
//! (`Collector`, called by `chat_input` for each media part) checks what
//! can be checked without the bytes: the part's shape, the count, the
//! encoded size, URLs off or an allowed host. `check_modality` refuses a
//! part the model cannot take. `resolve` then turns each part into the
//! engine's `MediaInput`, one part at a time, on blocking threads behind
//! a process-wide bound (`MediaCtx::decode`): base64 decoded (or the URL
//! fetched, `fetch.rs`), hashed (SHA-256 of the encoded file, as
//! llama-server does), the header read before any pixel is decoded, and
//! decoded within the limits (`decode.rs`).
//!
//! Every refusal is a 400 whose message and `param` name the part
//! (`messages[0].content[1]`). Nothing a client sends allocates past the
//! bounds in `MediaLimits` (docs/LIMITS.md, "Media").

mod audio;
mod decode;
mod fetch;

use std::sync::Arc;

use base64::Engine as _;
use sha2::Digest;
use steward_engine::model::mtmd::{Media, ProjectorInfo};
use steward_engine::prepare::encoder::MediaInput;
use tokio::sync::Semaphore;

pub use self::audio::decode_audio;
pub use self::decode::decode_image;
use crate::http::error::ApiError;

/// Bounds on the media a request carries (docs/LIMITS.md, "Media"). Past
/// each, a 400 naming the part and the flag.
#[derive(Debug, Clone)]
pub struct MediaLimits {
    /// `--media-max-parts`: image and audio parts per request.
    pub max_parts: usize,
    /// `--media-max-part-bytes`: one part's encoded file (after base64).
    pub max_part_bytes: usize,
    /// `--media-max-request-bytes`: every part's encoded files together.
    pub max_request_bytes: usize,
    /// `--media-max-pixels`: one image's pixels, read from its header
    /// before anything is decoded.
    pub max_pixels: u64,
    /// `--media-max-request-pixels`: every image's pixels together.
    pub max_request_pixels: u64,
    /// `--media-max-audio-seconds`: one clip's length, from its header.
    pub max_audio_seconds: f64,
    /// `--media-allow-url` with `--media-url-hosts`: the hosts `http(s)`
    /// media URLs may name (`None`: URLs are off; `*`: any host).
    pub url_hosts: Option<Vec<String>>,
    /// `--media-url-timeout-s`: a URL's whole fetch.
    pub url_timeout: std::time::Duration,
}

impl Default for MediaLimits {
    fn default() -> Self {
        MediaLimits {
            max_parts: 16,
            max_part_bytes: 16 << 20,
            max_request_bytes: 24 << 20,
            max_pixels: 4096 * 4096,
            max_request_pixels: 3 * 4096 * 4096,
            max_audio_seconds: 600.0,
            url_hosts: None,
            url_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// What a media part is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Image,
    Audio,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Image => "images",
            Kind::Audio => "audio",
        }
    }
}

/// Where a part's bytes are.
#[derive(Debug)]
enum Source {
    /// Base64 text from byte `at` of `text` (a data URI's payload, or an
    /// `input_audio` part's `data`), kept as the client sent it.
    Base64 { text: String, at: usize },
    /// An `http(s)` URL, on an allowed host.
    Url(String),
}

/// A media part as read from the body, not yet decoded.
#[derive(Debug)]
pub struct MediaPart {
    /// The request part (`messages[0].content[1]`).
    pub label: String,
    pub kind: Kind,
    /// Audio: `wav`, `mp3` or `flac`.
    format: Option<String>,
    source: Source,
}

/// A 400 naming the part (its label is the message's start and `param`).
pub fn refuse(label: &str, why: impl std::fmt::Display) -> ApiError {
    ApiError::invalid_value(format!("{label}: {why}"), label)
}

/// Media parts as `chat_input` reads them, counted against the limits.
pub struct Collector<'a> {
    limits: &'a MediaLimits,
    pub parts: Vec<MediaPart>,
    bytes: usize,
}

/// Bytes base64 text of `n` characters decodes to, at most.
fn decoded_len(n: usize) -> usize {
    n.div_ceil(4) * 3
}

impl<'a> Collector<'a> {
    pub fn new(limits: &'a MediaLimits) -> Self {
        Collector {
            limits,
            parts: Vec::new(),
            bytes: 0,
        }
    }

    /// Count one more part and its (estimated) encoded bytes.
    fn count(&mut self, label: &str, bytes: usize) -> Result<(), ApiError> {
        let l = self.limits;
        if self.parts.len() >= l.max_parts {
            return Err(refuse(
                label,
                format!(
                    "more than {} image and audio parts in one request (--media-max-parts)",
                    l.max_parts
                ),
            ));
        }
        if bytes > l.max_part_bytes {
            return Err(refuse(
                label,
                format!(
                    "the file is {bytes} bytes; the limit is {} per part (--media-max-part-bytes)",
                    l.max_part_bytes
                ),
            ));
        }
        self.bytes += bytes;
        if self.bytes > l.max_request_bytes {
            return Err(refuse(
                label,
                format!(
                    "the request's media come to more than {} bytes (--media-max-request-bytes)",
                    l.max_request_bytes
                ),
            ));
        }
        Ok(())
    }

    /// An `image_url` part's URL: a base64 `data:image/…` URI, or an
    /// `http(s)` URL where URLs are allowed.
    pub fn image(&mut self, label: String, url: String) -> Result<(), ApiError> {
        let source = if let Some(rest) = url.strip_prefix("data:") {
            let Some((head, _)) = rest.split_once(',') else {
                return Err(refuse(&label, "the data URI has no `,` before its data"));
            };
            let mut fields = head.split(';');
            let mime = fields.next().unwrap_or_default().to_ascii_lowercase();
            if !fields.any(|f| f.eq_ignore_ascii_case("base64")) {
                return Err(refuse(
                    &label,
                    "the data URI must be base64 (`data:image/png;base64,...`)",
                ));
            }
            if mime.starts_with("image/svg") {
                return Err(refuse(
                    &label,
                    "SVG images are not supported; send PNG, JPEG, WebP or GIF",
                ));
            }
            if !mime.is_empty() && !mime.starts_with("image/") {
                return Err(refuse(
                    &label,
                    format!("the data URI's type is `{mime}`, not an image"),
                ));
            }
            let at = "data:".len() + head.len() + 1;
            self.count(&label, decoded_len(url.len() - at))?;
            Source::Base64 { text: url, at }
        } else if url.starts_with("http://") || url.starts_with("https://") {
            self.url_allowed(&label, &url)?;
            self.count(&label, 0)?;
            Source::Url(url)
        } else {
            let shown: String = url.chars().take(32).collect();
            return Err(refuse(
                &label,
                format!("`{shown}` is not a data URI or an http(s) URL"),
            ));
        };
        self.parts.push(MediaPart {
            label,
            kind: Kind::Image,
            format: None,
            source,
        });
        Ok(())
    }

    /// An `input_audio` part: base64 `data` of a `wav`, `mp3` or `flac`.
    pub fn audio(&mut self, label: String, data: String, format: String) -> Result<(), ApiError> {
        let format = format.to_ascii_lowercase();
        if !matches!(format.as_str(), "wav" | "mp3" | "flac") {
            return Err(refuse(
                &label,
                format!("`input_audio.format` must be wav, mp3 or flac; got `{format}`"),
            ));
        }
        self.count(&label, decoded_len(data.len()))?;
        self.parts.push(MediaPart {
            label,
            kind: Kind::Audio,
            format: Some(format),
            source: Source::Base64 { text: data, at: 0 },
        });
        Ok(())
    }

    fn url_allowed(&self, label: &str, url: &str) -> Result<(), ApiError> {
        let Some(hosts) = &self.limits.url_hosts else {
            return Err(refuse(
                label,
                "image URLs are off on this server; send a data URI (data:image/png;base64,...) or start it with --media-allow-url",
            ));
        };
        let host = fetch::host_of(url).ok_or_else(|| refuse(label, "the URL names no host"))?;
        if !fetch::host_allowed(hosts, &host) {
            return Err(refuse(
                label,
                format!("the URL's host `{host}` is not in --media-url-hosts"),
            ));
        }
        Ok(())
    }
}

/// A part the model cannot take: 400 naming it.
pub fn check_modality(parts: &[MediaPart], info: Option<&ProjectorInfo>) -> Result<(), ApiError> {
    for p in parts {
        let takes = match (p.kind, info) {
            (_, None) => false,
            (Kind::Image, Some(i)) => i.vision,
            (Kind::Audio, Some(i)) => i.audio,
        };
        if !takes {
            let why = if info.is_none() {
                " (it was served without --mmproj)"
            } else {
                ""
            };
            return Err(refuse(
                &p.label,
                format!("this model takes no {}{why}", p.kind.noun()),
            ));
        }
    }
    Ok(())
}

/// What `resolve` shares across requests: a bound on concurrent decodes
/// (each holds at most one part's file and pixels) and the URL client.
pub struct MediaCtx {
    decode: Arc<Semaphore>,
    client: std::sync::OnceLock<Result<reqwest::Client, String>>,
}

impl Default for MediaCtx {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        MediaCtx {
            decode: Arc::new(Semaphore::new(cores.max(2))),
            client: std::sync::OnceLock::new(),
        }
    }
}

/// The parts decoded, in order, and each one's kind.
#[derive(Debug)]
pub struct Resolved {
    pub inputs: Vec<MediaInput>,
    pub kinds: Vec<([u8; 32], Kind)>,
}

/// Each part fetched or base64-decoded, hashed and decoded on a blocking
/// thread (one part of a request at a time; at most `MediaCtx::decode`
/// across the process). `audio_rate`: the projector's sample rate.
pub async fn resolve(
    parts: Vec<MediaPart>,
    audio_rate: Option<u32>,
    l: &MediaLimits,
    ctx: &MediaCtx,
) -> Result<Resolved, ApiError> {
    let mut out = Resolved {
        inputs: Vec::with_capacity(parts.len()),
        kinds: Vec::with_capacity(parts.len()),
    };
    let mut pixels_left = l.max_request_pixels;
    // What URL bodies may add: the request's bytes less the data parts'
    // (counted when the body was read).
    let data_bytes: usize = parts
        .iter()
        .map(|p| match &p.source {
            Source::Base64 { text, at } => decoded_len(text.len() - at),
            Source::Url(_) => 0,
        })
        .sum();
    let mut bytes_left = l.max_request_bytes.saturating_sub(data_bytes);
    for p in parts {
        let label = p.label.clone();
        let kind = p.kind;
        let fetched = match &p.source {
            Source::Url(u) => {
                let client = ctx
                    .client
                    .get_or_init(|| fetch::client(l))
                    .as_ref()
                    .map_err(|e| ApiError::internal(format!("the URL client: {e}")))?;
                let cap = l.max_part_bytes.min(bytes_left);
                Some(fetch::get(client, u, cap, l.url_timeout, &label).await?)
            }
            Source::Base64 { .. } => None,
        };
        let is_url = fetched.is_some();
        let permit = ctx
            .decode
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("the media decoder is closed"))?;
        let lim = l.clone();
        let (format, source) = (p.format, p.source);
        let job = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let bytes = match (fetched, &source) {
                (Some(b), _) => b,
                (None, Source::Base64 { text, at }) => base64_bytes(&text[*at..], &label)?,
                (None, Source::Url(_)) => {
                    return Err(ApiError::internal("a URL part was not fetched"))
                }
            };
            let hash: [u8; 32] = sha2::Sha256::digest(&bytes).into();
            let media = match kind {
                Kind::Image => {
                    decode_image(&bytes, &lim, pixels_left).map_err(|e| refuse(&label, e))?
                }
                Kind::Audio => {
                    let rate = audio_rate.unwrap_or(16_000);
                    let fmt = format.as_deref().unwrap_or("wav");
                    decode_audio(&bytes, fmt, rate, lim.max_audio_seconds)
                        .map_err(|e| refuse(&label, e))?
                }
            };
            Ok::<_, ApiError>((bytes.len(), hash, media, label))
        });
        let (n, hash, media, label) = job
            .await
            .map_err(|e| ApiError::internal(format!("the media decoder failed: {e}")))??;
        if is_url {
            bytes_left = bytes_left.saturating_sub(n);
        }
        if let Media::Image { nx, ny, .. } = &media {
            pixels_left = pixels_left.saturating_sub(u64::from(*nx) * u64::from(*ny));
        }
        out.kinds.push((hash, kind));
        out.inputs.push(MediaInput { label, hash, media });
    }
    Ok(out)
}

/// Base64 (standard alphabet, padding optional) into bytes.
fn base64_bytes(text: &str, label: &str) -> Result<Vec<u8>, ApiError> {
    use base64::engine::{general_purpose, DecodePaddingMode, GeneralPurpose};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        general_purpose::GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    LENIENT
        .decode(text.trim_end())
        .map_err(|e| refuse(label, format!("the data is not valid base64 ({e})")))
}

/// Prompt positions of each kind in a prepared prompt's spans: (image,
/// audio), `None` where the request had none of that kind.
pub fn span_tokens(
    spans: &[steward_engine::request::MediaSpan],
    kinds: &[([u8; 32], Kind)],
) -> (Option<u32>, Option<u32>) {
    let mut sums = [None::<u32>, None];
    for s in spans {
        let kind = kinds
            .iter()
            .find(|k| k.0 == s.hash)
            .map_or(Kind::Image, |k| k.1);
        let i = usize::from(kind == Kind::Audio);
        sums[i] = Some(sums[i].unwrap_or(0) + s.len as u32);
    }
    (sums[0], sums[1])
}

#[cfg(test)]
mod tests;
