//! ③ execute, plan — admission's decision for one request, pure: given
//! the cells it needs and what the prefix cache's slots and its host tier
//! offer, which reuse it takes and what it must reserve. The owner
//! (`owner/admit.rs`) looks the offers up, applies the decision (pins,
//! evictions, copies, restores) and starts the sequence.

use crate::admission::kv::{restore_adds, StateModel};
use crate::owner::kv::prefix::Reuse;

/// What the prefix cache offers a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Offer {
    /// The best reuse of a slot's cells (takeover or copy), if any.
    pub slots: Option<Reuse>,
    /// The longest prefix the host tier could restore (0: none).
    pub host_len: usize,
}

/// The decision.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// The slot reuse taken (None when restoring or computing).
    pub reuse: Option<Reuse>,
    /// Restore from the host tier into a fresh slot.
    pub restore: bool,
    /// Tokens the slots' offer covered (a restore must beat it).
    pub offered_len: usize,
    /// Cells held at once: a copy's duplicates, a restore's loaded cells.
    pub adds: usize,
    /// The reservation: growth beyond the reused cells.
    pub growth: u64,
    /// A restore reserving only its exact need (its loaded cells as the
    /// reused prefix): set by the owner when the whole growth and the
    /// loaded cells cannot both fit (`owner/admit.rs::reserve`).
    pub tight: bool,
}

/// Decide. `eligible`: the request may reuse state at all (the cache is
/// on, no prompt scoring). `share`: copies share cells (a unified pool).
/// `host_min`: how much longer than the slots' offer a restore must be.
///
/// The reservation is the growth beyond the reused cells; cells a copy
/// duplicates or a restore loads are held at once. A restore reserves the
/// whole growth (it may fail or find its entry gone) and gives back what it
/// really reused.
pub(crate) fn decide(
    need: u64,
    offer: Offer,
    eligible: bool,
    share: bool,
    host_min: usize,
    model: StateModel,
) -> Decision {
    let offered_len = match &offer.slots {
        Some(Reuse::Takeover { len, .. } | Reuse::Copy { len, .. }) => *len,
        None => 0,
    };
    // The host tier, when it holds a clearly longer prefix than the slots
    // do: restore it into a fresh slot instead.
    let restore = eligible && offer.host_len > offered_len + host_min;
    let reuse = if restore { None } else { offer.slots };
    let (reserved_reuse, adds) = match &reuse {
        Some(Reuse::Takeover { len, .. }) => (*len, 0),
        Some(Reuse::Copy { len, .. }) if share => (*len, 0),
        Some(Reuse::Copy { len, .. }) => (*len, *len),
        // (A recurrent state is the one unit the growth reserves.)
        None if restore => (0, restore_adds(model, offer.host_len)),
        None => (0, 0),
    };
    Decision {
        reuse,
        restore,
        offered_len,
        adds,
        growth: need.saturating_sub(reserved_reuse as u64),
        tight: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PT: StateModel = StateModel::PerToken;

    fn offer(slots: Option<Reuse>, host_len: usize) -> Offer {
        Offer { slots, host_len }
    }

    #[test]
    fn nothing_to_reuse_reserves_the_whole_need() {
        let d = decide(300, offer(None, 0), true, false, 128, PT);
        assert_eq!(
            (d.reuse, d.restore, d.adds, d.growth),
            (None, false, 0, 300)
        );
    }

    #[test]
    fn a_takeover_reserves_only_the_growth_and_holds_nothing_new() {
        let t = Reuse::Takeover { slot: 3, len: 100 };
        let d = decide(300, offer(Some(t.clone()), 0), true, false, 128, PT);
        assert_eq!(
            (d.reuse, d.adds, d.growth, d.offered_len),
            (Some(t), 0, 200, 100)
        );
    }

    #[test]
    fn a_copy_holds_its_duplicates_unless_the_pool_shares_cells() {
        let c = Reuse::Copy {
            src_slot: 1,
            len: 100,
        };
        let d = decide(300, offer(Some(c.clone()), 0), true, false, 128, PT);
        assert_eq!((d.adds, d.growth), (100, 200));
        let d = decide(300, offer(Some(c), 0), true, true, 128, PT);
        assert_eq!((d.adds, d.growth), (0, 200));
    }

    #[test]
    fn a_clearly_longer_host_prefix_is_restored_instead() {
        let t = Reuse::Takeover { slot: 3, len: 100 };
        // 100 + 128 < 229: restore, reserving the whole need.
        let d = decide(400, offer(Some(t.clone()), 229), true, false, 128, PT);
        assert_eq!(
            (d.reuse, d.restore, d.adds, d.growth),
            (None, true, 229, 400)
        );
        assert_eq!(d.offered_len, 100);
        // Not clearly longer: keep the slot.
        let d = decide(400, offer(Some(t.clone()), 228), true, false, 128, PT);
        assert_eq!((d.reuse, d.restore), (Some(t), false));
        // A recurrent state's restore adds no cells (its state is the unit).
        let d = decide(
            1,
            offer(None, 500),
            true,
            false,
            128,
            StateModel::PerSequence,
        );
        assert_eq!((d.restore, d.adds, d.growth), (true, 0, 1));
    }

    #[test]
    fn an_ineligible_request_never_restores() {
        let d = decide(400, offer(None, 1000), false, false, 128, PT);
        assert_eq!((d.restore, d.adds, d.growth), (false, 0, 400));
    }
}
