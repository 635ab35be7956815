//! The cores the owner's steps and the media encoder share, turn by turn.
//!
//! On a CPU both compute on every core: run side by side they oversubscribe
//! the cores (one round, on a busy machine: 8 decoding streams stalled
//! 5.2 s and the encode took 28.6 s), and an encode run whole between two
//! steps stalls every stream for all of it (docs/BENCHMARKS.md [3/7]). So they take turns: the owner
//! holds the cores for each step, the encoder for a slice of its graph (it
//! asks every few graph nodes whether its slice is over), and while both
//! want the cores they alternate, a slice lasting as long as the last step
//! (`slice`): decoders keep at least half their cadence, and an encode
//! takes at most about twice its time alone. Whoever is alone runs on.
//! `whole` makes the encoder hold the cores for an entire encode (the
//! inline loop benchmarks compare against).

use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Owner,
    Encoder,
}

#[derive(Debug)]
struct State {
    holder: Option<Who>,
    last: Who,
    owner_wants: bool,
    encoder_wants: bool,
    /// The owner's last step: the length of an encoder slice.
    slice: Duration,
}

#[derive(Debug)]
pub struct Cores {
    s: Mutex<State>,
    cv: Condvar,
    /// The encoder never yields mid-encode.
    pub whole: bool,
}

/// Bounds of an encoder slice.
const MIN_SLICE: Duration = Duration::from_millis(10);
const MAX_SLICE: Duration = Duration::from_millis(500);

impl Cores {
    pub fn new(whole: bool) -> Self {
        Cores {
            s: Mutex::new(State {
                holder: None,
                last: Who::Owner,
                owner_wants: false,
                encoder_wants: false,
                slice: MIN_SLICE,
            }),
            cv: Condvar::new(),
            whole,
        }
    }

    fn take(&self, me: Who) {
        let Ok(mut s) = self.s.lock() else { return };
        match me {
            Who::Owner => s.owner_wants = true,
            Who::Encoder => s.encoder_wants = true,
        }
        loop {
            let other_wants = match me {
                Who::Owner => s.encoder_wants,
                Who::Encoder => s.owner_wants,
            };
            if s.holder.is_none() && (!other_wants || s.last != me) {
                break;
            }
            s = match self.cv.wait(s) {
                Ok(s) => s,
                Err(_) => return,
            };
        }
        s.holder = Some(me);
        s.last = me;
        if me == Who::Owner {
            s.owner_wants = false;
        }
    }

    fn give(&self, me: Who) {
        if let Ok(mut s) = self.s.lock() {
            if s.holder == Some(me) {
                s.holder = None;
            }
        }
        self.cv.notify_all();
    }

    /// The owner, before a step: waits out an encoder slice.
    pub fn step_begin(&self) {
        self.take(Who::Owner);
    }

    /// The owner, after a step of `took` (None: it ran none).
    pub fn step_end(&self, took: Option<Duration>) {
        if let (Some(t), Ok(mut s)) = (took, self.s.lock()) {
            s.slice = t.clamp(MIN_SLICE, MAX_SLICE);
        }
        self.give(Who::Owner);
    }

    /// The encoder, before an encode.
    pub fn encode_begin(&self) {
        self.take(Who::Encoder);
    }

    /// The encoder, after an encode.
    pub fn encode_end(&self) {
        if let Ok(mut s) = self.s.lock() {
            s.encoder_wants = false;
        }
        self.give(Who::Encoder);
    }

    /// The encoder, mid-encode, `ran` into its slice: hand the cores to a
    /// waiting owner when the slice is over, and take them back after its
    /// step. True when it yielded (a new slice starts).
    pub fn encode_yield(&self, ran: Duration) -> bool {
        if self.whole {
            return false;
        }
        let over = match self.s.lock() {
            Ok(s) => s.owner_wants && ran >= s.slice,
            Err(_) => false,
        };
        if over {
            self.give(Who::Encoder);
            self.take(Who::Encoder);
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn owner_and_encoder_alternate_while_both_want_the_cores() {
        let c = Arc::new(Cores::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        c.encode_begin();
        let (c2, log2) = (c.clone(), log.clone());
        let owner = std::thread::spawn(move || {
            for _ in 0..3 {
                c2.step_begin();
                log2.lock().unwrap().push('o');
                c2.step_end(Some(Duration::ZERO));
            }
        });
        // Wait until the owner asks, then slice: each yield lets one step in.
        let mut slices = 0;
        while slices < 3 {
            if c.encode_yield(Duration::from_secs(1)) {
                log.lock().unwrap().push('e');
                slices += 1;
            }
        }
        c.encode_end();
        owner.join().unwrap();
        assert_eq!(*log.lock().unwrap(), vec!['o', 'e', 'o', 'e', 'o', 'e']);
    }

    #[test]
    fn a_whole_encode_never_yields_and_an_idle_owner_never_blocks_it() {
        let c = Cores::new(true);
        c.encode_begin();
        assert!(!c.encode_yield(Duration::from_secs(9)));
        c.encode_end();
        let c = Cores::new(false);
        c.encode_begin();
        assert!(!c.encode_yield(Duration::from_secs(9)), "no owner waits");
        c.encode_end();
        c.step_begin();
        c.step_end(Some(Duration::from_millis(30)));
    }
}
