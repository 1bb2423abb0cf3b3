//! The tracker's view of the channels and records: regular messages numbered per
//! directed channel, what each device processed and sent when it recorded, the parts it
//! reported and the messages it logged on its channels, and each snapshot's end.

use super::{Cut, CutTracker, Log, PartInfo, Record, SnapshotViolation, Started, carried};
use std::collections::BTreeMap;
use tenure_core::DeviceId;
use tenure_core::msg::Msg;
use tenure_core::snapshot::{SnapshotId, SnapshotPart};

impl CutTracker {
    /// A regular message leaves `from` for `to`: its number on the channel.
    pub fn send(&mut self, from: DeviceId, to: DeviceId) -> u64 {
        if let Some(h) = self.held.get_mut(&(from, to)) {
            *h = h.saturating_sub(1);
        }
        let s = self.sent.entry((from, to)).or_default();
        *s += 1;
        *s
    }

    /// `from` output a regular message for `to`, which leaves (is [`send`](Self::send))
    /// now or once what it may depend on is durable, before any message output after
    /// it. A record in between counts it as sent: the state recorded is past it.
    pub fn produced(&mut self, from: DeviceId, to: DeviceId) {
        *self.held.entry((from, to)).or_default() += 1;
    }

    /// Message `seq` of `from → to` is delivered to `to` (boot `boot`), which processes
    /// it now: log it for the snapshots `to` is recording.
    pub fn delivering(&mut self, from: DeviceId, to: DeviceId, boot: u64, seq: u64, msg: &Msg) {
        let Some(inner) = carried(msg) else {
            return;
        };
        for ((_, d), log) in self.logs.iter_mut() {
            if *d == to && log.boot == boot {
                log.from.entry(from).or_default().push((seq, inner.clone()));
            }
        }
    }

    /// Message `seq` of `from → to` was processed. With an asynchronous disk, `group` is
    /// the newest write group of `to` when it was: its effects are durable once that group
    /// is ([`synced`](Self::synced)), and lost with it ([`lost`](Self::lost)).
    pub fn processed(&mut self, from: DeviceId, to: DeviceId, seq: u64, group: Option<u64>) {
        let p = self.processed.entry((from, to)).or_default();
        *p = (*p).max(seq);
        match group {
            Some(g) => self.unsynced.entry(to).or_default().push((from, seq, g)),
            None => {
                let p = self.durable.entry((from, to)).or_default();
                *p = (*p).max(seq);
            }
        }
    }

    /// Every write group of `d` up to `group` is durable.
    pub fn synced(&mut self, d: DeviceId, group: u64) {
        let Some(list) = self.unsynced.get_mut(&d) else {
            return;
        };
        for (from, seq, _) in list.iter().filter(|(_, _, g)| *g <= group) {
            let p = self.durable.entry((*from, d)).or_default();
            *p = (*p).max(*seq);
        }
        list.retain(|(_, _, g)| *g > group);
    }

    /// `d` crashed and only its write groups up to `kept` reached the disk: the state it
    /// restarts from reflects no message it processed after them, so as far as its cut
    /// can go those were never processed (their effects that had left wait for nothing
    /// the crash lost).
    pub fn lost(&mut self, d: DeviceId, kept: u64) {
        self.synced(d, kept);
        self.unsynced.remove(&d);
        for ((from, to), n) in self.processed.iter_mut() {
            if *to == d {
                *n = self.durable.get(&(*from, d)).copied().unwrap_or(0);
            }
        }
    }

    /// A snapshot started at its initiator.
    pub fn started(&mut self, id: SnapshotId, calm: bool) {
        self.stats.started += 1;
        self.started.insert(id, Started { calm, result: None });
    }

    /// `d` (boot `boot`) recorded `id` at output `tick`, at real time `now`. `delivering`
    /// is the message being processed, if any: (sender, number, whether any of its
    /// effects already left before the record).
    #[allow(clippy::too_many_arguments)]
    pub fn recorded(
        &mut self,
        id: SnapshotId,
        d: DeviceId,
        boot: u64,
        tick: u64,
        now: u64,
        peers: &[DeviceId],
        delivering: Option<(DeviceId, u64, bool)>,
    ) {
        let mut processed = BTreeMap::new();
        let mut sent = BTreeMap::new();
        for p in peers.iter().copied().filter(|p| *p != d) {
            let mut n = self.processed.get(&(p, d)).copied().unwrap_or(0);
            if let Some((from, seq, true)) = delivering
                && from == p
            {
                n = n.max(seq);
            }
            processed.insert(p, n);
            let held = self.held.get(&(d, p)).copied().unwrap_or(0);
            sent.insert(p, self.sent.get(&(d, p)).copied().unwrap_or(0) + held);
        }
        let recs = self.records.entry((id, d)).or_default();
        if !recs.is_empty() {
            self.stats.rerecords += 1;
            self.violations
                .push(SnapshotViolation::RecordedTwice { id, device: d });
        }
        recs.push(Record {
            boot,
            tick,
            processed,
            sent,
        });
        self.logs.insert(
            (id, d),
            Log {
                boot,
                since_us: now,
                from: BTreeMap::new(),
            },
        );
    }

