//! Unit tests, one per rule of seed 004 §3–§4, on a small driver: every message takes one
//! message time, channels are FIFO, a crashed site loses what it had not yet sent and
//! what is sent to it.

use super::*;

pub(super) const MT: u64 = 1_000;

pub(super) fn d(i: u64) -> DeviceId {
    DeviceId(i)
}

pub(super) struct Net {
    pub(super) now: u64,
    pub(super) sites: BTreeMap<DeviceId, Site>,
    pub(super) crashed: BTreeSet<DeviceId>,
    pub(super) queue: BTreeMap<(u64, u64), (DeviceId, DeviceId, MenasceMsg)>,
    pub(super) seq: u64,
    /// Messages sent, by the seed's name.
    pub(super) sent: BTreeMap<&'static str, u64>,
    pub(super) became_lc: Vec<DeviceId>,
    pub(super) granted: Vec<(LockId, bool)>,
    /// Merges completed: (primary, secondary).
    pub(super) merged: Vec<(DeviceId, DeviceId)>,
    /// Directed links cut by a partition: messages sent over them are lost.
    pub(super) cut: BTreeSet<(DeviceId, DeviceId)>,
}

pub(super) fn settings() -> Settings {
    Settings::for_message_time(Duration::from_micros(MT))
}

impl Net {
    /// `n` sites, LC `d(1)`.
    pub(super) fn new(n: u64) -> Net {
        let order: Vec<DeviceId> = (1..=n).map(d).collect();
        let sites = (order.iter())
            .map(|s| (*s, Site::new(*s, order.clone(), d(1), settings())))
            .collect();
        Net {
            now: 0,
            sites,
            crashed: BTreeSet::new(),
            queue: BTreeMap::new(),
            seq: 0,
            sent: BTreeMap::new(),
            became_lc: Vec::new(),
            granted: Vec::new(),
            merged: Vec::new(),
            cut: BTreeSet::new(),
        }
    }

    pub(super) fn site(&mut self, s: DeviceId) -> &mut Site {
        self.sites.get_mut(&s).expect("site")
    }

    pub(super) fn drain(&mut self, s: DeviceId) {
        while let Some(o) = self.sites.get_mut(&s).and_then(Site::poll_output) {
            match o {
                MenasceOut::Send { to, msg } => {
                    *self.sent.entry(msg.name()).or_default() += 1;
                    if self.cut.contains(&(s, to)) {
                        continue;
                    }
                    self.seq += 1;
                    self.queue.insert((self.now + MT, self.seq), (s, to, msg));
                }
                MenasceOut::BecameLc => self.became_lc.push(s),
                MenasceOut::Granted { lock, lock_request } => {
                    self.granted.push((lock, lock_request))
                }
                MenasceOut::Merged { secondary, .. } => self.merged.push((s, secondary)),
            }
        }
    }

    pub(super) fn call(&mut self, s: DeviceId, f: impl FnOnce(&mut Site, Instant)) {
        let now = Instant(self.now);
        f(self.site(s), now);
        self.drain(s);
    }

    pub(super) fn crash(&mut self, s: DeviceId) {
        self.crashed.insert(s);
        self.queue.retain(|_, (from, _, _)| *from != s);
    }

    pub(super) fn run_for(&mut self, us: u64) {
        let end = self.now + us;
        loop {
            let ev = self.queue.keys().next().map(|k| k.0);
            let timer = (self.sites.iter())
                .filter(|(s, _)| !self.crashed.contains(s))
                .filter_map(|(_, p)| p.poll_timeout().map(|t| t.0))
                .min();
            let Some(t) = [ev, timer].into_iter().flatten().min() else {
                break;
            };
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            if ev == Some(t) {
                let (_, (from, to, msg)) = self.queue.pop_first().expect("event");
                if !self.crashed.contains(&to) {
                    self.call(to, |p, now| p.handle_msg(now, from, msg));
                }
            } else {
                let due: Vec<DeviceId> = (self.sites.iter())
                    .filter(|(s, p)| {
                        !self.crashed.contains(s) && p.poll_timeout().is_some_and(|x| x.0 <= t)
                    })
                    .map(|(s, _)| *s)
                    .collect();
                for s in due {
                    self.call(s, |p, now| p.handle_timeout(now));
                }
            }
        }
        self.now = end;
    }

