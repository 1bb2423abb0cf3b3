//! Test hosts: one network namespace per device, joined by a bridge that lives in a
//! namespace of its own, so the machine's own interfaces and routes are never touched.
//! The root namespace (where the test process and its clients run) gets one veth into the
//! bridge with the last address of the run's /24, which adds exactly one connected route
//! for a subnet nobody else uses.
//!
//! ```text
//!   root ns: tc<R>r 10.213.X.254 ──┐
//!                                  │  ns tchaos-<pid>-<R>-br: bridge br0
//!   ns tchaos-<pid>-<R>-h1: eth0 10.213.X.11 ──┤
//!   ns tchaos-<pid>-<R>-h2: eth0 10.213.X.12 ──┘ ...
//! ```
//!
//! Names carry the creating process's id and a random suffix: parallel runs never
//! collide, and a later run deletes the leftovers of runs whose process is gone (killed
//! before its guard could clean up). [`TestNet`] removes everything on drop, which also
//! runs when a panic unwinds or when the run is interrupted (the runner turns Ctrl-C
//! and SIGTERM into a normal return).
//!
//! Faults are nftables rules in the hosts' namespaces: a table `inet chaos` per host,
//! replaced whole at every change and deleted to heal.

use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// Prefix of every namespace a run creates.
pub const PREFIX: &str = "tchaos";

/// Port of every device's peer transport (each host has its own address).
pub const PEER_PORT: u16 = 7100;
/// Port of every device's client API.
pub const CLIENT_PORT: u16 = 7200;

/// Run `ip` (or any tool) and fail with its stderr.
pub(crate) fn sh(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Run a command inside namespace `ns`, feeding `input` on stdin.
pub(crate) fn sh_in(ns: &str, program: &str, args: &[&str], input: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program} in {ns}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(input.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {} in {ns} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Why test hosts cannot be made here (the caller skips rather than fails).
pub fn unsupported() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    if sh("nft", &["--version"]).is_err() {
        return Some("nft (nftables) is not installed".into());
    }
    let probe = format!("{PREFIX}-probe-{}", std::process::id());
    if let Err(e) = sh("ip", &["netns", "add", &probe]) {
        return Some(format!("ip netns add is not permitted: {e:#}"));
    }
    let nft = sh_in(&probe, "nft", &["-f", "-"], "table inet probe { }\n");
    let _ = sh("ip", &["netns", "del", &probe]);
    if let Err(e) = nft {
        return Some(format!("nftables does not work in a namespace: {e:#}"));
    }
    None
}

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Kill every process in namespace `ns` and delete it.
fn delete_ns(ns: &str) {
    if let Ok(pids) = sh("ip", &["netns", "pids", ns]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    let _ = sh("ip", &["netns", "del", ns]);
}

/// Delete the namespaces of earlier runs whose creating process is gone. Returns their
/// names.
pub fn remove_leftovers() -> Vec<String> {
    let Ok(list) = sh("ip", &["netns", "list"]) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let mut parts = name.split('-');
        if parts.next() != Some(PREFIX) {
            continue;
        }
        let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !pid_alive(pid) {
            delete_ns(name);
            removed.push(name.to_string());
        }
    }
    removed
}

/// One test host.
#[derive(Clone, Debug)]
pub struct Host {
    /// Device id (1-based).
    pub id: u64,
    /// Its namespace.
    pub ns: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
}

/// The test network of one run. Dropping it kills every process left in its namespaces
/// and deletes them.
#[derive(Debug)]
pub struct TestNet {
    /// Run tag: `<pid>-<random>`.
    pub tag: String,
    /// The hosts, device 1 first.
    pub hosts: Vec<Host>,
    /// The root namespace's address on the bridge (the clients').
    pub root_addr: Ipv4Addr,
    /// The /24's third octet.
    pub subnet: u8,
    bridge_ns: String,
    root_if: String,
}

/// A random 32-bit value from the kernel (names must differ between parallel runs of
/// one seed, so this is not drawn from the seed).
fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    u32::from_le_bytes(b) ^ t
}

impl TestNet {
    /// Create `n` hosts. Leftovers of dead runs are deleted first.
    pub fn create(n: usize) -> anyhow::Result<TestNet> {
        for name in remove_leftovers() {
            tracing::info!(%name, "deleted a namespace left by a dead run");
        }
        let r = random_u32();
        let tag = format!("{}-{:06x}", std::process::id(), r & 0xFF_FFFF);
        // A /24 of 10.213.0.0/16 that no route of this machine covers yet.
        let routes = sh("ip", &["-4", "route", "show"]).unwrap_or_default();
        let mut subnet = None;
        for k in 0..256u32 {
            let x = ((r >> 24) + k) % 256;
            if !routes.contains(&format!("10.213.{x}.")) {
                subnet = Some(x as u8);
                break;
            }
        }
        let subnet = subnet.context("no free /24 in 10.213.0.0/16")?;
        let mut net = TestNet {
            bridge_ns: format!("{PREFIX}-{tag}-br"),
            root_if: format!("tc{:06x}r", r & 0xFF_FFFF),
            tag,
            hosts: Vec::new(),
            root_addr: Ipv4Addr::new(10, 213, subnet, 254),
            subnet,
        };
        // From here on, drop cleans up whatever was made.
        net.build(n)?;
        Ok(net)
    }

