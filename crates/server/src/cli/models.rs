//! `serve`'s models: `--model`, `--hf`, `--models-config`, `--lora` and
//! `--pin` into the registry's model specs, and the resolver that turns a
//! hub reference into a cached file (`steward-hub`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use steward_engine::{AdapterSpec, EngineConfig};
use steward_registry::{ModelSpec, Resolver, Source};

/// A models config file (TOML):
///
/// ```toml
/// [[model]]
/// name = "smol"                      # what clients send in `model`
/// path = "/models/smol.gguf"         # or: hf = "owner/repo:Q4_K_M"
/// pinned = true                      # loaded at start, never unloaded
/// max_seqs = 8                       # per-model engine options
/// ctx_per_seq = 2048
/// pin_budget_mb = 64                 # host MiB for pinned prefixes
/// chat_template = "chatml"           # a file or chatml | gemma | plain
/// mmproj = "/models/mmproj.gguf"     # images (or audio) in
/// lora = [{ name = "style", path = "style.gguf", scale = 1.0 }]
/// ```
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    model: Vec<ModelEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelEntry {
    name: Option<String>,
    path: Option<PathBuf>,
    hf: Option<String>,
    #[serde(default)]
    pinned: bool,
    max_seqs: Option<usize>,
    ctx_per_seq: Option<u32>,
    max_tokens_limit: Option<u32>,
    prefix_host_mb: Option<u64>,
    pin_budget_mb: Option<u64>,
    checkpoint_mb: Option<u64>,
    chat_template: Option<String>,
    /// A multimodal projector GGUF (images or audio in).
    mmproj: Option<PathBuf>,
    #[serde(default)]
    lora: Vec<LoraEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoraEntry {
    name: String,
    path: PathBuf,
    #[serde(default = "one")]
    scale: f32,
}

fn one() -> f32 {
    1.0
}

/// A config entry's host memory sizes (MiB: `prefix_host_mb`,
/// `pin_budget_mb`, `checkpoint_mb`) over the flags'.
fn host_memory(c: &mut EngineConfig, prefix: Option<u64>, pins: Option<u64>, ckpt: Option<u64>) {
    for (mb, bytes) in [
        (prefix, &mut c.admit.prefix_host_bytes),
        (pins, &mut c.admit.pin_bytes),
        (ckpt, &mut c.admit.checkpoint_bytes),
    ] {
        if let Some(mb) = mb {
            *bytes = mb << 20;
        }
    }
}

/// What the flags say about models.
pub struct ModelFlags<'a> {
    /// `--model [NAME=]PATH` (repeatable).
    pub models: &'a [String],
    /// `--hf [NAME=]owner/repo[:quant]` (repeatable).
    pub hf: &'a [String],
    pub config: Option<&'a Path>,
    /// `--lora NAME=PATH[:SCALE]` for the first model.
    pub lora: &'a [String],
    /// `--pin NAME` (repeatable).
    pub pin: &'a [String],
    /// `--mmproj PATH` for the first model.
    pub mmproj: Option<&'a Path>,
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

fn split_name(s: &str) -> (Option<&str>, &str) {
    match s.split_once('=') {
        Some((n, rest)) if !n.is_empty() && !n.contains('/') => (Some(n), rest),
        _ => (None, s),
    }
}

fn check_name(n: &str) -> anyhow::Result<()> {
    let ok = !n.is_empty()
        && n.len() <= 128
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@".contains(&b));
    if !ok {
        bail!("model name {n:?}: use 1-128 letters, digits and -_./:@");
    }
    Ok(())
}

/// `NAME=PATH[:SCALE]`.
pub fn parse_lora(s: &str) -> anyhow::Result<AdapterSpec> {
    let (name, rest) = s
        .split_once('=')
        .with_context(|| format!("--lora {s:?}: use NAME=PATH[:SCALE]"))?;
    let (path, scale) = match rest.rsplit_once(':') {
        Some((p, x)) if x.parse::<f32>().is_ok() => (p, x.parse::<f32>().unwrap_or(1.0)),
        _ => (rest, 1.0),
    };
    if name.is_empty() || name.contains(':') || !scale.is_finite() {
        bail!("--lora {s:?}: use NAME=PATH[:SCALE] (a name without ':')");
    }
    Ok(AdapterSpec {
        name: name.to_string(),
        path: path.into(),
        scale,
    })
}

/// Every model the flags and the config file name, in order (the first is
/// the default). None named: `default` (the default model, fetched).
pub fn specs(
    f: &ModelFlags<'_>,
    base: &EngineConfig,
    served_name: Option<&str>,
    default: impl FnOnce() -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Vec<ModelSpec>> {
    let mut out: Vec<ModelSpec> = Vec::new();
    let spec = |name: String, source: Source| ModelSpec {
        name,
        source,
        config: base.clone(),
        pinned: false,
    };
    for m in f.models {
        let (name, path) = split_name(m);
        let path = PathBuf::from(path);
        out.push(spec(
            name.map_or_else(|| stem(&path), str::to_string),
            Source::Path(path),
        ));
    }
    for h in f.hf {
        let (name, r) = split_name(h);
        steward_hub::HubRef::parse(r).map_err(|e| anyhow::anyhow!("--hf {r}: {e}"))?;
        out.push(spec(
            name.unwrap_or(r).to_string(),
            Source::Hub(r.to_string()),
        ));
    }
    if let Some(p) = f.config {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("--models-config {}: cannot read it", p.display()))?;
        let file: ConfigFile =
            toml::from_str(&text).with_context(|| format!("--models-config {}", p.display()))?;
        for (i, e) in file.model.into_iter().enumerate() {
            let source = match (e.path, e.hf) {
                (Some(p), None) => Source::Path(p),
                (None, Some(h)) => {
                    steward_hub::HubRef::parse(&h)
                        .map_err(|x| anyhow::anyhow!("--models-config model {i}: hf {h}: {x}"))?;
                    Source::Hub(h)
                }
                _ => bail!("--models-config model {i}: give exactly one of `path` and `hf`"),
            };
            let name = match (&e.name, &source) {
                (Some(n), _) => n.clone(),
                (None, Source::Path(p)) => stem(p),
                (None, Source::Hub(h)) => h.clone(),
            };
            let mut s = spec(name, source);
            s.pinned = e.pinned;
            let c = &mut s.config;
            if let Some(n) = e.max_seqs {
                if n == 0 || n > 256 {
                    bail!("--models-config {}: max_seqs must be 1..=256", s.name);
                }
                c.admit.max_seqs = n;
                c.step.max_decode_seqs = c.step.max_decode_seqs.min(n);
            }
            if let Some(n) = e.ctx_per_seq {
                c.admit.ctx_per_seq = n.max(16);
            }
            if let Some(n) = e.max_tokens_limit {
                c.prepare.max_tokens_limit = n.max(1);
            }
            host_memory(c, e.prefix_host_mb, e.pin_budget_mb, e.checkpoint_mb);
            if let Some(p) = &e.mmproj {
                c.model.mmproj = Some(p.clone());
            }
            if let Some(t) = &e.chat_template {
                c.prepare.chat_template = Some(super::model::template_flag(t)?);
            }
            c.model.adapters = e
                .lora
                .into_iter()
                .map(|l| AdapterSpec {
                    name: l.name,
                    path: l.path,
                    scale: l.scale,
                })
                .collect();
            out.push(s);
        }
    }
    if out.is_empty() {
        let p = default()?;
        out.push(spec(
            served_name.map_or_else(|| stem(&p), str::to_string),
            Source::Path(p),
        ));
    } else if let (Some(n), 1) = (served_name, out.len()) {
        out[0].name = n.to_string();
    }
    for l in f.lora {
        out[0].config.model.adapters.push(parse_lora(l)?);
    }
    if let Some(p) = f.mmproj {
        if out[0].config.model.mmproj.is_some() {
            bail!(
                "--mmproj: model {:?} has an `mmproj` in --models-config already",
                out[0].name
            );
        }
        out[0].config.model.mmproj = Some(p.to_path_buf());
    }
    check_names(&out)?;
    for p in f.pin {
        let Some(s) = out.iter_mut().find(|s| &s.name == p) else {
            bail!("--pin {p}: no model has that name");
        };
        s.pinned = true;
    }
    // One model alone is never unloaded.
    if out.len() == 1 {
        out[0].pinned = true;
    }
    Ok(out)
}

/// Every model's name valid and its own, every adapter's its own within
/// its model.
fn check_names(out: &[ModelSpec]) -> anyhow::Result<()> {
    for (i, s) in out.iter().enumerate() {
        check_name(&s.name)?;
        if out[..i].iter().any(|o| o.name == s.name) {
            bail!(
                "two models are named {:?}: name them (NAME=PATH, or `name` in the config)",
                s.name
            );
        }
        let mut seen: Vec<&str> = Vec::new();
        for a in &s.config.model.adapters {
            if seen.contains(&a.name.as_str()) {
                bail!("model {:?} has two adapters named {:?}", s.name, a.name);
            }
            seen.push(&a.name);
        }
    }
    Ok(())
}

/// Files stay files; hub references are fetched into (or served offline
/// from) the hub cache.
pub fn resolver(hub: steward_hub::HubOptions) -> Resolver {
    std::sync::Arc::new(move |s: &Source| match s {
        Source::Path(p) => Ok(p.clone()),
        Source::Hub(r) => {
            let r = steward_hub::HubRef::parse(r).map_err(|e| e.to_string())?;
            steward_hub::fetch_blocking(&r, &hub).map_err(|e| e.to_string())
        }
    })
}
