//! Lecture Fig. 14.7 measured (seed 002 §14.4): messages per entry/exit and delay before
//! entry, in message times, of the four mutual-exclusion algorithms for several n.
//!
//! Uncontended figures come from runs in which one process at a time asks for the
//! critical section, with every message taking exactly one message time: the messages of
//! an entry are those sent from its request until the system is quiet again after its
//! release, and its delay is the time from request to entry. The token never rests, so
//! the token ring's figures are counted on the token: the token messages sent between one
//! entry and the previous one, and between a request and its entry (one message time
//! each). The "Problems" column, and the checker's runs under contention, are in
//! [`super::mutex_problems`].

use super::mutex_sim::{Demand, MT, MutexSim};
use super::report::{Row, Verdict, exact, min, num};
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::mutex::MutualExclusion;
use tenure_core::mutex::centralized::Centralized;
use tenure_core::mutex::decentralized::{Decentralized, VoteSettings};
use tenure_core::mutex::ricart_agrawala::RicartAgrawala;
use tenure_core::mutex::token_ring::TokenRing;
use tenure_core::rng::Rng;

const EXP: &str = "mutex";
/// Entries measured per seed in the uncontended runs.
const ENTRIES: usize = 4;
/// A run that has not gone quiet after this long is stuck (µs).
const QUIET_LIMIT_US: u64 = 100_000 * MT;

/// Centralized processes `1..=n`, coordinator 1.
pub fn centralized(n: u64, planted: bool) -> Vec<Centralized> {
    (1..=n)
        .map(|i| {
            let mut p = Centralized::new(DeviceId(i), DeviceId(1));
            p.plant_bug = planted;
            p
        })
        .collect()
}

/// Decentralized processes `1..=n`, back-off drawn from `seed`.
pub fn decentralized(n: u64, seed: u64, planted: bool) -> Vec<Decentralized> {
    let settings = VoteSettings {
        backoff: Duration::from_micros(2 * MT),
        answer_timeout: Duration::from_micros(20 * MT),
    };
    (1..=n)
        .map(|i| {
            let s = tenure_core::rng::mix64(seed ^ i);
            let mut p = Decentralized::new(DeviceId(i), (1..=n).map(DeviceId), settings, s);
            p.plant_bug = planted;
            p
        })
        .collect()
}

/// Ricart-Agrawala processes `1..=n`.
pub fn ricart_agrawala(n: u64, planted: bool) -> Vec<RicartAgrawala> {
    (1..=n)
        .map(|i| {
            let mut p = RicartAgrawala::new(DeviceId(i), (1..=n).map(DeviceId));
            p.plant_bug = planted;
            p
        })
        .collect()
}

/// Token-ring processes `1..=n`, process 1 starting with the token.
pub fn token_ring(n: u64, planted: bool) -> Vec<TokenRing> {
    (1..=n)
        .map(|i| {
            let mut p = TokenRing::new(DeviceId(i), (1..=n).map(DeviceId), i == 1);
            p.plant_bug = planted;
            p
        })
        .collect()
}

/// The next whole message time strictly after `t`.
fn next_mt(t: u64) -> u64 {
    (t / MT + 1) * MT
}

/// One process at a time asks (`candidates`, drawn from the seed): per entry, the
/// messages from its request until quiet after its release, and its delay in message
/// times.
fn uncontended<M: MutualExclusion>(
    procs: Vec<M>,
    candidates: &[DeviceId],
    seed: u64,
) -> (Vec<f64>, Vec<f64>) {
    let mut sim = MutexSim::new(procs, seed, 0, MT, Demand::Once);
    let mut rng = Rng::new(seed ^ 0x6d75_7465);
    let (mut msgs, mut delays) = (Vec::new(), Vec::new());
    for _ in 0..ENTRIES {
        let p = candidates[rng.below(candidates.len() as u64) as usize];
        let (sent0, t) = (sim.sent, next_mt(sim.now));
        sim.request_at(p, t);
        sim.run_until(t);
        sim.run_until_quiet(t + QUIET_LIMIT_US);
        let Some(e) = sim.entries.last().filter(|e| e.requested_us == t) else {
            continue;
        };
        msgs.push((sim.sent - sent0) as f64);
        delays.push((e.entered_us - e.requested_us) as f64 / MT as f64);
    }
    (msgs, delays)
}

/// Token ring, one requester at a time at a drawn moment: token messages between
/// consecutive entries, and between each request and its entry.
fn ring_sparse(n: u64, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut sim = MutexSim::new(token_ring(n, false), seed, 0, MT, Demand::Once);
    let mut rng = Rng::new(seed ^ 0x7269_6e67);
    for _ in 0..ENTRIES + 1 {
        let p = DeviceId(1 + rng.below(n));
        let t = next_mt(sim.now) + rng.below(2 * n) * MT;
        sim.request_at(p, t);
        let before = sim.entries.len();
        while sim.entries.len() == before && sim.now < t + QUIET_LIMIT_US {
            sim.run_until(sim.now + MT);
        }
        sim.run_until(sim.now + 2 * MT);
    }
    let per_entry = (sim.entries.windows(2))
        .map(|w| (w[1].sent_before - w[0].sent_before) as f64)
        .collect();
    let delays = (sim.entries.iter())
        .map(|e| (e.sent_before - e.sent_at_request) as f64)
        .collect();
    (per_entry, delays)
}

