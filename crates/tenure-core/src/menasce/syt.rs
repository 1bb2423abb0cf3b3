//! Logical component merge, the merge phase (seed 004 §4.5–§4.6): SUBSTITUTE YOUR TABLE.
//!
//! With the secondary's READY TO MERGE in hand and its own outstanding requests complete,
//! the primary LC1 builds the union of the two LOCK tables and sends SYT for a cycle
//! through `TEMP_U = U1 ∪ U2`: LC2 first, then the other sites in the nomination order
//! after LC1. Each site substitutes its LOCK table, its up list (`TEMP_U`) and its LC
//! (LC1), forwards the SYT, and acknowledges it to LC1 (the circular messages' source
//! acknowledgment, §4.1), so LC1 resumes the cycle past a site that crashed. When the
//! SYT comes back LC1 is the LC of the merged component, in NORMAL status.
//!
//! **Conflicting holders.** The seed's union needs no rule for two holders of one lock:
//! an LC grants only locks local to its component (§2) and each LC releases, before the
//! union, the locks no longer local once the sites both up lists name are dropped (§4.5),
//! so the two tables lock data on disjoint sets of sites and never conflict (§6, Theorem
//! 8). Should one lock be in both tables anyway (locality not enforced), the primary's
//! entry is kept: the secondary's holder loses it, as a transaction whose lock stopped
//! being local is aborted. The lab's union checker reports every such case.
//!
//! **Crashes** (§4.6, Theorem 5). The completion point is the first LLC accepting the
//! SYT; no site but LC1 changes its LOCK table, up list or LC before. A crash of LC1
//! before it aborts the merge: LC2, waiting for the SYT, returns to NORMAL. A crash of
//! LC2 (or any other site) in this phase is tolerated: the cycle skips it, and the new
//! up list leaves out the sites the SYT did not reach.

use super::{MenasceMsg, MenasceOut, Pending, PsState, Seq, Site, Status, Syt, Timer};
use crate::ids::DeviceId;
use crate::time::Instant;

impl Site {
    /// LC1: the union of the LOCK tables, and the SYT cycle.
    pub(super) fn start_syt(
        &mut self,
        now: Instant,
        secondary: DeviceId,
        table: Pending,
        max_seq: Seq,
    ) {
        let mut union = self.table.clone();
        if !self.planted.syt_drops_secondary_table {
            for (lock, seq) in table {
                union.entry(lock).or_insert(seq);
            }
        }
        let mut temp_u: Vec<DeviceId> = self.up.clone();
        for s in (self.merging.other_up.iter()).chain([&secondary, &self.me]) {
            if !temp_u.contains(s) {
                temp_u.push(*s);
            }
        }
        let order = self.order.clone();
        temp_u.sort_by_key(|s| order.iter().position(|o| o == s).unwrap_or(usize::MAX));
        let mut cycle = vec![secondary];
        cycle.extend(
            (self.order_after(self.me).into_iter())
                .filter(|s| *s != secondary && temp_u.contains(s)),
        );
        self.max_seq = self.max_seq.max(max_seq);
        self.table = union.clone();
        let syt = Syt {
            primary: self.me,
            secondary,
            table: union,
            up: temp_u,
            cycle,
            visited: vec![self.me],
            max_seq: self.max_seq,
        };
        self.ps = PsState::Primary { secondary };
        self.timers.remove(&Timer::Merge);
        self.forward_syt(now, syt);
    }

    /// The site after `after` in the SYT's cycle (LC1 when the cycle is done).
    fn next_in_syt(syt: &Syt, after: DeviceId) -> DeviceId {
        let rest = match syt.cycle.iter().position(|s| *s == after) {
            Some(i) => &syt.cycle[i + 1..],
            None => &syt.cycle[..],
        };
        (rest.iter())
            .find(|s| !syt.visited.contains(s))
            .copied()
            .unwrap_or(syt.primary)
    }

