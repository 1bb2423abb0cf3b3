//! Server configuration: a TOML file, optionally overridden by command-line flags.
//!
//! ```toml
//! id = 1
//! data_dir = "tenure-data/d1"
//! peer_listen = "127.0.0.1:7101"
//! client_listen = "127.0.0.1:7201"
//! metrics_listen = "127.0.0.1:7301"   # optional: /metrics, the status page (/), /status.json
//! worker_threads = 1                    # optional; default one per core; 1 = current-thread runtime
//! join = true                          # optional: started to join a running cluster
//!                                       # (`tenure cluster add`; default false)
//!
//! [cluster]
//! stores = 64
//! replication = 3
//!
//! [[peers]]                             # every device, this one included
//! id = 1
//! peer_addr = "127.0.0.1:7101"
//! client_addr = "127.0.0.1:7201"
//! metrics_addr = "127.0.0.1:7301"      # optional: the status page links to it
//!
//! [timing]                              # optional overrides of seed 000 §2 constants
//! lease_ms = 2000
//! lock_delay_ms = 1000                  # after an expiry releases a lock (per lock too)
//!
//! [lookup]                              # optional: the lookup service (seed 003)
//! heartbeat_interval = "300ms"          # durations: milliseconds or "300ms"/"2s"/"5m"
//! max_volatile_refresh_interval = "2s"
//! hot_spares = 2                        # t: at most t + 1 active nodes
//! max_value_bytes = 65536
//! ups = 1                               # the UPS-designated node (default: the lowest
//!                                       # device id; 0: none)
//!
//! [objects]                             # optional: the object store (seed 001)
//! max_object_size = 67108864            # bytes (64 MiB)
//! max_value_size = 1048576              # largest single-message put (1 MiB)
//! prune_after = "30s"                   # tombstones are pruned this long after deletion
//! lease_timeout = "10s"                 # a deletion lease not checked in is taken over
//! checkin_interval = "2s"               # collectors check in this often
//! writing_timeout = "5m"                # an unfinished upload is abandoned after this
//! history = 10000                       # changes kept per store for watches
//!
//! [election]                            # optional: electing the coordinator (seed 002 §14.3)
//! algorithm = "bully"                   # or "ring"
//! answer_timeout = "200ms"              # bully: wait for OK; ring: for the successor's ack
//! result_timeout = "1s"                 # bully: wait for COORDINATOR; ring: for the round
//! heartbeat = "300ms"                   # the coordinator's; 3 missed start an election
//!
//! [snapshot]                            # optional: consistent snapshots (seed 002 §14.1)
//! every = "1h"                          # the coordinator starts one this often (default
//!                                       # 0: only when asked, `tenure snapshot create`)
//! timeout = "10s"                       # a device that hears nothing of a snapshot for this
//!                                       # long fails it (a peer is down or cut off)
//! keep = 10                             # this device keeps its parts of the 10 newest
//!                                       # snapshots and removes older ones (0: keep all)
//!
//! [tls]                                 # optional: TLS on the client port, mutual TLS on
//!                                       # the peer port (without it both are plaintext)
//! ca = "tenure-data/tls/ca.pem"         # the cluster's CA certificate (PEM)
//! cert = "tenure-data/d1/tls/device.pem"   # this device's certificate, signed by the CA
//! key = "tenure-data/d1/tls/device.key"    # its private key (PEM)
//!
//! [metrics]                             # optional: the metrics address
//! public = true                         # /metrics without a token when [auth] is on
//!                                       # (default false; the status page always needs one)
//!
//! [auth]                                # optional: tokens and their permissions per path
//! enabled = true                        # prefix (see [`crate::auth`]; default false)
//! [[auth.tokens]]
//! name = "worker"
//! sha256 = "…64 hex digits…"            # of the secret (`tenure token hash`)
//! rules = [{ prefix = "/jobs/", perms = ["lock"] }, { prefix = "/", perms = ["read"] }]
//! ```

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tenure_core::config::{ClusterConfig, DeviceConfig};
use tenure_core::election::ElectionSettings;
use tenure_core::ids::DeviceId;
use tenure_core::lookup::LookupSettings;
use tenure_core::objects::ObjectSettings;

