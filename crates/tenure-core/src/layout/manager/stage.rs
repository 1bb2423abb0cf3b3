//! The role's state (seed 000 §5.1 `state`) as an enum whose states carry the variables
//! only they use: a regenerating manager its [`Regeneration`], a migrating one where the
//! role goes or came from, a relayout its new layout, the none state the votes that
//! outran a handoff. Leaving a state drops its data, so no variable outlives the states
//! that give it meaning; [`MgrState`] is the bare name, for views and matching.

use super::migration::EarlyVote;
use super::regeneration::Regeneration;
use crate::ids::DeviceId;
use crate::layout::{Metadata, MgrState};
use crate::time::Instant;

/// The role's state with its data (seed 000 §5.3.1–14).
#[derive(Clone, Debug)]
pub enum Stage {
    /// §5.3.1: not a manager of the store. Holds the chunks' votes for a migration into
    /// this device that arrived before the old manager's handoff.
    None(Vec<EarlyVote>),
    /// §5.3.2: just restarted.
    NewlyAwake,
    /// §5.3.3: migrating in; reconciling.
    IntoReconciling(Incoming),
    /// §5.3.4: migrating in; committing.
    IntoTransition(Incoming),
    /// §5.3.5: migrating out; reconciling.
    OutOfReconciling(Outgoing),
    /// §5.3.6: migrating out; committing.
    OutOfTransition(Outgoing),
    /// §5.3.7: the one true manager.
    Manager,
    /// §5.3.8: relayout; reconciling. Carries the new metadata log.
    RelayoutReconciling(Metadata),
    /// §5.3.9: relayout; committing.
    RelayoutTransition(Metadata),
    /// §5.3.10: regenerating; contending for chunks.
    GatheringChunks(Regeneration),
    /// §5.3.11: a gathering round is over; deciding.
    Gathered(Regeneration),
    /// §5.3.12: won; transferring the remaining leases.
    GatheringLeases(Regeneration),
    /// §5.3.13: recovery epoch transition; reconciling.
    RecoveryReconciling(Regeneration),
    /// §5.3.14: recovery epoch transition; committing.
    RecoveryTransition(Regeneration),
}

/// A migration into this device (§5.3.3–4).
#[derive(Clone, Debug)]
pub struct Incoming {
    /// The previous manager, until it is told the outcome.
    pub old_mgr: Option<DeviceId>,
}

/// A migration out of this device (§5.3.5–6).
#[derive(Clone, Copy, Debug)]
pub struct Outgoing {
    /// The migration destination.
    pub new_mgr: DeviceId,
    /// Tenure: the attempt this manager is handing off.
    pub tx: u64,
    /// Tenure: out-of-transition gives up at this time.
    pub deadline: Instant,
}

impl Default for Stage {
    fn default() -> Stage {
        Stage::None(Vec::new())
    }
}

impl Stage {
    /// The state's name.
    pub fn name(&self) -> MgrState {
        use MgrState as S;
        match self {
            Stage::None(_) => S::None,
            Stage::NewlyAwake => S::NewlyAwake,
            Stage::IntoReconciling(_) => S::IntoReconciling,
            Stage::IntoTransition(_) => S::IntoTransition,
            Stage::OutOfReconciling(_) => S::OutOfReconciling,
            Stage::OutOfTransition(_) => S::OutOfTransition,
            Stage::Manager => S::Manager,
            Stage::RelayoutReconciling(_) => S::RelayoutReconciling,
            Stage::RelayoutTransition(_) => S::RelayoutTransition,
            Stage::GatheringChunks(_) => S::GatheringChunks,
            Stage::Gathered(_) => S::Gathered,
            Stage::GatheringLeases(_) => S::GatheringLeases,
            Stage::RecoveryReconciling(_) => S::RecoveryReconciling,
            Stage::RecoveryTransition(_) => S::RecoveryTransition,
        }
    }

