//! Every knob of a lookup run, drawn from the run's seed: the profile, the cluster, the
//! seed 003's named intervals (`SS_HEARTBEAT_INTERVAL`, `ROUNDTRIP_COMMUNICATION_DELAY`,
//! `MAX_VOLATILE_REFRESH_INTERVAL`, `Max_Persistent_Refresh_Interval`, `LONG_TIMEOUT`,
//! `t`, the UPS node, Θ), the clock-drift bound δ_c, the network, the workload and the
//! nemesis. One sim seed, one PRNG: printing the knobs says everything a run chose.

use crate::net::NetParams;
use serde::Serialize;
use std::time::Duration;
use tenure_core::DeviceId;
use tenure_core::lookup::LookupSettings;
use tenure_core::rng::Rng;

/// Which failure class of seed 003 a run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Profile {
    /// The common failure case: at most one fault at a time, spaced out — the loss of
    /// one message, the crash (and restart) of one node, or a short power outage in which
    /// every node but the UPS-designated one crashes and restarts. Seed 003's bounds are
    /// asserted.
    Common,
    /// Rare failures: loss, partitions, pauses longer than 3 heartbeats, crashes of
    /// several nodes, transient state corruption. Only safety and stabilisation within a
    /// bound once the faults stop are asserted.
    Rare,
}

/// How a run's profile is chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum ProfileChoice {
    /// The sim seed decides (half the sim seeds each).
    #[default]
    Drawn,
    /// Always the common profile.
    Common,
    /// Always the rare profile.
    Rare,
}

/// The knobs of one lookup run.
#[derive(Clone, Debug, Serialize)]
pub struct LookupKnobs {
    /// Failure class.
    pub profile: Profile,
    /// Devices (lookup nodes).
    pub devices: u64,
    /// The lookup settings every device runs with (`t`, the UPS node, the intervals).
    pub settings: LookupSettings,
    /// δ_c: any two clocks differ by at most this (µs).
    pub clock_drift_us: u64,
    /// Θ: a provider retries an unacknowledged persistent update within this long (µs).
    pub theta_us: u64,
    /// Links between devices.
    pub net: NetParams,
    /// One-way latency between a client and a device (µs).
    pub client_latency_min_us: u64,
    /// Upper bound of the same.
    pub client_latency_max_us: u64,
    /// Providers of volatile (high-frequency, unacknowledged) entries.
    pub volatile_providers: usize,
    /// Providers of persistent (low-frequency, acknowledged) entries.
    pub persistent_providers: usize,
    /// Per refresh: probability the value changes.
    pub change_p: f64,
    /// Per refresh: probability the provider revokes its entry.
    pub revoke_p: f64,
    /// Per refresh: probability the provider dies silently.
    pub die_p: f64,
    /// Mean time a revoked or dead provider stays away before a new incarnation (µs).
    pub reborn_mean_us: u64,
    /// Queriers issuing Get and List.
    pub queriers: usize,
    /// Mean think time between a querier's queries (µs).
    pub query_think_mean_us: u64,
    /// Subscribers on prefixes.
    pub subscribers: usize,
    /// Per subscription refresh: probability the subscriber moves to another device.
    pub move_p: f64,
    /// The prober's period while it measures an outage (µs).
    pub probe_us: u64,
    /// Common profile: weights of loss of one message, crash of one node, power outage.
    pub common_weights: [u32; 3],
    /// Common profile: probability a crashed node stays down long (up to 20 s).
    pub long_down_p: f64,
    /// Common profile: whether the run ends with a full restart of every device.
    pub full_restart: bool,
    /// Rare profile: mean time between faults inside a burst (µs).
    pub rare_mean_us: u64,
    /// Rare profile: weights of partition, heal, crash, crash of several, pause,
    /// corruption, loss burst.
    pub rare_weights: [u32; 7],
    /// Rare profile: pause length bound (µs); pauses outlast 3 heartbeats.
    pub pause_max_us: u64,
}

