//! Models fetched by name from a Hugging Face compatible hub.