    /// `d` (boot `boot`) emitted its part of a snapshot: match its recorded channels with
    /// the messages it received since it recorded.
    pub fn part(&mut self, d: DeviceId, boot: u64, part: SnapshotPart) {
        self.stats.parts += 1;
        let id = part.id;
        let record = self
            .records
            .get(&(id, d))
            .and_then(|r| r.iter().rev().find(|r| r.boot == boot))
            .cloned();
        let log = self.logs.remove(&(id, d)).filter(|l| l.boot == boot);
        let (Some(record), Some(log)) = (record, log) else {
            self.violations.push(SnapshotViolation::Incomplete {
                id,
                why: format!("{d} emitted a part without recording in this boot"),
            });
            return;
        };
        let mut seqs = BTreeMap::new();
        for (from, msgs) in &part.channels {
            self.stats.channel_messages += msgs.len() as u64;
            let got = log.from.get(from).map(Vec::as_slice).unwrap_or(&[]);
            let mut nums = Vec::new();
            for (i, m) in msgs.iter().enumerate() {
                self.stats.channel_checks += 1;
                match got.get(i) {
                    Some((seq, delivered)) if delivered == m => nums.push(*seq),
                    Some((seq, _)) => {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *from,
                            to: d,
                            why: format!(
                                "message {i} recorded differs from message #{seq} delivered"
                            ),
                        });
                        return;
                    }
                    None => {
                        self.violations.push(SnapshotViolation::BadChannel {
                            id,
                            from: *from,
                            to: d,
                            why: format!(
                                "{} messages recorded but {} delivered after the record",
                                msgs.len(),
                                got.len()
                            ),
                        });
                        return;
                    }
                }
            }
            seqs.insert(*from, nums);
        }
        self.parts
            .entry(id)
            .or_default()
            .insert(d, PartInfo { record, part, seqs });
    }

    /// A crash lost the persist by which `d` (boot `boot`) remembered recording `ids`
    /// before it became durable: nothing that followed those records left the device (its
    /// markers, tagged messages and Done/Continue wait for that persist), so as far as
    /// anyone can tell they never happened, and `d` may record the snapshots once more.
    /// Every persist after that one was lost too: the state `d` restarts from reflects
    /// no message it processed after those records, whatever it processed since.
    pub fn unrecorded(&mut self, d: DeviceId, boot: u64, ids: &[SnapshotId]) {
        for id in ids {
            if let Some(recs) = self.records.get_mut(&(*id, d)) {
                for r in recs.iter().filter(|r| r.boot == boot) {
                    for (p, n) in &r.processed {
                        let seen = self.processed.entry((*p, d)).or_default();
                        *seen = (*seen).min(*n);
                    }
                }
                recs.retain(|r| r.boot != boot);
            }
            if let Some(parts) = self.parts.get_mut(id)
                && parts.get(&d).is_some_and(|p| p.record.boot == boot)
            {
                parts.remove(&d);
            }
            self.logs.remove(&(*id, d));
        }
    }

    /// Device `d` crashed: it records nothing more in that boot.
    pub fn crashed(&mut self, d: DeviceId) {
        self.logs.retain(|(_, x), _| *x != d);
        // What it held never leaves.
        self.held.retain(|(from, _), _| *from != d);
    }

    /// Forget logs of snapshots a device must have given up on by now.
    pub fn prune(&mut self, now: u64, timeout_us: u64) {
        self.logs
            .retain(|_, l| now.saturating_sub(l.since_us) <= timeout_us + 1_000_000);
    }

    /// A snapshot ended at its initiator. A complete one is checked as a cut; returned
    /// for a restore if it passed.
    pub fn ended(
        &mut self,
        id: SnapshotId,
        result: Result<tenure_core::io::SnapshotSummary, String>,
        devices: &[DeviceId],
    ) -> Option<Cut> {
        let entry = self.started.entry(id).or_insert(Started {
            calm: false,
            result: None,
        });
        match result {
            Err(why) => {
                self.stats.failed += 1;
                entry.result = Some(Err(why));
                self.parts.remove(&id);
                None
            }
            Ok(summary) => {
                entry.result = Some(Ok(()));
                self.stats.completed += 1;
                self.stats.terminated += summary.terminated as u64;
                let before = self.violations.len();
                let cut = self.check_cut(id, &summary, devices);
                (self.violations.len() == before).then_some(cut).flatten()
            }
        }
    }

    /// Snapshots started after faults stopped that have not completed (at the end of the
    /// run).
    pub fn calm_unfinished(&self) -> Vec<(SnapshotId, String)> {
        (self.started.iter())
            .filter(|(_, s)| s.calm)
            .filter_map(|(id, s)| match &s.result {
                Some(Ok(())) => None,
                Some(Err(why)) => Some((*id, why.clone())),
                None => Some((*id, "no result".to_string())),
            })
            .collect()
    }

    /// Whether `id` was started after faults stopped.
    pub fn is_calm(&self, id: SnapshotId) -> bool {
        self.started.get(&id).is_some_and(|s| s.calm)
    }

    /// Whether every snapshot started after faults stopped has a result.
    pub fn calm_all_ended(&self) -> bool {
        (self.started.values())
            .filter(|s| s.calm)
            .all(|s| s.result.is_some())
    }
}