    pub(super) fn count(&self, name: &str) -> u64 {
        self.sent.get(name).copied().unwrap_or(0)
    }

    pub(super) fn live(&self) -> Vec<&Site> {
        (self.sites.iter())
            .filter(|(s, _)| !self.crashed.contains(s))
            .map(|(_, p)| p)
            .collect()
    }

    /// Every live site agrees on one working LC, in NORMAL status.
    pub(super) fn one_lc(&self) -> DeviceId {
        let live = self.live();
        let lcs: Vec<DeviceId> = live.iter().filter(|p| p.is_lc()).map(|p| p.id()).collect();
        assert_eq!(lcs.len(), 1, "LCs: {lcs:?}");
        for p in &live {
            assert_eq!(p.status(), Status::Normal, "site {}", p.id());
            assert_eq!(p.lc(), Some(lcs[0]), "site {}", p.id());
        }
        lcs[0]
    }

    pub(super) fn tables(&self) -> Vec<Vec<LockId>> {
        (self.live().iter())
            .map(|p| p.table().keys().copied().collect())
            .collect()
    }
}

pub(super) fn x(i: u64) -> LockId {
    LockId(i)
}

// seed 004 §3.1 lock granting algorithm: AL to every LLC, LA back, CL — the lock is in
// every LOCK table, 3 messages per LLC.
#[test]
fn lock_granting_is_safetalk_al_la_cl() {
    let mut n = Net::new(4);
    n.call(d(1), |p, now| {
        p.lock(now, x(7)).expect("lc");
    });
    n.run_for(10 * MT);
    assert_eq!((n.count("AL"), n.count("LA"), n.count("CL")), (3, 3, 3));
    assert_eq!(n.granted, vec![(x(7), true)]);
    assert!(n.tables().iter().all(|t| t == &vec![x(7)]));
    assert!(n.live().iter().all(|p| p.l_list().is_empty()));
}

// seed 004 §3.2 lock releasing algorithm: AR, RA, CR — the lock leaves every table.
#[test]
fn lock_releasing_is_safetalk_ar_ra_cr() {
    let mut n = Net::new(3);
    n.call(d(1), |p, now| {
        p.lock(now, x(1)).expect("lc");
    });
    n.run_for(10 * MT);
    n.call(d(1), |p, now| {
        p.release(now, x(1)).expect("held");
    });
    n.run_for(10 * MT);
    assert_eq!((n.count("AR"), n.count("RA"), n.count("CR")), (2, 2, 2));
    assert!(n.tables().iter().all(Vec::is_empty));
}

#[test]
fn requests_at_the_wrong_site_or_moment_are_refused() {
    let mut n = Net::new(3);
    let now = Instant(0);
    assert!(matches!(
        n.site(d(2)).lock(now, x(1)),
        Err(MenasceError::NotLc { .. })
    ));
    assert_eq!(
        n.site(d(1)).release(now, x(1)),
        Err(MenasceError::NotLocked(x(1)))
    );
    n.site(d(1)).lock(now, x(1)).expect("lc");
    assert_eq!(
        n.site(d(1)).lock(now, x(1)),
        Err(MenasceError::AlreadyLocked(x(1)))
    );
}

/// Let the LC send AL for `lock`, deliver it to `reach` only, then crash the LC.
fn crash_lc_mid_accept(n: &mut Net, lock: LockId, reach: &[DeviceId]) {
    n.call(d(1), |p, now| {
        p.lock(now, lock).expect("lc");
    });
    let keep: Vec<_> = (n.queue.iter())
        .filter(|(_, (_, to, _))| reach.contains(to))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    n.crash(d(1));
    n.queue.extend(keep);
    n.run_for(MT);
}

