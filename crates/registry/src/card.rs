//! What `/v1/models` shows of each model: its state and identity, and its
//! adapters as models of their own (`base:adapter`, with `parent`).

use serde::Serialize;
use steward_engine::{AdapterInfo, EngineHandle};

use crate::{Registry, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelState {
    Unloaded,
    Loading,
    Loaded,
    Failed,
}

/// One entry of the model list.
#[derive(Clone, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub state: ModelState,
    /// For an adapter: the model it adapts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    pub pinned: bool,
    /// Bytes it holds while loaded (weights, KV pool, buffers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub footprint_bytes: Option<u64>,
    /// Last load's time, from the request that started it to ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<f64>,
    pub loads: u64,
    pub unloads: u64,
    /// Why it failed to load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adapter: Option<AdapterInfo>,
    /// The engine, while loaded (for identity, template and memory).
    #[serde(skip)]
    pub engine: Option<EngineHandle>,
}

impl Registry {
    /// Every model, then each model's adapters (loaded ones from the
    /// engine, the others from its configuration).
    pub fn cards(&self) -> Vec<ModelCard> {
        let g = self.lock();
        let mut out = Vec::new();
        for e in g.iter() {
            let (state, engine, error) = match &e.state {
                State::Unloaded => (ModelState::Unloaded, None, None),
                State::Loading { .. } => (ModelState::Loading, None, None),
                State::Loaded(h) => (ModelState::Loaded, Some(h.clone()), None),
                State::Failed(r) => (ModelState::Failed, None, Some(r.clone())),
            };
            let card = ModelCard {
                id: e.spec.name.clone(),
                state,
                parent: None,
                pinned: e.spec.pinned,
                footprint_bytes: e.footprint.filter(|_| engine.is_some()),
                load_ms: e.load_ms,
                loads: e.loads,
                unloads: e.unloads,
                error,
                adapter: None,
                engine: engine.clone(),
            };
            let adapters: Vec<AdapterInfo> = match &engine {
                Some(h) => h.adapters(),
                None => e
                    .spec
                    .config
                    .model
                    .adapters
                    .iter()
                    .enumerate()
                    .map(|(id, a)| AdapterInfo {
                        id,
                        name: a.name.clone(),
                        path: a.path.display().to_string(),
                        scale: a.scale,
                    })
                    .collect(),
            };
            out.push(card.clone());
            for a in adapters {
                out.push(ModelCard {
                    id: format!("{}:{}", e.spec.name, a.name),
                    parent: Some(e.spec.name.clone()),
                    adapter: Some(a),
                    footprint_bytes: None,
                    ..card.clone()
                });
            }
        }
        out
    }
}
