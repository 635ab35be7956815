//! ③ execute — what the KV cells hold and who may reuse them. Owned by the
//! owner thread; pure bookkeeping except `memstate::measure`.
//!
//! Order (each uses only those before it): `key` (the prefix identity, a
//! leaf) ← `events` (KV event sink and msgpack layout) ← `blocks` (full
//! 64-token blocks) ← `cells` (the cell map: what every slot's cells hold,
//! shared cells once) ← `prefix` (the idle-slot prefix cache) ← `spill`
//! (the host tier) ← `diskfile` (the disk tier's files and its thread) ←
//! `disk` (the disk tier's index) ← `memstate` (window reach and
//! checkpoints per slot).
//!
//! May use: `runtime` (token ids, the `Backend` trait). Must not use the
//! owner's phases (`owner/*.rs`) or anything above the engine.

pub mod blocks;
pub mod cells;
pub mod disk;
pub mod diskfile;
pub mod events;
pub mod key;
pub mod memstate;
pub mod prefix;
pub mod spill;