// §4.1 LCR, Table II cases 3, 5, 6: a lock in at least one L-list ends in every LOCK
// table (maximum forward progress); the next site after the crashed LC in the nomination
// order is the new LC; AN, NA cycle, UT / RU / RNA.
#[test]
fn lcr_adds_a_lock_some_llc_accepted_to_every_table() {
    let mut n = Net::new(5);
    crash_lc_mid_accept(&mut n, x(9), &[d(4)]);
    n.call(d(3), |p, now| p.detect_lc_crash(now));
    n.run_for(100 * MT);
    assert_eq!(n.one_lc(), d(2));
    assert!(n.tables().iter().all(|t| t == &vec![x(9)]));
    // 4 survivors: AN + ack, NA round 4 sites, 2 NA acks (the last forward returns to
    // the generator), UT/RU/RNA to 3 sites.
    assert_eq!((n.count("AN"), n.count("AN-ack")), (1, 1));
    assert_eq!((n.count("NA"), n.count("NA-ack")), (4, 2));
    assert_eq!((n.count("UT"), n.count("RU"), n.count("RNA")), (3, 3, 3));
    assert_eq!(n.site(d(2)).up(), &[d(2), d(3), d(4), d(5)]);
    // The new LC numbers requests after every sequence number it collected.
    let now = Instant(n.now);
    let s = n.site(d(2)).lock(now, x(10)).expect("lc");
    assert!(s > Seq(1));
}

// §4.1 Table II case 1: a request no surviving site accepted is lost (the application
// program times out and resubmits it).
#[test]
fn lcr_forgets_a_request_no_llc_accepted() {
    let mut n = Net::new(4);
    crash_lc_mid_accept(&mut n, x(9), &[]);
    n.call(d(4), |p, now| p.detect_lc_crash(now));
    n.run_for(100 * MT);
    n.one_lc();
    assert!(n.tables().iter().all(Vec::is_empty));
}

/// Grant `lock`, then let the LC start releasing it with AR reaching `reach` only (and
/// the earlier CL reaching `confirmed` only), then crash the LC.
fn crash_lc_mid_release(n: &mut Net, lock: LockId, confirmed: &[DeviceId], reach: &[DeviceId]) {
    n.call(d(1), |p, now| {
        p.lock(now, lock).expect("lc");
    });
    n.run_for(2 * MT + MT / 2);
    // Only the CLs to `confirmed` are delivered.
    n.queue.retain(|_, (_, to, m)| {
        !matches!(m, MenasceMsg::ConfirmLock { .. }) || confirmed.contains(to)
    });
    n.run_for(MT);
    n.call(d(1), |p, now| {
        p.release(now, lock).expect("held");
    });
    n.queue.retain(|_, (_, to, m)| {
        !matches!(m, MenasceMsg::AcceptRelease { .. }) || reach.contains(to)
    });
    n.run_for(MT);
    n.crash(d(1));
}

// §4.1 Table II cases 9–11, the seed's own scenario: LLC1 confirmed the lock and accepted
// its release, LLC2 still has the lock in its L-list. The release is later by sequence
// number: the lock leaves every table.
#[test]
fn lcr_the_later_of_a_lock_and_its_release_wins() {
    let mut n = Net::new(4);
    crash_lc_mid_release(&mut n, x(5), &[d(2), d(3)], &[d(2)]);
    assert_eq!(n.site(d(2)).r_list().len(), 1);
    assert_eq!(n.site(d(4)).l_list().len(), 1);
    n.call(d(4), |p, now| p.detect_lc_crash(now));
    n.run_for(100 * MT);
    n.one_lc();
    assert!(n.tables().iter().all(Vec::is_empty), "{:?}", n.tables());
}

// The planted bug: the NA merge ignores sequence numbers and keeps the released lock.
#[test]
fn planted_bug_merge_ignores_seq_keeps_a_released_lock() {
    let mut n = Net::new(4);
    for s in 2..=4 {
        n.site(d(s)).planted.merge_ignores_seq = true;
    }
    crash_lc_mid_release(&mut n, x(5), &[d(2), d(3)], &[d(2)]);
    n.call(d(4), |p, now| p.detect_lc_crash(now));
    n.run_for(100 * MT);
    assert!(n.tables().iter().any(|t| t == &vec![x(5)]));
}

