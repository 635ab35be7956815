//! The Anthropic Messages API (`POST /v1/messages`), served by translation:
//! [`to_chat`] turns a request into a chat-completions body; [`message`]
//! and [`MessageStream`] give the answer back as a `message` object or as
//! its stream of events; [`error_body`] and [`from_openai_error`] give
//! errors in Anthropic's shape (with `details.error_code` where the API
//! defines one: [`error_code`]). `cache_control` breakpoints become a pin
//! of the prompt, and `usage` says what the cache read and kept (`cache`).

mod cache;
mod reply;
mod request;

pub use reply::{
    error_body, error_kind_for_status, from_openai_error, message, message_from_events, message_id,
    tool_input, MessageStream,
};
pub use request::{error_code, to_chat, Translated};

#[cfg(test)]
mod tests_cache;
#[cfg(test)]
mod tests_reply;
#[cfg(test)]
mod tests_request;
