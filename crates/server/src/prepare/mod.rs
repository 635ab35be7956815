//! Stage ① prepare: a wire body turned into what the engine is asked for.
//! Field validation (`validate` → `GenSpec` and `PromptInput`, in `spec`;
//! the fields each API knows and what is done with each, `fields`),
//! every client-controlled limit (`limits`), a chat's messages into the
//! template's input (`chat_input`), images and audio (`media/`: checked,
//! fetched, decoded within bounds), `tools`/`tool_choice` (`tools`), the
//! grammar a chat's output is held to (`forcing`), the prompt pin a
//! request asks for and how far it reaches (`pin`).
//!
//! May use `http/` (errors) only.

pub mod chat_input;
pub(crate) mod fields;
pub(crate) mod forcing;
pub mod limits;
pub mod media;
pub mod pin;
pub mod spec;
pub mod tools;
pub mod validate;
