//! ② admit / ⑤ retire — pinned prefixes (Anthropic's `cache_control`,
//! OpenAI's `prompt_cache_key`): a finished request that asked for a pin
//! leaves its slot's state in the host tier as a pinned entry
//! (`kv/spill.rs`: never evicted before its hold ends, counted in the pin
//! budget, `--pin-budget-mb`), unless a pin already holds its prefix, whose
//! hold each use extends. A pin past its hold becomes an ordinary entry
//! (and from there goes to the disk tier like any). An alarm thread wakes
//! an idle owner when the next hold ends, so a pin's memory is released on
//! time whether or not requests arrive.

use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::owner::inbox::Command;
use crate::owner::kv::spill::{PinHold, Spilled};
use crate::owner::plan::adapter_sets::key_for;
use crate::owner::sequence::Sequence;
use crate::owner::Owner;
use crate::runtime::backend::Backend;

/// Wakes the owner (a `Wake` command) at the instants it is given.
pub(crate) struct Alarm {
    tx: std_mpsc::SyncSender<Instant>,
    /// The instant it is set for (the thread keeps the earliest given).
    armed: Option<Instant>,
}

impl Alarm {
    /// The thread ends with the owner (its channel closes) or with the
    /// engine (the inbox's senders gone).
    pub fn start(wake: mpsc::WeakSender<Command>) -> Option<Alarm> {
        let (tx, rx) = std_mpsc::sync_channel::<Instant>(64);
        std::thread::Builder::new()
            .name("steward-alarm".into())
            .spawn(move || {
                let mut next: Option<Instant> = None;
                loop {
                    let got = match next {
                        Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
                        None => rx
                            .recv()
                            .map_err(|_| std_mpsc::RecvTimeoutError::Disconnected),
                    };
                    match got {
                        Ok(t) => next = Some(next.map_or(t, |n| n.min(t))),
                        Err(std_mpsc::RecvTimeoutError::Timeout) => {
                            next = None;
                            let Some(s) = wake.upgrade() else { return };
                            // A full inbox: the owner is awake anyway.
                            let _ = s.try_send(Command::Wake);
                        }
                        Err(std_mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok()?;
        Some(Alarm { tx, armed: None })
    }

    /// Wake the owner at `t` unless it is already set to wake it by then.
    pub fn at(&mut self, t: Instant) {
        let now = Instant::now();
        if self.armed.is_none_or(|a| a <= now || a > t) && self.tx.try_send(t).is_ok() {
            self.armed = Some(t);
        }
    }
}

impl<B: Backend> Owner<B> {
    /// A retiring sequence that asked for a pin: its slot's state pinned
    /// (its cells are intact: called before they go to the prefix cache),
    /// or the pin holding its prefix extended. Sets the prompt tokens it
    /// newly pinned.
    pub(super) fn pin_retiring(&mut self, seq: &mut Sequence) {
        let Some(pin) = seq.pin else { return };
        if self.kv.host.pin_budget == 0 {
            return;
        }
        let ttl = self
            .config
            .admit
            .pin_max_ttl
            .map_or(pin.ttl, |m| pin.ttl.min(m));
        let key = key_for(self.prefix_key, &seq.adapters);
        let cells = self.kv.cells.tokens(seq.slot);
        let n = pin
            .tokens
            .unwrap_or(seq.prompt.len())
            .min(seq.prompt.len())
            .min(cells.len());
        if n == 0 || ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        if self.kv.host.refresh_pin(key, &cells[..n], now, ttl) {
            return;
        }
        if self.rt.slot_len(seq.slot) < cells.len() {
            return;
        }
        let Some(data) = self.rt.save_slot(seq.slot) else {
            return;
        };
        let e = Spilled {
            key,
            tokens: cells,
            data,
            last_used: self.next_key,
            lo: self.kv.memory.lo(seq.slot),
            pin: Some(PinHold {
                until: now + ttl,
                ttl,
            }),
        };
        let created = self.kv.host.pin(e).is_ok();
        self.stats.send_modify(|s| {
            if created {
                s.pins_created += 1;
            } else {
                s.pins_refused += 1;
            }
        });
        if created {
            seq.pinned = n.saturating_sub(seq.reused) as u32;
        }
    }

    /// Pins whose hold has passed become ordinary entries; the host tier
    /// then keeps its budget (what leaves goes to the disk tier). The
    /// alarm is set for the next hold's end.
    pub(super) fn pins_tick(&mut self) {
        if self.kv.host.pin_budget == 0 {
            return;
        }
        let (expired, next) = self.kv.host.expire(Instant::now());
        if expired > 0 {
            let out = self.kv.host.trim();
            self.send_to_disk(out);
            self.stats.send_modify(|s| s.pins_expired += expired as u64);
            self.publish(None);
        }
        if let (Some(t), Some(a)) = (next, self.pin_alarm.as_mut()) {
            a.at(t + Duration::from_millis(1));
        }
    }
}