    /// What regeneration works with, in the states of §5.3.10–14.
    pub fn regeneration(&self) -> Option<&Regeneration> {
        match self {
            Stage::GatheringChunks(r)
            | Stage::Gathered(r)
            | Stage::GatheringLeases(r)
            | Stage::RecoveryReconciling(r)
            | Stage::RecoveryTransition(r) => Some(r),
            _ => None,
        }
    }

    /// [`Self::regeneration`], to change.
    pub fn regeneration_mut(&mut self) -> Option<&mut Regeneration> {
        match self {
            Stage::GatheringChunks(r)
            | Stage::Gathered(r)
            | Stage::GatheringLeases(r)
            | Stage::RecoveryReconciling(r)
            | Stage::RecoveryTransition(r) => Some(r),
            _ => None,
        }
    }

    /// The migration out of this device, in the states of §5.3.5–6.
    pub fn outgoing(&self) -> Option<&Outgoing> {
        match self {
            Stage::OutOfReconciling(o) | Stage::OutOfTransition(o) => Some(o),
            _ => None,
        }
    }

    /// The migration into this device, in the states of §5.3.3–4.
    pub fn incoming(&self) -> Option<&Incoming> {
        match self {
            Stage::IntoReconciling(i) | Stage::IntoTransition(i) => Some(i),
            _ => None,
        }
    }

    /// The new metadata log of a relayout, in the states of §5.3.8–9.
    pub fn new_metadata_log(&self) -> Option<&Metadata> {
        match self {
            Stage::RelayoutReconciling(m) | Stage::RelayoutTransition(m) => Some(m),
            _ => None,
        }
    }

    /// [`Self::incoming`], to change.
    pub fn incoming_mut(&mut self) -> Option<&mut Incoming> {
        match self {
            Stage::IntoReconciling(i) | Stage::IntoTransition(i) => Some(i),
            _ => None,
        }
    }

    /// The votes kept in the none state for a handoff still to come.
    pub fn early_votes(&self) -> &[EarlyVote] {
        match self {
            Stage::None(v) => v,
            _ => &[],
        }
    }

    /// Move to `to`, a state of the same group (regeneration §5.3.10–14, migrating in or
    /// out, relayout), keeping the group's data.
    ///
    /// # Panics
    /// If `to` is not of the current state's group: a transition the seed does not have.
    pub fn advance(&mut self, to: MgrState) {
        use MgrState as S;
        if self.name() == to {
            return;
        }
        let from = std::mem::take(self);
        *self = match (from, to) {
            (
                Stage::GatheringChunks(r)
                | Stage::Gathered(r)
                | Stage::GatheringLeases(r)
                | Stage::RecoveryReconciling(r)
                | Stage::RecoveryTransition(r),
                to,
            ) => match to {
                S::GatheringChunks => Stage::GatheringChunks(r),
                S::Gathered => Stage::Gathered(r),
                S::GatheringLeases => Stage::GatheringLeases(r),
                S::RecoveryReconciling => Stage::RecoveryReconciling(r),
                S::RecoveryTransition => Stage::RecoveryTransition(r),
                to => panic!("no transition from regeneration to {to:?}"),
            },
            (Stage::IntoReconciling(i) | Stage::IntoTransition(i), S::IntoTransition) => {
                Stage::IntoTransition(i)
            }
            (Stage::OutOfReconciling(o) | Stage::OutOfTransition(o), to) if o_state(to) => match to
            {
                S::OutOfReconciling => Stage::OutOfReconciling(o),
                _ => Stage::OutOfTransition(o),
            },
            (Stage::RelayoutReconciling(m), S::RelayoutTransition) => Stage::RelayoutTransition(m),
            (from, to) => panic!("no transition from {:?} to {to:?}", from.name()),
        };
    }
}

/// Whether `s` is one of the states of a migration out (§5.3.5–6).
fn o_state(s: MgrState) -> bool {
    matches!(s, MgrState::OutOfReconciling | MgrState::OutOfTransition)
}
