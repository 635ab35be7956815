//! Steward's chat formats, pure (no runtime, no HTTP): templates rendered
//! exactly as transformers renders them (`template`), the model family a
//! template belongs to and its markers (`family`), the family's tool-call
//! and reasoning output read back incrementally (`parse`), and grammars
//! that force a call or a schema in the family's own syntax (`grammar`).
//! The engine and server call this crate; nothing else knows a family's
//! markers.

pub mod template;

pub use template::{ChatTemplates, RenderArgs, TemplateError};
pub mod adapt;
pub mod fallback;
pub mod family;
pub mod grammar;
pub mod parse;
