//! The multimodal projector: llama.cpp's libmtmd behind the runtime
//! adapter. Loads an mmproj file beside a text model, cuts one media
//! item (an image's RGB pixels, an audio clip's samples) into the chunks
//! the model reads (text tokens the projector wraps around it, and one or
//! more embedding spans), and encodes each span into the text model's
//! embedding space.
//!
//! Used from one thread at a time (the encoder's, `prepare::encoder`):
//! an `mtmd_context` has one set of compute buffers. The text model it was
//! loaded against must outlive it (the encoder holds the `Arc`).

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Mutex;

use llama_cpp_sys_2 as sys;

use super::{LoadError, LoadedModel, TokenId};

/// One media item's pixels or samples, as the projector takes them.
#[derive(Debug, Clone, PartialEq)]
pub enum Media {
    /// Packed RGB, `nx * ny * 3` bytes.
    Image { nx: u32, ny: u32, rgb: Vec<u8> },
    /// Mono PCM at the projector's sample rate (`Projector::audio_rate`).
    Audio { samples: Vec<f32> },
}

/// A piece of an encoded media item, in prompt order.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text tokens the projector puts around the media (begin/end markers).
    Text(Vec<TokenId>),
    /// An embedding span: `n_tokens` rows of the text model's input width.
    Embd {
        n_tokens: usize,
        /// Positions the span advances (M-RoPE models: not `n_tokens`).
        n_pos: usize,
        /// The span's rows attend to each other both ways (decoded in one
        /// batch with causal attention off).
        non_causal: bool,
        embd: Vec<f32>,
    },
}

/// What the projector takes and how it places media.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectorInfo {
    pub vision: bool,
    pub audio: bool,
    /// Samples per second an audio clip must come in.
    pub audio_rate: Option<u32>,
    /// Positions by M-RoPE (not supported by the step yet: refused at load).
    pub mrope: bool,
    /// The text model's input embedding width (floats per span row).
    pub n_embd: usize,
}

/// An `mtmd_context`, freed on drop.
pub struct Projector {
    ctx: NonNull<sys::mtmd_context>,
    pub info: ProjectorInfo,
    /// The encoder graph's node callback's state (a raw allocation:
    /// libmtmd keeps its address for the context's life; freed on drop).
    watch: NonNull<Watch>,
}

/// Why an encode did not finish.
#[derive(Debug, Clone, PartialEq)]
pub enum EncodeError {
    /// The caller's `cancelled` said so mid-encode.
    Cancelled,
    Failed(String),
}

/// Every this many graph nodes the encoder asks whether its caller left
/// (a check splits the graph there; nothing is checked otherwise).
const CHECK_EVERY: usize = 4;

/// A check between graph nodes mid-encode: the caller may pause the
/// encode there (given how long it has run since the last pause; true
/// when it paused).
type Pause = Box<dyn FnMut(std::time::Duration) -> bool + Send>;

#[derive(Default)]
struct Watch {
    nodes: usize,
    cancel: Option<Box<dyn Fn() -> bool + Send>>,
    cancelled: bool,
    pause: Option<Pause>,
    since: Option<std::time::Instant>,
}

/// ggml's scheduler asks (`ask`) whether a node's output is wanted, then
/// calls again after computing up to it: false stops the graph.
unsafe extern "C" fn on_node(_t: *mut sys::ggml_tensor, ask: bool, ud: *mut c_void) -> bool {
    // SAFETY: `ud` is the projector's boxed `Watch`, used only on the
    // thread that runs the encode.
    let w = unsafe { &mut *(ud as *mut Watch) };
    if ask {
        w.nodes += 1;
        return w.cancel.is_some() && w.nodes.is_multiple_of(CHECK_EVERY);
    }
    let stop = w.cancel.as_ref().is_some_and(|c| c());
    w.cancelled |= stop;
    if !stop {
        if let (Some(p), Some(since)) = (w.pause.as_mut(), w.since) {
            if p(since.elapsed()) {
                w.since = Some(std::time::Instant::now());
            }
        }
    }
    !stop
}

// SAFETY: the context is used by one thread at a time (`&mut self` for
// every call that computes); libmtmd keeps no thread-local state.
unsafe impl Send for Projector {}

/// The last error line libmtmd logged (for a one-line load error).
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());

