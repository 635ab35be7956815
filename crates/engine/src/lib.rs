//! Steward's engine: generate requests in, streams of events out. No HTTP.
//!
//! Public surface: [`Engine::start`] loads a model and spawns the execution
//! owner; [`EngineHandle`] prepares (template + tokenize on a bounded pool),
//! submits (bounded inbox), and reads stats (a `watch` snapshot). Dropping a
//! [`RequestStream`] cancels its request.

pub mod admission;
pub mod compare;
pub mod config;
pub mod cores;
pub mod deliver;
pub mod fatal;
pub mod fetch;
pub mod handle;
pub mod identity;
mod loaded;
pub(crate) mod owner;
pub mod prepare;
pub mod request;
pub mod runtime;
pub mod sample;

// The crate's surface, by stage (the modules above hold the rest).
pub use crate::admission::memory;
pub use crate::config::{
    AdapterInfo, AdapterSpec, EngineConfig, SchedulingPolicy, SlowReaderPolicy,
};
pub use crate::deliver::stats::{self, CancelState, EngineStats, Histogram};
pub use crate::deliver::stream::{
    self, Event, FinishReason, Finished, GenerationError, RequestStream, Timings, TokenLogprob,
};
pub use crate::deliver::timeline::{ChunkStep, Timeline, TimelineEnd, TimelineSink};
pub use crate::handle::{Engine, EngineHandle};
pub use crate::identity::ModelIdentity;
pub use crate::loaded::Loaded;
pub use crate::owner::inbox::EmbedOutput;
pub use crate::owner::kv::cells::CellSlot;
pub use crate::owner::kv::events as kvevents;
pub use crate::owner::spec::speculate::SpecMode;
pub use crate::prepare::{chat, constraint, literal, PrepareError, Preparer};
pub use crate::request::{GenerateRequest, Pin, SpecRequest, SubmitError, Tenancy, MAX_DRAFT};
pub use crate::runtime::{self as model, ceiling, LoadError, Pooling, TokenId};
pub use crate::sample::detok;
pub use crate::sample::sampler::SamplingParams;
