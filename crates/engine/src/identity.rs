//! Model identity: immutable, computed once at load, part of every later
//! cache key.
//!
//! Owns: the weights hash cache (`<cache dir>/steward/hashes.json`, keyed by
//! canonical path + size + mtime, so a restart does not rehash). Invariants:
//! an identity never changes after load; two loads of the same bytes with the
//! same adapters have equal identities.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
pub use steward_hub::known::{cache_dir, file_sha256};

use crate::runtime::{LoadError, LoadedModel};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub struct ModelIdentity {
    pub weights_sha256: String,
    pub architecture: String,
    pub quantization: String,
    pub vocab_sha256: String,
    pub chat_template_sha256: String,
    pub context_length: u32,
    pub adapters: Vec<String>,
    pub description: String,
    /// The multimodal projector's SHA-256 (`--mmproj`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projector_sha256: Option<String>,
}

impl ModelIdentity {
    pub fn compute(path: &Path, model: &LoadedModel) -> Result<Self, LoadError> {
        let weights_sha256 = cached_file_sha256(path)?;
        let mut v = Sha256::new();
        for (i, b) in model.vocab.token_text_special.iter().enumerate() {
            v.update((i as u32).to_le_bytes());
            v.update((b.len() as u32).to_le_bytes());
            v.update(b);
        }
        let f = &model.facts;
        Ok(ModelIdentity {
            weights_sha256,
            architecture: f.architecture.clone(),
            quantization: f.file_type.clone(),
            vocab_sha256: hex(&v.finalize()),
            chat_template_sha256: hex(&Sha256::digest(
                f.chat_template.as_deref().unwrap_or("").as_bytes(),
            )),
            context_length: f.n_ctx_train,
            adapters: Vec::new(),
            description: f.description.clone(),
            projector_sha256: None,
        })
    }

    /// One line for logs.
    /// What the prefix cache keys computed state by: weights, tokenizer
    /// and template, and the adapters named at start (each request's
    /// adapter set is mixed in per sequence: `owner/adapters.rs`).
    pub fn prefix_key(&self) -> crate::owner::kv::key::PrefixKey {
        use std::hash::{Hash, Hasher};
        let h = |parts: &[&str]| {
            let mut s = std::collections::hash_map::DefaultHasher::new();
            parts.hash(&mut s);
            s.finish()
        };
        let adapters: Vec<&str> = self.adapters.iter().map(String::as_str).collect();
        crate::owner::kv::key::PrefixKey {
            model: match &self.projector_sha256 {
                None => h(&[
                    &self.weights_sha256,
                    &self.vocab_sha256,
                    &self.chat_template_sha256,
                    &self.quantization,
                ]),
                Some(p) => h(&[
                    &self.weights_sha256,
                    &self.vocab_sha256,
                    &self.chat_template_sha256,
                    &self.quantization,
                    p,
                ]),
            },
            adapters: if adapters.is_empty() { 0 } else { h(&adapters) },
            media: 0,
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "{} {} {} weights={} vocab={} template={} ctx={} adapters={}",
            self.description,
            self.architecture,
            self.quantization,
            &self.weights_sha256[..12],
            &self.vocab_sha256[..12],
            &self.chat_template_sha256[..12],
            self.context_length,
            self.adapters.len()
        )
    }

    /// A stable key for caches (hash of every field).
    pub fn key(&self) -> String {
        let s = serde_json::to_string(self).unwrap_or_default();
        hex(&Sha256::digest(s.as_bytes()))[..16].to_string()
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn cached_file_sha256(path: &Path) -> Result<String, LoadError> {
    let unreadable = |e: std::io::Error| LoadError::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let canon = path.canonicalize().map_err(unreadable)?;
    let meta = std::fs::metadata(&canon).map_err(unreadable)?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let key = format!("{}|{}|{}", canon.display(), meta.len(), mtime);
    let file = cache_dir().join("hashes.json");
    let mut map: BTreeMap<String, String> = std::fs::read(&file)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(h) = map.get(&key) {
        return Ok(h.clone());
    }
    let h = file_sha256(&canon).map_err(unreadable)?;
    map.insert(key, h.clone());
    if let Some(dir) = file.parent() {
        let _ = std::fs::create_dir_all(dir);
        let tmp = file.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, serde_json::to_vec_pretty(&map).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
    }
    Ok(h)
}