unsafe extern "C" fn on_log(level: sys::ggml_log_level, text: *const c_char, _: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: libmtmd passes a NUL-terminated string valid for the call.
    let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let line = line.trim_end();
    if line.is_empty() {
        return;
    }
    if level == sys::GGML_LOG_LEVEL_ERROR {
        tracing::warn!(target: "mtmd", "{line}");
        // The first line of the first error since the last read: the cause
        // (libmtmd follows some with hints).
        if let Ok(mut last) = LAST_ERROR.lock() {
            if last.is_empty() {
                *last = line.lines().next().unwrap_or_default().to_string();
            }
        }
    } else {
        tracing::debug!(target: "mtmd", "{line}");
    }
}

fn last_error() -> String {
    LAST_ERROR
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default()
}

impl Projector {
    /// Load `path` against `model`; a projector that does not fit the
    /// model (another embedding width, an unknown type) is an error that
    /// says why in one line.
    pub fn load(
        path: &Path,
        model: &LoadedModel,
        n_threads: i32,
        use_gpu: bool,
    ) -> Result<Self, LoadError> {
        super::check_gguf(path)?;
        let shown = path.display().to_string();
        let c_path = CString::new(shown.clone())
            .map_err(|_| LoadError::Context(format!("projector path {shown} has a NUL byte")))?;
        // SAFETY: installs a logger that only reads its arguments.
        unsafe { sys::mtmd_log_set(Some(on_log), std::ptr::null_mut()) };
        let _ = last_error();
        // SAFETY: plain-data defaults; the marker pointer is libmtmd's own.
        let mut p = unsafe { sys::mtmd_context_params_default() };
        p.use_gpu = use_gpu;
        p.print_timings = false;
        p.n_threads = n_threads.max(1);
        p.warmup = true;
        let watch = NonNull::from(Box::leak(Box::<Watch>::default()));
        p.cb_eval = Some(on_node);
        p.cb_eval_user_data = watch.as_ptr().cast();
        let ctx = unsafe { sys::mtmd_init_from_file(c_path.as_ptr(), model.raw(), p) };
        let Some(ctx) = NonNull::new(ctx) else {
            // SAFETY: allocated above; no context holds it.
            drop(unsafe { Box::from_raw(watch.as_ptr()) });
            let why = last_error();
            let why = if why.is_empty() {
                "llama.cpp refused it (run with RUST_LOG=mtmd=debug for its log)".into()
            } else {
                why
            };
            return Err(LoadError::Context(format!(
                "projector {shown} does not load with this model: {why}"
            )));
        };
        // SAFETY: `ctx` is a live context.
        let info = unsafe {
            let rate = sys::mtmd_get_audio_sample_rate(ctx.as_ptr());
            ProjectorInfo {
                vision: sys::mtmd_support_vision(ctx.as_ptr()),
                audio: sys::mtmd_support_audio(ctx.as_ptr()),
                audio_rate: (rate > 0).then_some(rate as u32),
                mrope: sys::mtmd_decode_use_mrope(ctx.as_ptr()),
                n_embd: sys::llama_model_n_embd_inp(model.raw()).max(0) as usize,
            }
        };
        let proj = Projector { ctx, info, watch };
        if proj.info.mrope {
            return Err(LoadError::Context(format!(
                "projector {shown}: its model places media by M-RoPE positions, which this server does not support yet"
            )));
        }
        Ok(proj)
    }

    /// Cut one media item into pieces and encode its spans. The prompt
    /// text around it is not here: only the projector's own wrapping.
    /// Every few graph nodes, `cancelled` is asked (true stops the encode)
    /// and `pause` may hold the encode there (sharing the cores).
    pub fn encode(
        &mut self,
        media: &Media,
        cancelled: Box<dyn Fn() -> bool + Send>,
        pause: Pause,
    ) -> Result<Vec<Piece>, EncodeError> {
        let w = self.watch.as_ptr();
        // SAFETY: the watch is only touched here and by the node callback,
        // which runs inside `encode_media` on this thread.
        unsafe {
            (*w).cancel = Some(cancelled);
            (*w).cancelled = false;
            (*w).pause = Some(pause);
            (*w).since = Some(std::time::Instant::now());
        }
        let r = self.encode_media(media);
        let cancelled = unsafe {
            (*w).cancel = None;
            (*w).pause = None;
            (*w).since = None;
            (*w).cancelled
        };
        if cancelled {
            return Err(EncodeError::Cancelled);
        }
        r.map_err(EncodeError::Failed)
    }

