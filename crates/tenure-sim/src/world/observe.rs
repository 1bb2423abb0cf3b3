//! What a device observes, fed to the checkers and mixed into the run's fingerprint.

use super::World;
use tenure_core::DeviceId;
use tenure_core::io::{EpochCause, Observation};

impl World {
    /// Feed one observation of `d` (its `tick`-th input or output) to the checkers.
    pub(super) fn observe(&mut self, d: DeviceId, tick: u64, ob: Observation) {
        self.trace(|| format!("{d} observe {ob:?}"));
        match ob {
            Observation::BecameManager {
                store,
                epoch,
                cause,
                ..
            } => {
                self.mix(0x1000 ^ d.0 ^ (store.0 as u64) << 8 ^ epoch.0 << 32);
                self.checker.became_manager(d, store, epoch);
                self.lock_takeover(d, store);
                if let Some(r) = self.restore.as_mut()
                    && let Some(t) =
                        (self.nodes[&d].device.as_ref()).and_then(|dev| dev.managed_tables(store))
                {
                    r.takeovers.push((store, d, t.clone()));
                }
                match cause {
                    EpochCause::Regeneration => self.report.regenerations += 1,
                    EpochCause::Migration => self.report.migrations += 1,
                    EpochCause::Relayout => self.report.relayouts += 1,
                }
            }
            Observation::ChunkServed { chunk, epoch } => {
                self.mix(0x2000 ^ chunk.serial << 8 ^ epoch.0 << 32);
                self.members.chunk_served(d, chunk);
                let node = &self.nodes[&d];
                let view = node.device.as_ref().and_then(|x| x.chunk_view(chunk));
                let local = node.clock.local(self.now);
                self.checker
                    .chunk_served(chunk, epoch, view, local, self.clock_drift);
            }
            Observation::WriteAcked {
                store,
                key,
                version,
                ..
            } => {
                self.mix(0x3000 ^ key << 8 ^ version.seq << 24 ^ version.epoch.0 << 48);
                self.report.writes_acked += 1;
                let chunks = self.nodes.values().flat_map(|n| n.written.chunks.values());
                self.checker.write_acked(store, key, version, chunks);
            }
            Observation::ChunkCommitted { chunk, epoch } => {
                self.mix(0x4000 ^ chunk.serial << 8 ^ epoch.0 << 32);
                if let Some(rec) = self.nodes[&d].written.chunks.get(&chunk) {
                    self.checker
                        .chunk_committed(chunk, rec.store, epoch, &rec.data);
                }
            }
            Observation::ChunkCollected { chunk } => {
                self.mix(0x5000 ^ chunk.serial);
                self.checker.chunk_collected(chunk);
            }
            Observation::SessionEnding {
                store,
                session,
                released,
                expired,
                epoch,
            } => {
                // A manager deposed by a later epoch (one resuming from a pause, say)
                // decides in vain: its change cannot commit, so the end never happens.
                if expired && !self.checker.superseded(store, epoch) {
                    self.locks.session_expired(store, session, self.now);
                }
                self.mix(0x7000 ^ session.0 << 8);
                self.cuts.facts.session_touched(tick, store, session);
                self.locks
                    .session_ending(store, d, session, &released, self.now);
            }
            Observation::SessionAttached {
                store,
                session,
                child_store,
                child,
            } => {
                self.mix(0x7800 ^ child.0 << 8);
                (self.session_children).insert((store, session, child_store), child);
            }
            Observation::SessionEnded { store, session, .. } => {
                self.mix(0x8000 ^ session.0 << 8);
                self.report.locks.session_ends += 1;
                self.locks.session_ended(store, d, session, self.now);
            }
            Observation::Coordinator { term } => {
                self.mix(0x9000 ^ term.n << 8 ^ term.leader.0 << 40);
                self.elections.coordinator(d, term);
                let record = self.record_of(d);
                self.members.coordinator(d, term, &record);
            }
            Observation::CommandSent { term, .. } => {
                self.mix(0xa000 ^ term.n << 8);
                self.elections.command_sent(d, term);
            }
            Observation::CommandApplied { term, .. } => {
                self.mix(0xb000 ^ term.n << 8);
                self.elections.command_applied(d, term);
                let record = self.record_of(d);
                self.members.command_applied(d, term, &record);
            }
            Observation::CommandRefused { .. } => {
                self.mix(0xc000);
                self.elections.command_refused();
            }
            Observation::Members { members } => {
                self.mix(0xd000 ^ members.version.n << 8 ^ members.version.term.n << 32);
                self.members.adopted(self.now, d, &members);
                self.membership_note_done();
            }
            Observation::Retired => {
                self.mix(0xe000 ^ d.0);
                self.nodes.get_mut(&d).expect("node").retire_pending = true;
            }
            _ => self.mix(0x6000),
        }
    }
}
