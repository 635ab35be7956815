//! The server's integration tests, one binary (one link, and every file's
//! tests share the test threads instead of running binary after binary).
//! `models.rs` stays a binary of its own: it measures this process's RSS
//! across a load and an unload, which other tests' models would disturb.

mod common;

mod batch;
mod cancel;
mod chat_formats;
mod cli;
mod dashboard;
mod dialects;
mod embed;
mod formats;
mod gateway;
mod hardening;
mod http;
mod hub_cli;
mod lora;
mod media;
mod openapi;
mod state;
mod structured;
mod tenants;
