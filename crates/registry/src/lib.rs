//! The model registry: which models this server knows, which are loaded.