fn pick<T: Copy>(rng: &mut Rng, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl LookupKnobs {
    /// Draw the knobs.
    pub fn draw(rng: &mut Rng, choice: ProfileChoice) -> LookupKnobs {
        let drawn = if rng.chance(0.5) {
            Profile::Common
        } else {
            Profile::Rare
        };
        let profile = match choice {
            ProfileChoice::Drawn => drawn,
            ProfileChoice::Common => Profile::Common,
            ProfileChoice::Rare => Profile::Rare,
        };
        let common = profile == Profile::Common;
        let devices = 2 + rng.below(5);
        let heartbeat = ms(pick(rng, &[100, 200, 300]));
        let roundtrip = ms(pick(rng, &[60, 100, 150]));
        let mvri = ms(pick(rng, &[1_000, 2_000, 3_000]));
        let mpri = mvri + ms(1_000 + rng.below(5) * 1_000);
        // Seed 003's common-case argument needs a hot spare besides any one node that
        // may fail (t ≥ 2); rare runs also try t = 1.
        let hot_spares = if common {
            2 + rng.below(2) as usize
        } else {
            1 + rng.below(3) as usize
        };
        let ups = if common || rng.chance(0.5) {
            Some(DeviceId(1 + rng.below(devices)))
        } else {
            None
        };
        let theta_us = pick(rng, &[50_000, 100_000, 200_000]);
        let settings = LookupSettings {
            heartbeat_interval: heartbeat,
            roundtrip_delay: roundtrip,
            max_volatile_refresh_interval: mvri,
            max_persistent_refresh_interval: mpri,
            max_retry_interval: Duration::from_micros(theta_us),
            min_refresh_interval: ms(100),
            long_timeout: ms(pick(rng, &[1_000, 2_000, 3_000])),
            hot_spares,
            ups,
            ..LookupSettings::default()
        };
        // One-way latency stays under a quarter of the round-trip delay, so an answer
        // that is not lost always beats the origin's timeout; rare runs add a slow path.
        let rt = roundtrip.as_micros() as u64;
        let latency_min_us = 100 + rng.below(900);
        let latency_max_us = latency_min_us + rng.below(rt / 4 - latency_min_us);
        let net = NetParams {
            latency_min_us,
            latency_max_us,
            slow_p: if common { 0.0 } else { pick(rng, &[0.0, 0.01]) },
            slow_us: 100_000 + rng.below(1_000_000),
            loss: if common {
                0.0
            } else {
                pick(rng, &[0.0, 0.01, 0.05])
            },
            duplicate: 0.0,
        };
        let client_latency_min_us = 100 + rng.below(900);
        LookupKnobs {
            profile,
            devices,
            settings,
            clock_drift_us: pick(rng, &[10_000, 20_000, 50_000]),
            theta_us,
            net,
            client_latency_min_us,
            client_latency_max_us: client_latency_min_us
                + rng.below(rt / 4 - client_latency_min_us),
            volatile_providers: 2 + rng.below(5) as usize,
            persistent_providers: 1 + rng.below(3) as usize,
            change_p: pick(rng, &[0.05, 0.2, 0.5]),
            revoke_p: pick(rng, &[0.0, 0.02, 0.05]),
            die_p: pick(rng, &[0.0, 0.02, 0.05]),
            reborn_mean_us: 1_000_000 + rng.below(4_000_000),
            queriers: 1 + rng.below(3) as usize,
            query_think_mean_us: 50_000 + rng.below(300_000),
            subscribers: 1 + rng.below(3) as usize,
            move_p: pick(rng, &[0.0, 0.1, 0.3]),
            probe_us: 20_000,
            common_weights: [
                1 + rng.below(4) as u32,
                1 + rng.below(4) as u32,
                rng.below(3) as u32,
            ],
            long_down_p: pick(rng, &[0.0, 0.2]),
            full_restart: common && rng.chance(0.5),
            rare_mean_us: 200_000 + rng.below(1_000_000),
            rare_weights: [
                1 + rng.below(3) as u32,
                1 + rng.below(3) as u32,
                1 + rng.below(3) as u32,
                rng.below(3) as u32,
                1 + rng.below(3) as u32,
                1 + rng.below(3) as u32,
                rng.below(3) as u32,
            ],
            pause_max_us: 3 * heartbeat.as_micros() as u64 + rng.below(4_000_000),
        }
    }
}
