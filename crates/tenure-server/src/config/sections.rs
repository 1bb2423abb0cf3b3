//! The smaller sections of the configuration: peers, the cluster's shape, timing
//! overrides, snapshots and metrics.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tenure_core::config::Timing;
use tenure_core::snapshot::SnapshotSettings;

/// One device of the cluster as every device sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Device id.
    pub id: u64,
    /// Where its peer transport listens.
    pub peer_addr: SocketAddr,
    /// Where its gRPC API listens (used for redirect hints).
    pub client_addr: SocketAddr,
    /// Where its metrics and status page are served, if known (the status page links
    /// to the other devices' pages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_addr: Option<SocketAddr>,
}

/// The cluster's shape, fixed at bootstrap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterShape {
    /// Number of stores.
    pub stores: u32,
    /// Chunks per store.
    pub replication: usize,
}

impl Default for ClusterShape {
    fn default() -> Self {
        ClusterShape {
            stores: 64,
            replication: 3,
        }
    }
}

/// Overrides of the core's timing constants, in milliseconds (unset = core default).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[allow(missing_docs)]
pub struct TimingOverrides {
    pub lease_ms: Option<u64>,
    pub renewal_period_ms: Option<u64>,
    pub commit_window_ms: Option<u64>,
    pub abort_window_ms: Option<u64>,
    pub clock_drift_ms: Option<u64>,
    pub msg_timeout_ms: Option<u64>,
    pub help_wait_ms: Option<u64>,
    pub transition_timeout_ms: Option<u64>,
    pub transition_wait_ms: Option<u64>,
    pub ack_timeout_ms: Option<u64>,
    pub ack_timeout_max_ms: Option<u64>,
    pub gather_rounds_max: Option<u32>,
    pub migrate_after_ms: Option<u64>,
    pub liveness_window_ms: Option<u64>,
    pub session_grace_ms: Option<u64>,
    /// Lock-delay after a session expiry releases a lock (default 1000; an acquire may ask
    /// for its own; at most 60000).
    pub lock_delay_ms: Option<u64>,
    /// Answer reads under the manager's lease (default true; false: every read waits
    /// for a barrier through the chunks).
    pub lease_reads: Option<bool>,
}

impl TimingOverrides {
    /// The core's timing with these overrides applied.
    pub fn apply(&self, mut t: Timing) -> Timing {
        let ms = Duration::from_millis;
        macro_rules! set {
            ($($field:ident <- $o:ident),*) => {$( if let Some(v) = self.$o { t.$field = ms(v); } )*};
        }
        set!(lease <- lease_ms, renewal_period <- renewal_period_ms,
             commit_window <- commit_window_ms, abort_window <- abort_window_ms,
             clock_drift <- clock_drift_ms, msg_timeout <- msg_timeout_ms,
             help_wait <- help_wait_ms, transition_timeout <- transition_timeout_ms,
             transition_wait <- transition_wait_ms, ack_timeout <- ack_timeout_ms,
             ack_timeout_max <- ack_timeout_max_ms,
             migrate_after <- migrate_after_ms, liveness_window <- liveness_window_ms,
             session_grace <- session_grace_ms, lock_delay <- lock_delay_ms);
        if let Some(n) = self.gather_rounds_max {
            t.gather_rounds_max = n;
        }
        if let Some(on) = self.lease_reads {
            t.lease_reads = on;
        }
        t
    }
}

/// How many snapshots a device keeps its part of by default (`[snapshot] keep`).
pub const DEFAULT_SNAPSHOT_KEEP: usize = 10;

/// Snapshots (`[snapshot]`): the core's settings ([`SnapshotSettings`]) and the server's
/// retention. A struct of the server's own rather than the core's settings flattened into
/// one, because serde does not reject unknown keys of a struct holding a flattened one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotConfig {
    /// A snapshot a device has recorded but not finished within this long fails there.
    #[serde(with = "tenure_core::duration::millis")]
    pub timeout: Duration,
    /// The coordinator starts a snapshot this often (zero: never; only on request).
    #[serde(with = "tenure_core::duration::millis")]
    pub every: Duration,
    /// How many snapshots this device keeps its part of: once a part is written, the
    /// oldest beyond this many are removed (see [`crate::snapshots`]). 0 keeps them all.
    pub keep: usize,
}

impl Default for SnapshotConfig {
    fn default() -> Self {
        let core = SnapshotSettings::default();
        SnapshotConfig {
            timeout: core.timeout,
            every: core.every,
            keep: DEFAULT_SNAPSHOT_KEEP,
        }
    }
}

impl SnapshotConfig {
    /// The core's part of these settings.
    pub fn settings(&self) -> SnapshotSettings {
        SnapshotSettings {
            timeout: self.timeout,
            every: self.every,
        }
    }
}

/// The `[metrics]` section: who may read the metrics address when `[auth]` is on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve `/metrics` without a token even when authorization is on (default false:
    /// it needs a token with `read` on `/`, as the status page and `/status.json` do).
    pub public: bool,
}

impl MetricsConfig {
    /// Whether the section is absent or says nothing (not written out).
    pub fn is_default(&self) -> bool {
        *self == MetricsConfig::default()
    }
}