    fn encode_media(&mut self, media: &Media) -> Result<Vec<Piece>, String> {
        let marker = unsafe { CStr::from_ptr(sys::mtmd_default_marker()) };
        // SAFETY: the bitmap copies the pixels/samples; freed below.
        let bitmap = unsafe {
            match media {
                Media::Image { nx, ny, rgb } => {
                    if rgb.len() != (*nx as usize) * (*ny as usize) * 3 || *nx == 0 || *ny == 0 {
                        return Err("image buffer does not match its size".into());
                    }
                    sys::mtmd_bitmap_init(*nx, *ny, rgb.as_ptr())
                }
                Media::Audio { samples } => {
                    if samples.is_empty() {
                        return Err("empty audio clip".into());
                    }
                    sys::mtmd_bitmap_init_from_audio(samples.len(), samples.as_ptr())
                }
            }
        };
        let Some(bitmap) = NonNull::new(bitmap) else {
            return Err("the projector could not take this media".into());
        };
        let chunks = unsafe { sys::mtmd_input_chunks_init() };
        let result = self.encode_chunks(marker, bitmap, chunks);
        // SAFETY: both were created above and are not used after this.
        unsafe {
            sys::mtmd_input_chunks_free(chunks);
            sys::mtmd_bitmap_free(bitmap.as_ptr());
        }
        result
    }

    fn encode_chunks(
        &mut self,
        marker: &CStr,
        bitmap: NonNull<sys::mtmd_bitmap>,
        chunks: *mut sys::mtmd_input_chunks,
    ) -> Result<Vec<Piece>, String> {
        if chunks.is_null() {
            return Err("out of memory".into());
        }
        let text = sys::mtmd_input_text {
            text: marker.as_ptr(),
            text_len: marker.to_bytes().len(),
            add_special: false,
            parse_special: true,
        };
        let bitmaps = [bitmap.as_ptr() as *const sys::mtmd_bitmap];
        // SAFETY: every pointer is live for the call.
        let r =
            unsafe { sys::mtmd_tokenize(self.ctx.as_ptr(), chunks, &text, bitmaps.as_ptr(), 1) };
        if r != 0 {
            let why = last_error();
            return Err(if why.is_empty() {
                format!("the projector could not prepare it (code {r})")
            } else {
                why
            });
        }
        let mut pieces = Vec::new();
        // SAFETY: indices below the chunk count; chunk pointers stay valid
        // while `chunks` lives.
        let n = unsafe { sys::mtmd_input_chunks_size(chunks) };
        for i in 0..n {
            let chunk = unsafe { sys::mtmd_input_chunks_get(chunks, i) };
            let kind = unsafe { sys::mtmd_input_chunk_get_type(chunk) };
            if kind == sys::MTMD_INPUT_CHUNK_TYPE_TEXT {
                let mut len = 0usize;
                let toks = unsafe { sys::mtmd_input_chunk_get_tokens_text(chunk, &mut len) };
                if !toks.is_null() && len > 0 {
                    pieces.push(Piece::Text(
                        unsafe { std::slice::from_raw_parts(toks, len) }.to_vec(),
                    ));
                }
                continue;
            }
            let n_tokens = unsafe { sys::mtmd_input_chunk_get_n_tokens(chunk) };
            let n_pos = unsafe { sys::mtmd_input_chunk_get_n_pos(chunk) }.max(0) as usize;
            let non_causal = unsafe { sys::mtmd_decode_use_non_causal(self.ctx.as_ptr(), chunk) };
            let r = unsafe { sys::mtmd_encode_chunk(self.ctx.as_ptr(), chunk) };
            if r != 0 {
                let why = last_error();
                return Err(if why.is_empty() {
                    format!("the projector failed to encode it (code {r})")
                } else {
                    why
                });
            }
            let out = unsafe { sys::mtmd_get_output_embd(self.ctx.as_ptr()) };
            let len = n_tokens * self.info.n_embd;
            if out.is_null() || len == 0 {
                return Err("the projector returned no embeddings".into());
            }
            // SAFETY: libmtmd's output holds `n_tokens` rows of the text
            // model's input width after a successful encode.
            let embd = unsafe { std::slice::from_raw_parts(out, len) }.to_vec();
            pieces.push(Piece::Embd {
                n_tokens,
                n_pos,
                non_causal,
                embd,
            });
        }
        Ok(pieces)
    }
}

impl Drop for Projector {
    fn drop(&mut self) {
        // SAFETY: created in `load`, freed once here, the context first
        // (it holds the watch's address).
        unsafe {
            sys::mtmd_free(self.ctx.as_ptr());
            drop(Box::from_raw(self.watch.as_ptr()));
        }
    }
}
