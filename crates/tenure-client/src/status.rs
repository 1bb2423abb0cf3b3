//! The chunk and manager states of a `Status` answer, typed. The wire carries each state
//! by its name (`"RegularLease"`, `"Manager"`: the variant's name, as the core's serde
//! spells it); devices write the names with [`chunk_state_name`] and [`mgr_state_name`],
//! and readers compare the states these accessors read back, never strings.

use crate::proto;
use serde::Deserialize;
use serde::de::IntoDeserializer;
pub use tenure_core::layout::{ChunkState, MgrState};

/// The wire name of a chunk state.
pub fn chunk_state_name(s: ChunkState) -> &'static str {
    match s {
        ChunkState::RegularLease => "RegularLease",
        ChunkState::Reconciling => "Reconciling",
        ChunkState::RegularTransition => "RegularTransition",
        ChunkState::GarbageCollect => "GarbageCollect",
        ChunkState::NewlyAwake => "NewlyAwake",
        ChunkState::NoLease => "NoLease",
        ChunkState::RecoveryLease => "RecoveryLease",
        ChunkState::RecoveryTransition => "RecoveryTransition",
        ChunkState::RecoveryReconciling => "RecoveryReconciling",
    }
}

/// The wire name of a manager state.
pub fn mgr_state_name(s: MgrState) -> &'static str {
    match s {
        MgrState::None => "None",
        MgrState::NewlyAwake => "NewlyAwake",
        MgrState::IntoReconciling => "IntoReconciling",
        MgrState::IntoTransition => "IntoTransition",
        MgrState::OutOfReconciling => "OutOfReconciling",
        MgrState::OutOfTransition => "OutOfTransition",
        MgrState::Manager => "Manager",
        MgrState::RelayoutReconciling => "RelayoutReconciling",
        MgrState::RelayoutTransition => "RelayoutTransition",
        MgrState::GatheringChunks => "GatheringChunks",
        MgrState::Gathered => "Gathered",
        MgrState::GatheringLeases => "GatheringLeases",
        MgrState::RecoveryReconciling => "RecoveryReconciling",
        MgrState::RecoveryTransition => "RecoveryTransition",
    }
}

/// The state named `name`, if this build knows it (a newer device may name one it does
/// not).
fn parse<'a, T: Deserialize<'a>>(name: &'a str) -> Option<T> {
    let de: serde::de::value::StrDeserializer<'a, serde::de::value::Error> =
        name.into_deserializer();
    T::deserialize(de).ok()
}

impl proto::ChunkStatus {
    /// The chunk's state (`None`: a name this build does not know).
    pub fn chunk_state(&self) -> Option<ChunkState> {
        parse(&self.state)
    }

    /// Whether the chunk serves: it holds a regular lease.
    pub fn is_serving(&self) -> bool {
        self.chunk_state() == Some(ChunkState::RegularLease)
    }

    /// Whether the chunk is being deleted (the layout dropped it).
    pub fn is_collected(&self) -> bool {
        self.chunk_state() == Some(ChunkState::GarbageCollect)
    }
}

impl proto::ManagerStatus {
    /// The manager role's state (`None`: a name this build does not know).
    pub fn mgr_state(&self) -> Option<MgrState> {
        parse(&self.state)
    }

    /// Whether the device is the store's manager.
    pub fn is_manager(&self) -> bool {
        self.mgr_state() == Some(MgrState::Manager)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: [ChunkState; 9] = [
        ChunkState::RegularLease,
        ChunkState::Reconciling,
        ChunkState::RegularTransition,
        ChunkState::GarbageCollect,
        ChunkState::NewlyAwake,
        ChunkState::NoLease,
        ChunkState::RecoveryLease,
        ChunkState::RecoveryTransition,
        ChunkState::RecoveryReconciling,
    ];

    const MGR: [MgrState; 14] = [
        MgrState::None,
        MgrState::NewlyAwake,
        MgrState::IntoReconciling,
        MgrState::IntoTransition,
        MgrState::OutOfReconciling,
        MgrState::OutOfTransition,
        MgrState::Manager,
        MgrState::RelayoutReconciling,
        MgrState::RelayoutTransition,
        MgrState::GatheringChunks,
        MgrState::Gathered,
        MgrState::GatheringLeases,
        MgrState::RecoveryReconciling,
        MgrState::RecoveryTransition,
    ];

    // The wire names are the ones devices have always sent (the variants' names), and
    // each reads back as its state.
    #[test]
    fn every_state_name_reads_back_as_its_state() {
        for s in CHUNK {
            let name = chunk_state_name(s);
            assert_eq!(name, format!("{s:?}"));
            let c = proto::ChunkStatus {
                state: name.into(),
                ..Default::default()
            };
            assert_eq!(c.chunk_state(), Some(s));
            assert_eq!(c.is_serving(), s == ChunkState::RegularLease);
            assert_eq!(c.is_collected(), s == ChunkState::GarbageCollect);
        }
        for s in MGR {
            let name = mgr_state_name(s);
            assert_eq!(name, format!("{s:?}"));
            let m = proto::ManagerStatus {
                state: name.into(),
                ..Default::default()
            };
            assert_eq!(m.mgr_state(), Some(s));
            assert_eq!(m.is_manager(), s == MgrState::Manager);
        }
    }

    #[test]
    fn an_unknown_name_is_no_state() {
        let c = proto::ChunkStatus {
            state: "regularlease".into(),
            ..Default::default()
        };
        assert_eq!(c.chunk_state(), None);
        assert!(!c.is_serving());
        let m = proto::ManagerStatus::default();
        assert_eq!(m.mgr_state(), None);
        assert!(!m.is_manager());
    }
}
