//! Hosts as the operator names them: `NAME=ADDRESS`, an address, or a name resolved when
//! the bundle is written (a device's configuration names its peers by address).

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, ToSocketAddrs};

/// One host of a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpec {
    /// Its name: the bundle's directory for it, the systemd unit's description, and a
    /// DNS name its certificate carries (when it is not an address).
    pub name: String,
    /// The address its device listens on and its peers dial.
    pub addr: IpAddr,
}

impl HostSpec {
    /// The DNS names its device's certificate carries beside its address.
    pub fn dns_names(&self) -> Vec<String> {
        if self.name.parse::<IpAddr>().is_ok() {
            Vec::new()
        } else {
            vec![self.name.clone()]
        }
    }
}

/// A host name as a bundle takes it: letters, digits, `-` and `.` (a DNS name or an
/// address), not starting with `.` or `-`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == ':')
}

/// Parse `--host`: `NAME=ADDRESS`, `ADDRESS`, or `NAME` (resolved now).
pub fn parse_host(s: &str) -> Result<HostSpec, String> {
    let (name, addr) = match s.split_once('=') {
        Some((n, a)) => {
            let addr = a
                .parse::<IpAddr>()
                .map_err(|_| format!("{a:?} is not an IP address (in --host {s})"))?;
            (n.to_string(), addr)
        }
        None => match s.parse::<IpAddr>() {
            Ok(addr) => (s.to_string(), addr),
            Err(_) => {
                if !valid_name(s) {
                    return Err(format!("{s:?} is not a host name"));
                }
                let addr = (s, 0)
                    .to_socket_addrs()
                    .map_err(|e| format!("resolving {s}: {e} (give NAME=ADDRESS)"))?
                    .map(|a| a.ip())
                    .min_by_key(|ip| ip.is_ipv6())
                    .ok_or_else(|| format!("{s} resolves to no address (give NAME=ADDRESS)"))?;
                (s.to_string(), addr)
            }
        },
    };
    if !valid_name(&name) || name.contains(':') && name.parse::<IpAddr>().is_err() {
        return Err(format!(
            "{name:?} is not a host name (letters, digits, `-` and `.`)"
        ));
    }
    if addr.is_unspecified() || addr.is_multicast() {
        return Err(format!("{addr} cannot be a host's address"));
    }
    Ok(HostSpec { name, addr })
}

/// `template` with `{host}` replaced by `host`.
pub fn expand(template: &str, host: &str) -> String {
    template.replace("{host}", host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_a_name_and_an_address_an_address_or_a_resolved_name() {
        let h = parse_host("db1=10.0.0.1").unwrap();
        assert_eq!(
            (h.name.as_str(), h.addr.to_string()),
            ("db1", "10.0.0.1".into())
        );
        assert_eq!(h.dns_names(), vec!["db1".to_string()]);
        let h = parse_host("10.0.0.2").unwrap();
        assert_eq!(h.name, "10.0.0.2");
        assert!(h.dns_names().is_empty());
        let h = parse_host("localhost").unwrap();
        assert!(h.addr.is_loopback());
    }

    #[test]
    fn bad_hosts_are_refused_with_the_reason() {
        for (s, why) in [
            ("db1=", "not an IP address"),
            ("db1=10.0.0", "not an IP address"),
            ("../x=10.0.0.1", "not a host name"),
            ("a b=10.0.0.1", "not a host name"),
            ("-x=10.0.0.1", "not a host name"),
            ("db1=0.0.0.0", "cannot be a host's address"),
            ("db1=224.0.0.1", "cannot be a host's address"),
            ("no-such-host.invalid", "resolving"),
        ] {
            let e = parse_host(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn templates_name_the_host() {
        assert_eq!(expand("/srv/{host}/data", "db1"), "/srv/db1/data");
        assert_eq!(expand("/var/lib/tenure", "db1"), "/var/lib/tenure");
    }
}