mod ports;
mod sections;

pub use ports::free_local_port;
pub use sections::{
    ClusterShape, DEFAULT_SNAPSHOT_KEEP, MetricsConfig, PeerConfig, SnapshotConfig, TimingOverrides,
};

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema.
    #[error("parsing {path}: {source}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Everything one `tenure server` process is configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// This device's id.
    pub id: u64,
    /// Data directory (created if missing).
    pub data_dir: PathBuf,
    /// Peer transport listen address.
    pub peer_listen: SocketAddr,
    /// gRPC listen address.
    pub client_listen: SocketAddr,
    /// Prometheus metrics listen address (none = no endpoint).
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Cluster shape.
    #[serde(default)]
    pub cluster: ClusterShape,
    /// Every device of the cluster, this one included.
    pub peers: Vec<PeerConfig>,
    /// Timing overrides.
    #[serde(default)]
    pub timing: TimingOverrides,
    /// Whether this device runs the outside policies.
    #[serde(default = "yes")]
    pub run_policies: bool,
    /// This device joins a running cluster (`tenure cluster add`; DESIGN §6): it creates
    /// no chunks and takes no part in elections until the coordinator admits it, which an
    /// `AddDevice` request naming it asks for. `peers` lists the members and this device.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub join: bool,
    /// Seed of the core's PRNG (default: derived from the id and the boot time). A fixed
    /// seed replays the same draws at every start (for reproducing a run); upload ids
    /// stay unique across restarts all the same, since they carry the device's clock.
    #[serde(default)]
    pub rng_seed: Option<u64>,
    /// How long a client request may wait for the core's answer.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// How many client requests the device works on at once; one more is refused as
    /// overloaded (`RESOURCE_EXHAUSTED`, retried by clients). Keep-alives, closes,
    /// releases and waiting acquires are always admitted.
    #[serde(default = "default_max_client_requests")]
    pub max_client_requests: usize,
    /// How long a session stream's request waits for a place before it is answered
    /// `Overloaded` on the stream (0: refused at once, as a unary request is).
    #[serde(default = "default_stream_admission_wait_ms")]
    pub stream_admission_wait_ms: u64,
    /// Largest peer frame accepted.
    #[serde(default = "default_max_frame")]
    pub max_frame_bytes: usize,
    /// Threads of the process's async runtime (none: one per core). A local cluster of
    /// several devices on one machine gives each device its share of the cores: more
    /// threads than cores only adds cross-thread wake-ups to every request. One thread
    /// runs tokio's current-thread scheduler (storage commits have their own thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_threads: Option<usize>,
    /// The lookup service's intervals and limits (`[lookup]`; seed 003). `ups` unset
    /// means the lowest device id of the cluster; `ups = 0` means no UPS-designated node.
    #[serde(default)]
    pub lookup: LookupSettings,
    /// The object store's limits and intervals (`[objects]`; seed 001).
    #[serde(default)]
    pub objects: ObjectSettings,
    /// How the cluster's coordinator is elected (`[election]`; seed 002 §14.3): the
    /// algorithm (bully or ring) and its timeouts. Every device should use the same.
    #[serde(default)]
    pub election: ElectionSettings,
    /// Consistent snapshots (`[snapshot]`; seed 002 §14.1): how often the coordinator
    /// starts one, when a silent peer fails one, and how many this device keeps.
    #[serde(default)]
    pub snapshot: SnapshotConfig,
    /// TLS on both ports (`[tls]`: the cluster's CA, this device's certificate and key;
    /// see [`crate::tls`]). None: plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::tls::TlsFiles>,
    /// Authorization (`[auth]`: named tokens with permissions per path prefix; see
    /// [`crate::auth`]). Off by default.
    #[serde(default, skip_serializing_if = "crate::auth::AuthConfig::is_default")]
    pub auth: crate::auth::AuthConfig,
    /// The metrics address's access (`[metrics]`; see [`crate::http_auth`]).
    #[serde(default, skip_serializing_if = "MetricsConfig::is_default")]
    pub metrics: MetricsConfig,
}

