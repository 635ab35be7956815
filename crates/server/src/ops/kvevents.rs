//! `--kv-events`: KV-cache block events in vLLM's wire format over ZeroMQ,
//! for routers that route by exact prefix (llm-d's KV indexer, Dynamo,
//! AIBrix). What a block is and when it is stored or removed is the
//! engine's (`steward_engine::kvevents`); this module owns the socket and
//! the encoding.
//!
//! Each message is three frames: the topic (`kv@{host}@{model}` by
//! default, llm-d's `kv@<pod>@<model>`), an 8-byte big-endian sequence
//! number (one counter per socket, from 0), and a MessagePack payload laid
//! out as vLLM's array-like msgspec structs:
//!
//! ```text
//! batch            = [ts: float64, events: [event, ...]]
//! BlockStored      = ["BlockStored", block_hashes: [uint64], parent_block_hash: uint64 | nil,
//!                     token_ids: [int], block_size: int, lora_id: int | nil, medium: str]
//! BlockRemoved     = ["BlockRemoved", block_hashes: [uint64], medium: str]
//! AllBlocksCleared = ["AllBlocksCleared"]
//! ```
//!
//! The publisher task is the only reader of a bounded queue the engines
//! `try_send` into; a PUB socket never waits for a subscriber (ZeroMQ drops
//! for a slow one). Not built: vLLM's replay socket (a subscriber that
//! missed messages waits for the next resync or restart instead).

use anyhow::Context;
use bytes::Bytes;
use steward_engine::kvevents::{KvBatch, KvEvent, KvSink, BLOCK_TOKENS};
use tokio::sync::mpsc;
use zeromq::{Socket, SocketSend, ZmqMessage};

/// Batches waiting for the socket, from every model.
const QUEUE: usize = 1024;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct KvEventArgs {
    /// Publish KV-cache events (vLLM's format: BlockStored, BlockRemoved,
    /// AllBlocksCleared; msgpack over ZeroMQ PUB) on this endpoint,
    /// `tcp://HOST:PORT` (`*` for every interface). Full-attention models
    /// only. Blocks are 64 tokens, as `vllm:cache_config_info` says.
    #[arg(long = "kv-events", value_name = "ENDPOINT")]
    pub endpoint: Option<String>,
    /// Connect to the endpoint instead of binding it (llm-d's KV indexer
    /// binds one socket that every replica connects to).
    #[arg(long = "kv-events-connect")]
    pub connect: bool,
    /// Each model's topic: `{model}` is its served name, `{host}` this
    /// replica ($POD_IP, else the hostname). llm-d reads `kv@<pod>@<model>`.
    #[arg(long = "kv-events-topic", default_value = "kv@{host}@{model}")]
    pub topic: String,
}

/// The queue between the engines and the socket.
pub struct KvEvents {
    pub args: KvEventArgs,
    tx: mpsc::Sender<KvBatch>,
    rx: Option<mpsc::Receiver<KvBatch>>,
}

impl KvEvents {
    pub fn new(args: &KvEventArgs) -> Option<Self> {
        args.endpoint.as_ref()?;
        let (tx, rx) = mpsc::channel(QUEUE);
        Some(KvEvents {
            args: args.clone(),
            tx,
            rx: Some(rx),
        })
    }

    /// The sink for one model's engine.
    pub fn sink(&self, model: &str) -> KvSink {
        let host = std::env::var("POD_IP")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(hostname);
        let topic = self
            .args
            .topic
            .replace("{model}", model)
            .replace("{host}", &host);
        KvSink {
            topic: topic.into(),
            tx: self.tx.clone(),
        }
    }

    /// Bind (or connect) the socket and start publishing; a bad endpoint
    /// is a startup error.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let Some(mut rx) = self.rx.take() else {
            return Ok(());
        };
        let ep = self.args.endpoint.clone().unwrap_or_default();
        // ZeroMQ's wildcard host.
        let zep = ep.replace("://*:", "://0.0.0.0:");
        let mut sock = zeromq::PubSocket::new();
        if self.args.connect {
            sock.connect(&zep)
                .await
                .with_context(|| format!("--kv-events {ep}: cannot connect"))?;
        } else {
            sock.bind(&zep)
                .await
                .with_context(|| format!("--kv-events {ep}: cannot bind"))?;
        }
        tracing::info!(endpoint = %ep, connect = self.args.connect, "publishing KV-cache events");
        tokio::spawn(async move {
            let mut seq: u64 = 0;
            while let Some(b) = rx.recv().await {
                let frames = vec![
                    Bytes::from(b.topic.as_bytes().to_vec()),
                    Bytes::copy_from_slice(&seq.to_be_bytes()),
                    Bytes::from(encode(&b)),
                ];
                seq += 1;
                let Ok(msg) = ZmqMessage::try_from(frames) else {
                    continue;
                };
                if let Err(e) = sock.send(msg).await {
                    tracing::warn!(error = %e, "KV events: send failed");
                }
            }
        });
        Ok(())
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "steward".into())
}

/// One batch as vLLM's `KVEventBatch` (see the module note).
pub fn encode(b: &KvBatch) -> Vec<u8> {
    use rmp::encode as w;
    let mut out = Vec::with_capacity(64 + b.events.len() * 32);
    // Writes into a Vec cannot fail.
    let _ = w::write_array_len(&mut out, 2);
    let _ = w::write_f64(&mut out, b.ts);
    let _ = w::write_array_len(&mut out, b.events.len() as u32);
    for e in &b.events {
        match e {
            KvEvent::Stored {
                hashes,
                parent,
                tokens,
                lora_id,
            } => {
                let _ = w::write_array_len(&mut out, 7);
                let _ = w::write_str(&mut out, "BlockStored");
                write_hashes(&mut out, hashes);
                match parent {
                    Some(p) => {
                        let _ = w::write_uint(&mut out, *p);
                    }
                    None => {
                        let _ = w::write_nil(&mut out);
                    }
                }
                let _ = w::write_array_len(&mut out, tokens.len() as u32);
                for &t in tokens {
                    let _ = w::write_sint(&mut out, i64::from(t));
                }
                let _ = w::write_uint(&mut out, BLOCK_TOKENS as u64);
                match lora_id {
                    Some(l) => {
                        let _ = w::write_sint(&mut out, *l);
                    }
                    None => {
                        let _ = w::write_nil(&mut out);
                    }
                }
                let _ = w::write_str(&mut out, b.medium);
            }
            KvEvent::Removed { hashes } => {
                let _ = w::write_array_len(&mut out, 3);
                let _ = w::write_str(&mut out, "BlockRemoved");
                write_hashes(&mut out, hashes);
                let _ = w::write_str(&mut out, b.medium);
            }
            KvEvent::Cleared => {
                let _ = w::write_array_len(&mut out, 1);
                let _ = w::write_str(&mut out, "AllBlocksCleared");
            }
        }
    }
    out
}

fn write_hashes(out: &mut Vec<u8>, hashes: &[u64]) {
    let _ = rmp::encode::write_array_len(out, hashes.len() as u32);
    for &h in hashes {
        let _ = rmp::encode::write_uint(out, h);
    }
}
