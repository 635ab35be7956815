//! Writing a model's weights in another GGUF format (llama.cpp's quantizer).

use std::path::Path;

use super::{backend, check_gguf, LoadError};

/// Weight formats `convert` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_1,
    Q4KM,
    Q4KS,
    Iq4Nl,
    Bf16,
    F16,
}

impl WeightFormat {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_uppercase().as_str() {
            "Q4_0" => Self::Q4_0,
            "Q4_1" => Self::Q4_1,
            "Q8_0" => Self::Q8_0,
            "Q5_1" => Self::Q5_1,
            "Q4_K_M" | "Q4_K" => Self::Q4KM,
            "Q4_K_S" => Self::Q4KS,
            "IQ4_NL" => Self::Iq4Nl,
            "BF16" => Self::Bf16,
            "F16" => Self::F16,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q8_0 => "Q8_0",
            Self::Q5_1 => "Q5_1",
            Self::Q4KM => "Q4_K_M",
            Self::Q4KS => "Q4_K_S",
            Self::Iq4Nl => "IQ4_NL",
            Self::Bf16 => "BF16",
            Self::F16 => "F16",
        }
    }
    fn ftype(self) -> llama_cpp_sys_2::llama_ftype {
        match self {
            Self::Q4_0 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q4_0,
            Self::Q4_1 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q4_1,
            Self::Q8_0 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q8_0,
            Self::Q5_1 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q5_1,
            Self::Q4KM => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q4_K_M,
            Self::Q4KS => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_Q4_K_S,
            Self::Iq4Nl => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_IQ4_NL,
            Self::Bf16 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_BF16,
            Self::F16 => llama_cpp_sys_2::LLAMA_FTYPE_MOSTLY_F16,
        }
    }
}

/// Rewrite a GGUF's weights in another format with llama.cpp's own
/// quantizer (`llama_model_quantize`; already-quantized input is
/// dequantized first, so converting a 4-bit model adds its own rounding).
/// Writes to a temporary name and renames on success.
pub fn convert(
    input: &Path,
    output: &Path,
    format: WeightFormat,
    threads: i32,
) -> Result<(), LoadError> {
    check_gguf(input)?;
    backend()?;
    // Per process (concurrent first runs on a fresh cache); renamed when whole.
    let tmp = output.with_extension(format!("gguf.partial-{}", std::process::id()));
    let cstr = |p: &Path| {
        std::ffi::CString::new(p.to_string_lossy().as_bytes())
            .map_err(|_| LoadError::NotFound(p.display().to_string()))
    };
    let (inp, out) = (cstr(input)?, cstr(&tmp)?);
    // SAFETY: plain C struct from llama.cpp's own defaults; the paths outlive the call.
    let rc = unsafe {
        let mut p = llama_cpp_sys_2::llama_model_quantize_default_params();
        p.nthread = threads;
        p.ftype = format.ftype();
        p.allow_requantize = true;
        llama_cpp_sys_2::llama_model_quantize(inp.as_ptr(), out.as_ptr(), &p)
    };
    if rc != 0 {
        let _ = std::fs::remove_file(&tmp);
        return Err(LoadError::LoadFailed(format!(
            "{} (quantize to {} returned {rc})",
            input.display(),
            format.name()
        )));
    }
    std::fs::rename(&tmp, output).map_err(|e| LoadError::Unreadable {
        path: output.display().to_string(),
        reason: e.to_string(),
    })
}