fn yes() -> bool {
    true
}
fn default_max_client_requests() -> usize {
    crate::admission::DEFAULT_MAX_CLIENT_REQUESTS
}
fn default_stream_admission_wait_ms() -> u64 {
    crate::admission::STREAM_ADMISSION_WAIT.as_millis() as u64
}

fn default_request_timeout_ms() -> u64 {
    5000
}
fn default_max_frame() -> usize {
    crate::wire::MAX_FRAME_BYTES
}

impl ServerConfig {
    /// Read and validate a TOML file.
    pub fn load(path: &Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let cfg: ServerConfig = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(source),
        })?;
        Ok(cfg)
    }

    /// Render as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("config serializes")
    }

    /// Check consistency.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.peers.iter().any(|p| p.id == self.id) {
            return Err(ConfigError::Invalid(format!(
                "peers must list this device ({})",
                self.id
            )));
        }
        let mut ids: Vec<u64> = self.peers.iter().map(|p| p.id).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() != self.peers.len() {
            return Err(ConfigError::Invalid("duplicate device id in peers".into()));
        }
        self.auth.validate()?;
        if self.cluster.stores == 0 {
            return Err(ConfigError::Invalid("cluster.stores must be > 0".into()));
        }
        if self.cluster.replication == 0 {
            return Err(ConfigError::Invalid(
                "cluster.replication must be > 0".into(),
            ));
        }
        if self.timing.lock_delay_ms.unwrap_or(0) > 60_000 {
            return Err(ConfigError::Invalid(
                "timing.lock_delay_ms must be <= 60000".into(),
            ));
        }
        if self.max_frame_bytes < 1024 {
            return Err(ConfigError::Invalid(
                "max_frame_bytes must be >= 1024".into(),
            ));
        }
        let l = &self.lookup;
        if l.heartbeat_interval.is_zero() || l.roundtrip_delay.is_zero() {
            return Err(ConfigError::Invalid(
                "lookup.heartbeat_interval and lookup.roundtrip_delay must be > 0".into(),
            ));
        }
        if l.min_refresh_interval > l.max_volatile_refresh_interval
            || l.max_volatile_refresh_interval > l.max_persistent_refresh_interval
        {
            return Err(ConfigError::Invalid(
                "lookup intervals must satisfy min_refresh_interval <= \
                 max_volatile_refresh_interval <= max_persistent_refresh_interval"
                    .into(),
            ));
        }
        if let Some(u) = l.ups
            && u.0 != 0
            && !self.peers.iter().any(|p| p.id == u.0)
        {
            return Err(ConfigError::Invalid(format!(
                "lookup.ups names device {u}, which is not among the peers"
            )));
        }
        // A value must fit in a peer frame (it is multicast to every node).
        if l.max_value_bytes + 64 * 1024 > self.max_frame_bytes {
            return Err(ConfigError::Invalid(format!(
                "lookup.max_value_bytes ({}) must leave 64 KiB of max_frame_bytes ({})",
                l.max_value_bytes, self.max_frame_bytes
            )));
        }
        let e = &self.election;
        if e.answer_timeout.is_zero() || e.result_timeout.is_zero() || e.heartbeat.is_zero() {
            return Err(ConfigError::Invalid(
                "election.answer_timeout, election.result_timeout and election.heartbeat must \
                 be > 0"
                    .into(),
            ));
        }
        if self.snapshot.timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "snapshot.timeout must be > 0 (a snapshot would fail as soon as it started)".into(),
            ));
        }
        let o = &self.objects;
        if o.block_size == 0 || o.max_key_len == 0 || o.history == 0 {
            return Err(ConfigError::Invalid(
                "objects.block_size, objects.max_key_len and objects.history must be > 0".into(),
            ));
        }
        if o.max_value_size > o.max_object_size {
            return Err(ConfigError::Invalid(format!(
                "objects.max_value_size ({}) must be <= objects.max_object_size ({})",
                o.max_value_size, o.max_object_size
            )));
        }
        if o.inline_max > o.block_size {
            // A batch goes over max_batch_bytes by at most one change: a block, or an
            // inline value, which must then be no larger than a block.
            return Err(ConfigError::Invalid(format!(
                "objects.inline_max ({}) must be <= objects.block_size ({})",
                o.inline_max, o.block_size
            )));
        }
        if o.lease_timeout <= o.checkin_interval || o.checkin_interval.is_zero() {
            return Err(ConfigError::Invalid(
                "objects.checkin_interval must be > 0 and below objects.lease_timeout".into(),
            ));
        }
        // Block data travels in peer frames: a SafeTalk batch (up to max_batch_bytes plus
        // one block) and a read answer (up to READ_BATCH blocks) must each fit in one.
        let block = o.block_size as usize;
        let batch = o.max_batch_bytes + block + 64 * 1024;
        let read = tenure_core::objects::blocks::READ_BATCH * block + 64 * 1024;
        if batch.max(read) > self.max_frame_bytes {
            return Err(ConfigError::Invalid(format!(
                "objects.max_batch_bytes ({}) plus a block, and {} blocks of                  objects.block_size ({}), must each fit in max_frame_bytes ({}) with 64 KiB                  to spare",
                o.max_batch_bytes,
                tenure_core::objects::blocks::READ_BATCH,
                o.block_size,
                self.max_frame_bytes
            )));
        }
        Ok(())
    }

    /// The core's configuration for this device.
    pub fn device_config(&self) -> DeviceConfig {
        let mut devices: Vec<DeviceId> = self.peers.iter().map(|p| DeviceId(p.id)).collect();
        devices.sort();
        let cluster = ClusterConfig {
            devices,
            stores: self.cluster.stores,
            replication: self.cluster.replication,
        };
        let mut cfg = DeviceConfig::new(DeviceId(self.id), cluster);
        cfg.timing = self.timing.apply(cfg.timing);
        cfg.run_policies = self.run_policies;
        cfg.join = self.join;
        // The server's storage compacts deltas itself: a checkpoint writes each changed
        // chunk's whole record from its copy of the durable state. A whole record from
        // the core (idempotency windows included, up to a megabyte) would only be
        // cloned, encoded and logged on top of that.
        cfg.whole_record_every = u32::MAX;
        // Published as /tenure/devices/<id> (DESIGN §3): clients map the lookup's
        // `store → manager` entries to endpoints with it.
        if let Some(addr) = self.client_endpoint(DeviceId(self.id)) {
            cfg.advertise = addr.to_string();
        }
        cfg.lookup = self.lookup.clone();
        cfg.objects = self.objects.clone();
        cfg.election = self.election.clone();
        cfg.snapshot = self.snapshot.settings();
        cfg.lookup.ups = match self.lookup.ups {
            // The seed assumes a UPS-designated node; the lowest id plays it by default.
            None => cfg.cluster.devices.first().copied(),
            Some(DeviceId(0)) => None,
            Some(d) => Some(d),
        };
        cfg
    }

    /// Client endpoint of a device, if configured.
    pub fn client_endpoint(&self, id: DeviceId) -> Option<SocketAddr> {
        self.peers
            .iter()
            .find(|p| p.id == id.0)
            .map(|p| p.client_addr)
    }
}

