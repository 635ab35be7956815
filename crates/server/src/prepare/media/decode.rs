//! Image files into pixels, within bounds: an image's header
//! is read first (its format from its bytes, not its MIME type; its size
//! against `--media-max-pixels` before any pixel is decoded), then it is
//! decoded with `image::Limits` holding every allocation to that size,
//! and converted to packed RGB8. A GIF must be one frame; SVG is refused.

use std::io::Cursor;

use image::{AnimationDecoder, ImageFormat, ImageReader};
use steward_engine::model::mtmd::Media;

use super::MediaLimits;

/// Formats read; anything else is refused.
const FORMATS: &str = "PNG, JPEG, WebP or GIF";

/// Bytes a decoder may allocate per pixel: 16-bit RGBA (8 bytes) is the
/// widest layout any of the formats decodes to.
const BYTES_PER_PIXEL: u64 = 8;

/// An image file into packed RGB8, refused (the reason, for a 400) when
/// it is not a single-frame PNG, JPEG, WebP or GIF, is larger than
/// `--media-max-pixels` or than the `pixels_left` of the request, or does
/// not decode whole.
pub fn decode_image(bytes: &[u8], l: &MediaLimits, pixels_left: u64) -> Result<Media, String> {
    let format = image_format(bytes)?;
    let (nx, ny) = ImageReader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|e| format!("the image's header does not read ({e})"))?;
    let pixels = u64::from(nx) * u64::from(ny);
    if pixels == 0 {
        return Err(format!("the image is {nx}x{ny}: empty"));
    }
    if pixels > l.max_pixels {
        return Err(format!(
            "the image is {nx}x{ny} = {pixels} pixels; the limit is {} (--media-max-pixels)",
            l.max_pixels
        ));
    }
    if pixels > pixels_left {
        return Err(format!(
            "the request's images come to more than {} pixels (--media-max-request-pixels)",
            l.max_request_pixels
        ));
    }
    let limits = bounds(nx, ny);
    if format == ImageFormat::Gif {
        one_frame(bytes, &limits)?;
    }
    if format == ImageFormat::Jpeg && !jpeg_ends(bytes) {
        return Err(
            "the JPEG is truncated (its segments end before the end-of-image marker)".into(),
        );
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| format!("the {format:?} image does not decode ({e})"))?;
    let rgb = img.into_rgb8();
    let (nx, ny) = rgb.dimensions();
    Ok(Media::Image {
        nx,
        ny,
        rgb: rgb.into_raw(),
    })
}

/// The limits a decoder runs under: the header's size, and no more
/// allocation than that many pixels in the widest layout.
fn bounds(nx: u32, ny: u32) -> image::Limits {
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(nx);
    limits.max_image_height = Some(ny);
    let pixels = u64::from(nx) * u64::from(ny);
    limits.max_alloc = Some(pixels * BYTES_PER_PIXEL + (1 << 20));
    limits
}

/// The format from the file's first bytes (not the declared MIME type).
fn image_format(bytes: &[u8]) -> Result<ImageFormat, String> {
    let head = &bytes[..bytes.len().min(512)];
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with("<svg") || (trimmed.starts_with("<?xml") && text.contains("<svg")) {
        return Err(format!("SVG images are not supported; send {FORMATS}"));
    }
    let format = image::guess_format(bytes)
        .map_err(|_| format!("the data is not an image this server reads ({FORMATS})"))?;
    match format {
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif => Ok(format),
        other => Err(format!(
            "{other:?} images are not supported; send {FORMATS}"
        )),
    }
}

/// A GIF of more than one frame (an animation) is refused: which frame
/// would the model see?
fn one_frame(bytes: &[u8], limits: &image::Limits) -> Result<(), String> {
    let mut d = image::codecs::gif::GifDecoder::new(Cursor::new(bytes))
        .map_err(|e| format!("the GIF does not decode ({e})"))?;
    image::ImageDecoder::set_limits(&mut d, limits.clone())
        .map_err(|e| format!("the GIF does not decode ({e})"))?;
    let frames = d.into_frames().take(2).count();
    if frames > 1 {
        return Err("animated GIFs are not supported; send one frame".into());
    }
    Ok(())
}

/// The JPEG's segments reach its end-of-image marker: walked from the
/// start (marker segments skipped by their length, entropy-coded data
/// scanned for the next marker), so that an embedded thumbnail's marker
/// does not count and data after the end is allowed. A truncated file
/// fails here (the JPEG decoder would fill the missing rows in grey
/// instead of failing).
fn jpeg_ends(b: &[u8]) -> bool {
    let mut i = 2; // past SOI
    while i + 1 < b.len() {
        if b[i] != 0xFF {
            return false;
        }
        let m = b[i + 1];
        match m {
            0xFF => i += 1, // fill byte
            0xD9 => return true,
            0x01 | 0xD0..=0xD7 => i += 2,
            _ => {
                let Some(len) = b.get(i + 2..i + 4) else {
                    return false;
                };
                i += 2 + usize::from(u16::from_be_bytes([len[0], len[1]]));
                if m == 0xDA {
                    // Entropy-coded data up to the next marker that is not
                    // a stuffed 0xFF00 or a restart marker.
                    while i + 1 < b.len()
                        && !(b[i] == 0xFF && b[i + 1] != 0 && !(0xD0..=0xD7).contains(&b[i + 1]))
                    {
                        i += 1;
                    }
                }
            }
        }
    }
    false
}