// §4.1 nomination order, Definition 6: a nominee that does not acknowledge the AN after
// its retransmissions is taken for down; the next site is nominated with trial sequence
// [nominee], which the NA carries.
#[test]
fn a_down_nominee_is_skipped_and_joins_the_trial_sequence() {
    let mut n = Net::new(5);
    n.crash(d(1));
    n.crash(d(2));
    n.call(d(4), |p, now| p.detect_lc_crash(now));
    n.run_for(200 * MT);
    assert_eq!(n.one_lc(), d(3));
    let tries = 1 + settings().an_retries as u64;
    assert_eq!(n.count("AN"), tries + 1);
    assert_eq!(n.site(d(3)).up(), &[d(3), d(4), d(5)]);
}

// §4.1 "algorithm to process an NA message at site i": an NA whose LC is in the trial
// list T belongs to an earlier nominee — KILL NA; a generator killed stops its cycle.
#[test]
fn an_na_of_an_earlier_nominee_is_killed() {
    let order: Vec<DeviceId> = (1..=5).map(d).collect();
    let mut s4 = Site::new(d(4), order.clone(), d(1), settings());
    let na = |k: u64, trial: Vec<DeviceId>| Na {
        new_lc: d(k),
        old_lc: d(1),
        trial,
        cycle: vec![d(4), d(5)],
        visited: vec![d(k)],
        l: Pending::new(),
        r: Pending::new(),
        max_seq: Seq(0),
    };
    s4.handle_msg(
        Instant(0),
        d(3),
        MenasceMsg::NominationAccepted(Box::new(na(3, vec![d(2)]))),
    );
    while s4.poll_output().is_some() {}
    assert_eq!(s4.trial(), Some(&[d(2)][..]));
    s4.handle_msg(
        Instant(1),
        d(2),
        MenasceMsg::NominationAccepted(Box::new(na(2, vec![]))),
    );
    assert_eq!(
        s4.poll_output(),
        Some(MenasceOut::Send {
            to: d(2),
            msg: MenasceMsg::KillNa { trial: vec![] }
        })
    );
    assert_eq!(s4.poll_output(), None);
    // The later nominee's NA is accepted over an earlier one's.
    let mut s5 = Site::new(d(5), order, d(1), settings());
    s5.handle_msg(
        Instant(0),
        d(2),
        MenasceMsg::NominationAccepted(Box::new(na(2, vec![]))),
    );
    s5.handle_msg(
        Instant(1),
        d(3),
        MenasceMsg::NominationAccepted(Box::new(na(3, vec![d(2)]))),
    );
    assert_eq!(s5.trial(), Some(&[d(2)][..]));
}

// §4.1 race: the nominee's acknowledgment is slow, the nominator nominates the next site
// too; the later nominee's NA wins, the earlier one is killed or steps down — one LC.
#[test]
fn two_nominees_end_with_one_lc() {
    let mut n = Net::new(6);
    n.crash(d(1));
    n.call(d(5), |p, now| p.detect_lc_crash(now));
    // Hold d(2) back: everything it is sent arrives late.
    let mut held = Vec::new();
    for _ in 0..20 {
        n.run_for(MT / 2);
        let late: Vec<_> = (n.queue.iter())
            .filter(|(_, (_, to, _))| *to == d(2))
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (k, v) in late {
            n.queue.remove(&k);
            held.push(v);
        }
    }
    assert!(n.count("AN") >= 3, "{:?}", n.sent);
    for (from, to, msg) in held {
        n.seq += 1;
        n.queue.insert((n.now + MT, n.seq), (from, to, msg));
    }
    n.run_for(300 * MT);
    assert_eq!(n.one_lc(), d(3));
}