#[cfg(test)]
mod tests {
    use super::ports::ephemeral_floor;
    use super::*;
    use std::time::Duration;
    use tenure_core::snapshot::SnapshotSettings;

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
            id = 1
            data_dir = "tenure-data/d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [cluster]
            stores = 8
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
            [timing]
            lease_ms = 1000
        "#;
        let cfg: ServerConfig = toml::from_str(text).unwrap();
        cfg.validate().unwrap();
        let dc = cfg.device_config();
        assert_eq!(dc.cluster.stores, 8);
        assert_eq!(dc.cluster.replication, 3);
        assert_eq!(dc.timing.lease, Duration::from_millis(1000));
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);
        assert_eq!(cfg.peers[0].metrics_addr, None);
    }

    /// A peer may name its metrics address (the status page links to it); it round-trips.
    #[test]
    fn a_peer_names_its_metrics_address() {
        let text = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            metrics_listen = "127.0.0.1:7301"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
            metrics_addr = "127.0.0.1:7301"
        "#;
        let cfg: ServerConfig = toml::from_str(text).unwrap();
        cfg.validate().unwrap();
        assert_eq!(
            cfg.peers[0].metrics_addr,
            Some("127.0.0.1:7301".parse().unwrap())
        );
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);
    }

    /// `[tls]` names three files; an unknown key in it is an error naming the key;
    /// without it the device is plaintext (older configurations).
    #[test]
    fn the_tls_section_round_trips_and_refuses_unknown_keys() {
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let plain: ServerConfig = toml::from_str(base).unwrap();
        assert_eq!(plain.tls, None);
        assert!(!plain.to_toml().contains("[tls]"));
        let tls = format!("{base}\n[tls]\nca = \"ca.pem\"\ncert = \"d1.pem\"\nkey = \"d1.key\"\n");
        let cfg: ServerConfig = toml::from_str(&tls).unwrap();
        let files = cfg.tls.clone().unwrap();
        assert_eq!(files.ca, PathBuf::from("ca.pem"));
        assert_eq!(files.key, PathBuf::from("d1.key"));
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);
        let e = toml::from_str::<ServerConfig>(&format!("{tls}crt = \"x.pem\"\n")).unwrap_err();
        assert!(e.to_string().contains("crt"), "{e}");
        let e = toml::from_str::<ServerConfig>(&format!("{base}\n[tls]\nca = \"ca.pem\"\n"))
            .unwrap_err();
        assert!(e.to_string().contains("cert"), "{e}");
    }

    #[test]
    fn unknown_fields_and_missing_self_are_errors() {
        assert!(toml::from_str::<ServerConfig>("id = 1\nbogus = 2").is_err());
        let cfg = ServerConfig {
            id: 2,
            data_dir: "x".into(),
            peer_listen: "127.0.0.1:1".parse().unwrap(),
            client_listen: "127.0.0.1:2".parse().unwrap(),
            metrics_listen: None,
            cluster: ClusterShape::default(),
            peers: vec![],
            timing: TimingOverrides::default(),
            run_policies: true,
            join: false,
            rng_seed: None,
            request_timeout_ms: 5000,
            max_client_requests: 4096,
            stream_admission_wait_ms: 1000,
            max_frame_bytes: 1 << 20,
            worker_threads: None,
            lookup: LookupSettings::default(),
            objects: ObjectSettings::default(),
            election: ElectionSettings::default(),
            snapshot: SnapshotConfig::default(),
            tls: None,
            auth: Default::default(),
            metrics: Default::default(),
        };
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn the_lookup_section_maps_to_the_device_config() {
        let base = r#"
            id = 2
            data_dir = "d2"
            peer_listen = "127.0.0.1:7102"
            client_listen = "127.0.0.1:7202"
            [[peers]]
            id = 2
            peer_addr = "127.0.0.1:7102"
            client_addr = "127.0.0.1:7202"
            [[peers]]
            id = 5
            peer_addr = "127.0.0.1:7105"
            client_addr = "127.0.0.1:7205"
        "#;
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        cfg.validate().unwrap();
        let dc = cfg.device_config();
        assert_eq!(dc.lookup.ups, Some(DeviceId(2)), "default: the lowest id");
        assert_eq!(
            dc.lookup.heartbeat_interval,
            LookupSettings::default().heartbeat_interval
        );

        let text = format!(
            "{base}\n[lookup]\nheartbeat_interval = \"150ms\"\nmax_volatile_refresh_interval = 1500\n\
             max_persistent_refresh_interval = \"5m\"\nhot_spares = 1\nups = 5\n\
             max_value_bytes = 1000\n[lookup.adapt]\ndemand_queries = 3\n"
        );
        let cfg: ServerConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        let dc = cfg.device_config();
        assert_eq!(dc.lookup.heartbeat_interval, Duration::from_millis(150));
        assert_eq!(
            dc.lookup.max_volatile_refresh_interval,
            Duration::from_millis(1500)
        );
        assert_eq!(
            dc.lookup.max_persistent_refresh_interval,
            Duration::from_secs(300)
        );
        assert_eq!(dc.lookup.hot_spares, 1);
        assert_eq!(dc.lookup.ups, Some(DeviceId(5)));
        assert_eq!(dc.lookup.max_value_bytes, 1000);
        assert_eq!(dc.lookup.adapt.demand_queries, 3);
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);

        let none: ServerConfig = toml::from_str(&format!("{base}\n[lookup]\nups = 0\n")).unwrap();
        assert_eq!(none.device_config().lookup.ups, None);
        let stranger: ServerConfig =
            toml::from_str(&format!("{base}\n[lookup]\nups = 9\n")).unwrap();
        assert!(stranger.validate().is_err());
        let unit = format!("{base}\n[lookup]\nheartbeat_interval = \"2x\"\n");
        assert!(
            toml::from_str::<ServerConfig>(&unit).is_err(),
            "an unknown unit"
        );
    }

    #[test]
    fn the_objects_section_maps_to_the_device_config() {
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.device_config().objects, ObjectSettings::default());

        let text = format!(
            "{base}\n[objects]\nmax_object_size = 1000000\nmax_value_size = 4096\n\
             prune_after = \"90s\"\nlease_timeout = 3000\ncheckin_interval = \"500ms\"\n\
             writing_timeout = \"2m\"\nhistory = 50\n"
        );
        let cfg: ServerConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        let o = cfg.device_config().objects;
        assert_eq!(o.max_object_size, 1_000_000);
        assert_eq!(o.max_value_size, 4096);
        assert_eq!(o.prune_after, Duration::from_secs(90));
        assert_eq!(o.lease_timeout, Duration::from_millis(3000));
        assert_eq!(o.checkin_interval, Duration::from_millis(500));
        assert_eq!(o.writing_timeout, Duration::from_secs(120));
        assert_eq!(o.history, 50);
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);

        let bad = format!("{base}\n[objects]\nmax_value_size = 2000000\nmax_object_size = 1000\n");
        let cfg: ServerConfig = toml::from_str(&bad).unwrap();
        assert!(cfg.validate().is_err(), "a value larger than an object");
        let mut cfg: ServerConfig = toml::from_str(base).unwrap();
        cfg.max_frame_bytes = 4 << 20;
        assert!(cfg.validate().is_err(), "an 8 MiB batch in a 4 MiB frame");
    }

    #[test]
    fn the_election_section_maps_to_the_device_config() {
        use tenure_core::election::Algorithm;
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.device_config().election, ElectionSettings::default());

        let text = format!(
            "{base}\n[election]\nalgorithm = \"ring\"\nanswer_timeout = \"150ms\"\n\
             result_timeout = 2000\nheartbeat = \"250ms\"\n"
        );
        let cfg: ServerConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        let e = cfg.device_config().election;
        assert_eq!(e.algorithm, Algorithm::Ring);
        assert_eq!(e.answer_timeout, Duration::from_millis(150));
        assert_eq!(e.result_timeout, Duration::from_secs(2));
        assert_eq!(e.heartbeat, Duration::from_millis(250));
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);

        let unknown = format!("{base}\n[election]\nalgorithm = \"raft\"\n");
        assert!(
            toml::from_str::<ServerConfig>(&unknown).is_err(),
            "an unknown algorithm"
        );
        let zero = format!("{base}\n[election]\nheartbeat = 0\n");
        let cfg: ServerConfig = toml::from_str(&zero).unwrap();
        assert!(cfg.validate().is_err(), "a zero heartbeat");
    }

    #[test]
    fn the_snapshot_section_maps_to_the_device_config() {
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.device_config().snapshot, SnapshotSettings::default());
        assert_eq!(cfg.snapshot.keep, DEFAULT_SNAPSHOT_KEEP);

        let text = format!("{base}\n[snapshot]\nevery = \"5m\"\ntimeout = 2500\nkeep = 3\n");
        let cfg: ServerConfig = toml::from_str(&text).unwrap();
        cfg.validate().unwrap();
        let s = cfg.device_config().snapshot;
        assert_eq!(s.every, Duration::from_secs(300));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(cfg.snapshot.keep, 3);
        assert_eq!(toml::from_str::<ServerConfig>(&cfg.to_toml()).unwrap(), cfg);

        let misspelt = format!("{base}\n[snapshot]\nkeeep = 3\n");
        let e = toml::from_str::<ServerConfig>(&misspelt).unwrap_err();
        assert!(e.to_string().contains("keeep"), "{e}");
        let zero = format!("{base}\n[snapshot]\ntimeout = \"0s\"\n");
        let cfg: ServerConfig = toml::from_str(&zero).unwrap();
        let e = cfg.validate().unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid(m) if m.contains("snapshot.timeout")),
            "{e}"
        );
    }

    #[test]
    fn inline_max_is_read_and_may_not_exceed_a_block() {
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        assert_eq!(cfg.device_config().objects.inline_max, 64 << 10);
        let off: ServerConfig =
            toml::from_str(&format!("{base}\n[objects]\ninline_max = 0\n")).unwrap();
        off.validate().unwrap();
        assert_eq!(off.device_config().objects.inline_max, 0);
        let text = format!("{base}\n[objects]\nblock_size = 4096\ninline_max = 8192\n");
        let e = toml::from_str::<ServerConfig>(&text)
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, ConfigError::Invalid(m) if m.contains("objects.inline_max")),
            "{e}"
        );
    }

    #[test]
    fn election_keys_are_checked_and_enabled_is_not_one_of_them() {
        let base = r#"
            id = 1
            data_dir = "d1"
            peer_listen = "127.0.0.1:7101"
            client_listen = "127.0.0.1:7201"
            [[peers]]
            id = 1
            peer_addr = "127.0.0.1:7101"
            client_addr = "127.0.0.1:7201"
        "#;
        let misspelt = format!("{base}\n[election]\nheartbeet = \"1s\"\n");
        assert!(toml::from_str::<ServerConfig>(&misspelt).is_err());
        let off = format!("{base}\n[election]\nenabled = false\n");
        let e = toml::from_str::<ServerConfig>(&off).unwrap_err();
        assert!(e.to_string().contains("cannot be turned off"), "{e}");
        // Configurations written before `enabled` left the file still read.
        let old = format!("{base}\n[election]\nenabled = true\nheartbeat = 300\n");
        assert!(
            toml::from_str::<ServerConfig>(&old)
                .unwrap()
                .election
                .enabled
        );
        let cfg: ServerConfig = toml::from_str(base).unwrap();
        assert!(cfg.device_config().election.enabled);
        let written: toml::Value = toml::from_str(&cfg.to_toml()).unwrap();
        assert!(written["election"].get("enabled").is_none(), "{written}");
    }

    #[test]
    fn free_local_ports_are_below_the_ephemeral_range_and_distinct() {
        let top = ephemeral_floor();
        let a = free_local_port().unwrap();
        let b = free_local_port().unwrap();
        assert!(a < top && b < top, "{a}, {b} not below {top}");
        assert_ne!(a, b);
        std::net::TcpListener::bind(("127.0.0.1", a)).unwrap();
    }
}
