//! What disturbs the cluster while faults are on: the nemesis (partitions, heals,
//! crashes, pauses, drawn with the run's weights) and the operator's outside-policy
//! commands (migrate, replace a chunk, relayout).

use super::{Event, World};
use crate::net::PartitionMode;
use tenure_core::io::PolicyCommand;
use tenure_core::layout::Metadata;
use tenure_core::{DeviceId, StoreId};

/// The nemesis' repertoire (weights in [`Knobs::nemesis_weights`], in this order).
///
/// [`Knobs::nemesis_weights`]: crate::knobs::Knobs::nemesis_weights
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NemesisAction {
    /// Cut the cluster into random halves.
    PartitionHalves,
    /// Cut one device off.
    PartitionIsolate,
    /// End the partition in force (once it has been stable long enough).
    Heal,
    /// Crash a device; it restarts after a delay.
    Crash,
    /// Pause a device's process; it resumes after a delay.
    Pause,
}

const NEMESIS_ACTIONS: [NemesisAction; 5] = [
    NemesisAction::PartitionHalves,
    NemesisAction::PartitionIsolate,
    NemesisAction::Heal,
    NemesisAction::Crash,
    NemesisAction::Pause,
];

impl World {
    /// One nemesis action, drawn with the run's weights.
    pub(super) fn nemesis(&mut self) {
        let w = self.knobs.nemesis_weights;
        let total: u32 = w.iter().sum();
        if total == 0 {
            return;
        }
        let mut pick = self.nemesis_rng.below(total as u64) as u32;
        let mut i = 0;
        while pick >= w[i] {
            pick -= w[i];
            i += 1;
        }
        let ids: Vec<DeviceId> = self.nodes.keys().copied().collect();
        let n = ids.len() as u64;
        let stable = self
            .net
            .partition
            .as_ref()
            .is_none_or(|p| self.now >= p.since_us + self.knobs.partition_stability_min_us);
        match NEMESIS_ACTIONS[i] {
            a @ (NemesisAction::PartitionHalves | NemesisAction::PartitionIsolate) => {
                if !stable || n < 2 {
                    return;
                }
                let (mode, count) = if a == NemesisAction::PartitionHalves {
                    (
                        PartitionMode::RandomHalves,
                        &mut self.report.faults.partitions_halves,
                    )
                } else {
                    (
                        PartitionMode::IsolateOne,
                        &mut self.report.faults.partitions_isolate,
                    )
                };
                *count += 1;
                let one_way = self.nemesis_rng.chance(self.knobs.one_way_p);
                if one_way {
                    self.report.faults.one_way += 1;
                }
                let p = self
                    .net
                    .partition(&mut self.nemesis_rng, self.now, &ids, mode, one_way)
                    .clone();
                let dur = self.knobs.partition_stability_min_us
                    + self.nemesis_rng.below(self.knobs.partition_max_us);
                self.schedule(self.now + dur, Event::HealPartition(p.id));
                self.trace(|| {
                    format!(
                        "partition #{} {mode:?} side {:?} one_way={one_way} for {dur}us",
                        p.id, p.side
                    )
                });
            }
            NemesisAction::Heal => {
                if stable && self.net.partition.is_some() {
                    self.net.heal();
                    self.report.faults.heals += 1;
                    self.trace(|| "heal".to_string());
                }
            }
            NemesisAction::Crash => {
                let d = ids[self.nemesis_rng.below(n) as usize];
                let d = self.aim_at_coordinator(d);
                let d = self.aim_at_unsynced(d);
                if self.nodes[&d].device.is_none()
                    || (self.nodes[&d].paused_until.is_none()
                        && self.down_count() >= self.knobs.down_max)
                {
                    return;
                }
                let delay = 1 + self.nemesis_rng.below(self.knobs.restart_max_us);
                if self.nemesis_rng.chance(self.knobs.torn_crash_p) {
                    self.nodes.get_mut(&d).expect("node").torn_crash = Some(delay);
                    self.trace(|| format!("{d} will crash in its next batch"));
                } else {
                    self.crash(d, false);
                    self.schedule(self.now + delay, Event::Restart(d));
                }
            }
            NemesisAction::Pause => {
                let d = ids[self.nemesis_rng.below(n) as usize];
                let aimed = self.aim_at_coordinator(d);
                if !self.running(aimed) || self.down_count() >= self.knobs.down_max {
                    return;
                }
                let d = aimed;
                let dur = 1 + self.nemesis_rng.below(self.knobs.pause_max_us);
                self.nodes.get_mut(&d).expect("node").paused_until = Some(self.now + dur);
                self.report.faults.pauses += 1;
                self.schedule(self.now + dur, Event::Resume(d));
                self.trace(|| format!("{d} pauses for {dur}us"));
            }
        }
    }

    /// An operator's outside-policy command to a store's manager: migrate it to a random
    /// device, replace one of its chunks with a new one on a random device, or relayout
    /// (same chunks, or one fewer when it has more than the bootstrap replication).
    pub(super) fn policy(&mut self) {
        let r = &mut self.policy_rng;
        let store = StoreId(r.below(self.cfg.stores as u64) as u32);
        let target = DeviceId(1 + r.below(self.cfg.devices));
        let kind = r.below(3);
        let pick = r.next_u64();
        let target = self.policy_target(target);
        let Some((mgr, _)) = self.manager_of(store) else {
            return;
        };
        let Some(view) = self.nodes[&mgr]
            .device
            .as_ref()
            .and_then(|d| d.manager_view(store))
        else {
            return;
        };
        let chunks: Vec<_> = view.metadata.chunks.iter().copied().collect();
        if chunks.is_empty() {
            return;
        }
        let cmd = match kind {
            0 => PolicyCommand::Migrate { store, to: target },
            1 => PolicyCommand::ReplaceChunk {
                store,
                old: chunks[(pick % chunks.len() as u64) as usize],
                device: target,
            },
            _ => {
                let mut md: Metadata = view.metadata.clone();
                if chunks.len() > self.cfg.replication {
                    md.chunks
                        .remove(&chunks[(pick % chunks.len() as u64) as usize]);
                }
                PolicyCommand::Relayout {
                    store,
                    metadata: md,
                }
            }
        };
        self.report.policy_commands += 1;
        let boot = self.nodes[&mgr].boot;
        let lat = self.knobs.latency_min_us;
        self.schedule(self.now + lat, Event::PolicyArrive { to: mgr, boot, cmd });
    }
}