// §4.1 circular messages, §4.2 case 1(b): a site that crashed in the cycle is skipped by
// the generator, which resumes the NA at the next site; it is left out of U.
#[test]
fn the_generator_resumes_the_cycle_past_a_crashed_site() {
    let mut n = Net::new(5);
    crash_lc_mid_accept(&mut n, x(3), &[d(5)]);
    n.crash(d(4));
    n.call(d(3), |p, now| p.detect_lc_crash(now));
    n.run_for(200 * MT);
    assert_eq!(n.one_lc(), d(2));
    assert_eq!(n.site(d(2)).up(), &[d(2), d(3), d(5)]);
    assert!(n.tables().iter().all(|t| t == &vec![x(3)]));
}

// §4.2 Theorem 2: the new LC crashes in the LOCK table update phase (after UT); the
// sites time out and LCR restarts with the next site; the outcome is the same.
#[test]
fn a_new_lc_crash_after_update_table_restarts_lcr() {
    let mut n = Net::new(5);
    crash_lc_mid_accept(&mut n, x(8), &[d(3)]);
    n.call(d(4), |p, now| p.detect_lc_crash(now));
    while n.count("UT") == 0 {
        n.run_for(MT / 2);
    }
    n.crash(d(2));
    n.run_for(500 * MT);
    assert_eq!(n.one_lc(), d(3));
    assert!(
        n.tables().iter().all(|t| t == &vec![x(8)]),
        "{:?}",
        n.tables()
    );
}

// §4.1 crash detection by an LLC: a CONFIRM that does not come is a crashed LC.
#[test]
fn an_llc_waiting_for_confirm_detects_the_crash() {
    let order: Vec<DeviceId> = (1..=3).map(d).collect();
    let mut s = settings();
    s.confirm_timeout = Some(Duration::from_micros(10 * MT));
    let mut n = Net::new(3);
    for i in 1..=3 {
        *n.site(d(i)) = Site::new(d(i), order.clone(), d(1), s.clone());
    }
    crash_lc_mid_accept(&mut n, x(1), &[d(2), d(3)]);
    n.run_for(200 * MT);
    assert_eq!(n.one_lc(), d(2));
    assert!(n.tables().iter().all(|t| t == &vec![x(1)]));
}

// §4.3 single node recovery: WLC, HI THERE, the LOCK table and up list, and an ACCEPT
// for every outstanding request.
#[test]
fn snr_gets_the_table_and_the_outstanding_requests() {
    let mut n = Net::new(4);
    n.call(d(1), |p, now| {
        p.lock(now, x(1)).expect("lc");
    });
    n.run_for(10 * MT);
    n.crash(d(4));
    n.call(d(1), |p, now| {
        p.lock(now, x(2)).expect("lc");
    });
    n.run_for(10 * MT);
    // d(4) never answers: x(2) stays outstanding at the LC.
    assert_eq!(n.site(d(1)).outstanding().count(), 1);
    n.crashed.remove(&d(4));
    *n.site(d(4)) = Site::coming_up(d(4), (1..=4).map(d).collect(), settings());
    n.call(d(4), |p, now| p.recover(now));
    n.run_for(20 * MT);
    assert_eq!((n.count("WLC"), n.count("HT")), (3, 1));
    assert_eq!(n.one_lc(), d(1));
    assert!(
        n.tables().iter().all(|t| t == &vec![x(1), x(2)]),
        "{:?}",
        n.tables()
    );
}

// §4.3: no answer naming a NORMAL component — the site is the LC of a component of its
// own, with empty tables.
#[test]
fn snr_alone_becomes_its_own_lc() {
    let mut n = Net::new(3);
    n.crash(d(1));
    n.crash(d(2));
    *n.site(d(3)) = Site::coming_up(d(3), (1..=3).map(d).collect(), settings());
    n.call(d(3), |p, now| p.recover(now));
    n.run_for(20 * MT);
    assert_eq!(n.became_lc, vec![d(3)]);
    assert!(n.site(d(3)).is_lc());
    assert_eq!(n.site(d(3)).up(), &[d(3)]);
}