/// Token ring with every process always wanting: token messages per entry.
fn ring_full(n: u64, seed: u64) -> f64 {
    let mut sim = MutexSim::new(
        token_ring(n, false),
        seed,
        0,
        1,
        Demand::Again { think_max_us: 0 },
    );
    for p in sim.ids() {
        sim.request_at(p, 0);
    }
    sim.run_until(20 * n * MT);
    let first = sim.entries.first().map_or(0, |e| e.sent_before);
    let last = sim.entries.last().map_or(0, |e| e.sent_before);
    (last - first) as f64 / (sim.entries.len().max(2) - 1) as f64
}

fn row(what: String, paper: String, values: &[f64], verdict: Verdict, note: String) -> Row {
    super::report::measured(EXP, what, paper, values, verdict, note)
}

/// A delay the lecture counts message by message though the messages travel in
/// parallel: `Differs` when every value is 2 message times, else `Fails`.
fn parallel_delay(what: String, paper: String, values: &[f64]) -> Row {
    let ok = !values.is_empty() && values.iter().all(|v| *v == 2.0);
    let note = "the requests go out at once and the answers come back at once: 2 message times; \
                the figure counts the messages one after another"
        .to_string();
    let verdict = if ok { Verdict::Differs } else { Verdict::Fails };
    row(what, paper, values, verdict, note)
}

/// The Fig. 14.7 rows for processes `sizes` over `seeds` seeds.
pub fn rows(sizes: &[u64], seeds: u64) -> Vec<Row> {
    let mut out = Vec::new();
    for &n in sizes {
        let all: Vec<DeviceId> = (1..=n).map(DeviceId).collect();
        let (mut cm, mut cd, mut dm, mut dd, mut rm, mut rd) = Default::default();
        let (mut tm, mut td, mut tf) = (Vec::new(), Vec::new(), Vec::new());
        for seed in 0..seeds {
            let (m, d) = uncontended(centralized(n, false), &all[1..], seed);
            extend(&mut cm, &mut cd, m, d);
            let (m, d) = uncontended(decentralized(n, seed, false), &all, seed);
            extend(&mut dm, &mut dd, m, d);
            let (m, d) = uncontended(ricart_agrawala(n, false), &all, seed);
            extend(&mut rm, &mut rd, m, d);
            let (m, d) = ring_sparse(n, seed);
            extend(&mut tm, &mut td, m, d);
            tf.push(ring_full(n, seed));
        }
        let w = |a: &str, c: &str| format!("{a}, n={n}: {c}");
        let per = "messages per entry/exit";
        let delay = "delay before entry (message times)";
        out.push(exact(
            EXP,
            w("centralized", per),
            "3".into(),
            &cm,
            3.0,
            "request, grant, release".into(),
        ));
        out.push(exact(
            EXP,
            w("centralized", delay),
            "2".into(),
            &cd,
            2.0,
            "request, grant".into(),
        ));
        let m = (n - 1) as f64;
        let maj = n / 2 + 1;
        out.push(exact(
            EXP,
            w("decentralized", per),
            format!("3mk = {}", num(3.0 * m)),
            &dm,
            3.0 * m,
            format!("m = {} coordinators asked (every other process; a majority of {maj} of {n} must say yes), k = 1 attempt uncontended", n - 1),
        ));
        out.push(parallel_delay(
            w("decentralized", delay),
            format!("2m = {}", num(2.0 * m)),
            &dd,
        ));
        out.push(exact(
            EXP,
            w("Ricart-Agrawala", per),
            format!("2(n−1) = {}", 2 * (n - 1)),
            &rm,
            2.0 * m,
            "n − 1 requests, n − 1 grants".into(),
        ));
        out.push(parallel_delay(
            w("Ricart-Agrawala", delay),
            format!("2(n−1) = {}", 2 * (n - 1)),
            &rd,
        ));
        out.push(exact(
            EXP,
            w(
                "token ring",
                "messages per entry/exit, every process wanting",
            ),
            "1".into(),
            &tf,
            1.0,
            "each holder passes the token to a successor that wants it".into(),
        ));
        let lo = min(&tm);
        let within = lo >= 1.0;
        out.push(row(
            w("token ring", "messages per entry/exit, one process wanting"),
            "1 to ∞".into(),
            &tm,
            if within {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            format!(
                "min {}: the token circulates while nobody wants it",
                num(lo)
            ),
        ));
        let ok = !td.is_empty() && td.iter().all(|d| *d <= m);
        out.push(row(
            w("token ring", delay),
            format!("0 to n−1 = 0 to {}", n - 1),
            &td,
            if ok {
                Verdict::WithinBound
            } else {
                Verdict::Fails
            },
            format!("min {}; counted in token hops", num(min(&td))),
        ));
    }
    out
}

fn extend(m: &mut Vec<f64>, d: &mut Vec<f64>, mv: Vec<f64>, dv: Vec<f64>) {
    m.extend(mv);
    d.extend(dv);
}