    fn build(&mut self, n: usize) -> anyhow::Result<()> {
        let br = self.bridge_ns.clone();
        sh("ip", &["netns", "add", &br])?;
        sh("ip", &["-n", &br, "link", "set", "lo", "up"])?;
        sh("ip", &["-n", &br, "link", "add", "br0", "type", "bridge"])?;
        sh("ip", &["-n", &br, "link", "set", "br0", "up"])?;
        for id in 1..=n as u64 {
            let ns = format!("{PREFIX}-{}-h{id}", self.tag);
            sh("ip", &["netns", "add", &ns])?;
            let addr = Ipv4Addr::new(10, 213, self.subnet, 10 + id as u8);
            self.hosts.push(Host {
                id,
                ns: ns.clone(),
                addr,
            });
            let port = format!("h{id}");
            sh(
                "ip",
                &[
                    "-n", &br, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                    "netns", &ns,
                ],
            )?;
            sh("ip", &["-n", &br, "link", "set", &port, "master", "br0"])?;
            sh("ip", &["-n", &br, "link", "set", &port, "up"])?;
            sh("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
            let cidr = format!("{addr}/24");
            sh("ip", &["-n", &ns, "addr", "add", &cidr, "dev", "eth0"])?;
            sh("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        let root_if = self.root_if.clone();
        sh(
            "ip",
            &[
                "link", "add", &root_if, "type", "veth", "peer", "name", "up0", "netns", &br,
            ],
        )?;
        sh("ip", &["-n", &br, "link", "set", "up0", "master", "br0"])?;
        sh("ip", &["-n", &br, "link", "set", "up0", "up"])?;
        let cidr = format!("{}/24", self.root_addr);
        sh("ip", &["addr", "add", &cidr, "dev", &root_if])?;
        sh("ip", &["link", "set", &root_if, "up"])?;
        Ok(())
    }

    /// The client endpoint of device `id`.
    pub fn client_endpoint(&self, id: u64) -> String {
        format!("{}:{CLIENT_PORT}", self.host(id).addr)
    }

    /// Host of device `id`.
    pub fn host(&self, id: u64) -> &Host {
        &self.hosts[(id - 1) as usize]
    }

    /// Replace host `id`'s fault rules: drop every packet from the hosts in `from_hosts`
    /// and to the hosts in `to_hosts`; with `loss_pct`, also drop that share of the
    /// packets exchanged with every other host (the root namespace's client traffic is
    /// never dropped). Nothing to drop heals the host.
    pub fn set_rules(
        &self,
        id: u64,
        from_hosts: &[u64],
        to_hosts: &[u64],
        loss_pct: Option<u32>,
    ) -> anyhow::Result<()> {
        let host = self.host(id);
        let set = |ids: &[u64]| -> String {
            let a: Vec<String> = ids.iter().map(|i| self.host(*i).addr.to_string()).collect();
            format!("{{ {} }}", a.join(", "))
        };
        let peers = format!("10.213.{}.0/24", self.subnet);
        let mut input = String::new();
        let mut output = String::new();
        if !from_hosts.is_empty() {
            input += &format!("    ip saddr {} drop\n", set(from_hosts));
        }
        if !to_hosts.is_empty() {
            output += &format!("    ip daddr {} drop\n", set(to_hosts));
        }
        if let Some(p) = loss_pct {
            let root = self.root_addr;
            input += &format!(
                "    ip saddr {peers} ip saddr != {root} numgen random mod 100 < {p} drop\n"
            );
            output += &format!(
                "    ip daddr {peers} ip daddr != {root} numgen random mod 100 < {p} drop\n"
            );
        }
        // Deleting a missing table fails; creating an empty one first makes it exist.
        let mut script = String::from("table inet chaos { }\ndelete table inet chaos\n");
        if !input.is_empty() || !output.is_empty() {
            script += &format!(
                "table inet chaos {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n{input}  }}\n  chain output {{\n    type filter hook output priority 0; policy accept;\n{output}  }}\n}}\n"
            );
        }
        sh_in(&host.ns, "nft", &["-f", "-"], &script)
    }

    /// Remove every host's fault rules.
    pub fn heal(&self) -> anyhow::Result<()> {
        for h in &self.hosts {
            self.set_rules(h.id, &[], &[], None)?;
        }
        Ok(())
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for h in &self.hosts {
            delete_ns(&h.ns);
        }
        let _ = sh("ip", &["link", "del", &self.root_if]);
        delete_ns(&self.bridge_ns);
    }
}