    /// LC1: send the SYT on from the last site it reached and watch its progress.
    fn forward_syt(&mut self, now: Instant, syt: Syt) {
        let after = syt.visited.last().copied().unwrap_or(self.me);
        let to = Self::next_in_syt(&syt, after);
        self.merging.syt = Some((syt.clone(), to));
        if to == self.me {
            self.syt_complete(syt);
            return;
        }
        self.send(to, MenasceMsg::SubstituteYourTable(Box::new(syt)));
        self.set_timer(Timer::Syt, now + self.settings.merge_timeout);
    }

    /// SYT at a site: substitute the LOCK table, the up list and the LC; forward it;
    /// acknowledge it to LC1. Accepted by the sites that follow LC1 or LC2, and by LC2
    /// itself when it is LC1's secondary and has sent RTM.
    pub(super) fn on_syt(&mut self, mut syt: Syt) {
        if syt.primary == self.me {
            let mine = self.ps
                == (PsState::Primary {
                    secondary: syt.secondary,
                });
            if mine {
                self.syt_complete(syt);
            }
            return;
        }
        let accept = if self.lc == Some(self.me) {
            self.me == syt.secondary
                && self.ps
                    == (PsState::Secondary {
                        primary: syt.primary,
                    })
                && self.merging.rtm_sent
        } else {
            self.status == Status::Normal
                && (self.lc == Some(syt.primary) || self.lc == Some(syt.secondary))
        };
        if !accept {
            return;
        }
        self.table = syt.table.clone();
        self.l_list.clear();
        self.r_list.clear();
        self.outstanding.clear();
        self.up = syt.up.clone();
        self.lc = Some(syt.primary);
        self.status = Status::Normal;
        self.max_seq = self.max_seq.max(syt.max_seq);
        self.ps = PsState::Normal;
        self.merging = Default::default();
        self.timers.remove(&Timer::Merge);
        self.timers.remove(&Timer::Confirm);
        syt.visited.push(self.me);
        let to = Self::next_in_syt(&syt, self.me);
        let visited = syt.visited.clone();
        self.send(to, MenasceMsg::SubstituteYourTable(Box::new(syt.clone())));
        if to != syt.primary {
            self.send(syt.primary, MenasceMsg::SytForwarded { visited, to });
        }
    }

    /// LC1: a site forwarded the SYT to `to`.
    pub(super) fn on_syt_forwarded(&mut self, now: Instant, visited: Vec<DeviceId>, to: DeviceId) {
        let Some((last, sent_to)) = self.merging.syt.as_mut() else {
            return;
        };
        if visited.len() >= last.visited.len() && visited.starts_with(&last.visited) {
            last.visited = visited;
            *sent_to = to;
        }
        self.set_timer(Timer::Syt, now + self.settings.merge_timeout);
    }

    /// LC1: the cycle made no progress — the site it went to crashed before forwarding
    /// it. Resume the cycle past that site.
    pub(super) fn syt_timeout(&mut self, now: Instant) {
        let Some((mut syt, dead)) = self.merging.syt.take() else {
            return;
        };
        syt.cycle.retain(|s| *s != dead);
        self.forward_syt(now, syt);
    }

    /// LC1: the SYT came back — the merged component's LC, in NORMAL status. Its up list
    /// is `TEMP_U` without the sites the SYT did not reach.
    fn syt_complete(&mut self, syt: Syt) {
        let Syt {
            secondary,
            up,
            visited,
            max_seq,
            ..
        } = syt;
        let up: Vec<DeviceId> = up.into_iter().filter(|s| visited.contains(s)).collect();
        self.up = up.clone();
        self.max_seq = self.max_seq.max(max_seq);
        self.next_seq = Seq(self.next_seq.0.max(self.max_seq.0 + 1));
        self.status = Status::Normal;
        self.ps = PsState::Normal;
        self.merging = Default::default();
        self.timers.remove(&Timer::Syt);
        self.timers.remove(&Timer::Merge);
        self.out.push_back(MenasceOut::Merged { secondary, up });
    }
}
