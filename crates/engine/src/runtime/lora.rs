//! LoRA adapters in llama.cpp: loaded per model (`llama_adapter_lora_init`),
//! applied per context (`llama_set_adapters_lora`): every row of a step
//! runs under the context's one adapter set, so the owner groups steps by
//! adapter set (`owner/adapters.rs`).

use std::ffi::CString;
use std::path::Path;

use llama_cpp_sys_2 as sys;

use super::Runtime;

/// A loaded adapter. llama.cpp frees it with the model; the runtime that
/// loaded it keeps it (it is only used on the owner thread).
pub(crate) struct Adapter(std::ptr::NonNull<sys::llama_adapter_lora>);

// SAFETY: the adapter's tensors are read-only after loading; it is used
// only by the owner thread that holds the runtime.
unsafe impl Send for Adapter {}

impl Runtime<'_> {
    /// Load a LoRA adapter GGUF for this runtime's model. On the owner
    /// thread only: llama.cpp records it in the model's adapter set, which
    /// a step reads while it sizes its graph.
    pub fn load_adapter(&mut self, path: &Path) -> Result<usize, String> {
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(format!("adapter file not found: {shown}"));
        }
        let c = CString::new(shown.as_str()).map_err(|_| format!("bad adapter path {shown}"))?;
        // SAFETY: a live model pointer and a NUL-terminated path; null on
        // failure (llama.cpp logs why).
        let p = unsafe { sys::llama_adapter_lora_init(self.model.as_ptr(), c.as_ptr()) };
        let a = std::ptr::NonNull::new(p).ok_or_else(|| {
            format!(
                "llama.cpp could not load the LoRA adapter {shown} (not a LoRA GGUF, or made for \
                 another architecture or shape; RUST_LOG=llama-cpp-2=info shows its reason)"
            )
        })?;
        self.adapters.push(Adapter(a));
        Ok(self.adapters.len() - 1)
    }

    /// Apply these adapters (index from `load_adapter`, scale) to every
    /// later step; an empty set is the base model. llama.cpp rebuilds its
    /// graph reservation at the next step when the set changes.
    pub fn set_adapters(&mut self, set: &[(usize, f32)]) -> Result<(), String> {
        if self.active_adapters == set {
            return Ok(());
        }
        let mut ptrs = Vec::with_capacity(set.len());
        let mut scales = Vec::with_capacity(set.len());
        for &(i, scale) in set {
            let a = self
                .adapters
                .get(i)
                .ok_or_else(|| format!("no adapter {i} is loaded"))?;
            ptrs.push(a.0.as_ptr());
            scales.push(scale);
        }
        // SAFETY: live context; `ptrs` and `scales` hold `set.len()` entries.
        let r = unsafe {
            sys::llama_set_adapters_lora(
                self.ctx.as_ptr(),
                ptrs.as_mut_ptr(),
                ptrs.len(),
                scales.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(format!("llama_set_adapters_lora returned {r}"));
        }
        self.active_adapters = set.to_vec();
        Ok(())
    }
}
