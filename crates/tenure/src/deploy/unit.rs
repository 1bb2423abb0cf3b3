//! What a host's bundle says to its init system and to its operator: the systemd unit and
//! the installation steps.

use super::bundle::{HostEntry, Paths};

/// The systemd unit running host `h`'s device.
pub fn systemd_unit(h: &HostEntry, p: &Paths) -> String {
    let config_dir = h.config_dir(p);
    let data_dir = h.data_dir(p);
    format!(
        "[Unit]
Description=Tenure device {id} ({name})
Documentation=file://{config_dir}/INSTALL.txt
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={user}
Group={user}
ExecStart={binary} server --config {config_dir}/server.toml
# SIGHUP reloads the [auth] section (tokens and client certificates) without a restart.
ExecReload=/bin/kill -HUP $MAINPID
# A device stops cleanly on SIGTERM; what it acknowledged is already on disk.
KillSignal=SIGTERM
TimeoutStopSec=30
Restart=on-failure
RestartSec=2
LimitNOFILE=65536
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadWritePaths={data_dir}
ReadOnlyPaths={config_dir}

[Install]
WantedBy=multi-user.target
",
        id = h.id,
        name = h.host.name,
        user = p.user,
        binary = p.binary,
    )
}

/// The steps that install host `h`'s bundle directory on the host.
pub fn install_steps(h: &HostEntry, p: &Paths, join: bool) -> String {
    let config_dir = h.config_dir(p);
    let data_dir = h.data_dir(p);
    let user = &p.user;
    let mut s = format!(
        "Tenure device {id} on host {name} ({addr})

Listens on {addr}:{client} (clients, TLS), {addr}:{peer} (peers, TLS) and
{addr}:{metrics} (Prometheus metrics, plain HTTP).

Install, as root on {name}, from this directory:

  useradd --system --home-dir {data_dir} --shell /usr/sbin/nologin {user}
  install -d -o root -g {user} -m 0750 {config_dir} {config_dir}/tls
  install -o root -g {user} -m 0640 server.toml {config_dir}/server.toml
  install -o root -g {user} -m 0644 tls/ca.pem tls/device.pem {config_dir}/tls/
  install -o root -g {user} -m 0640 tls/device.key {config_dir}/tls/device.key
  install -d -o {user} -g {user} -m 0700 {data_dir}
  install -m 0644 tenure.service /etc/systemd/system/tenure.service
  install -m 0755 /path/to/tenure {binary}
  systemctl daemon-reload
  systemctl enable --now tenure

Open the client, peer and metrics ports to the other hosts, the clients and Prometheus.
",
        id = h.id,
        name = h.host.name,
        addr = h.host.addr,
        client = p.client_port,
        peer = p.peer_port,
        metrics = p.metrics_port,
        binary = p.binary,
    );
    if join {
        s.push_str(&format!(
            "
This device joins a running cluster. Once it is started, admit it from the machine that
keeps the bundle:

  tenure deploy admit {name} --out <bundle>
",
            name = h.host.name
        ));
    } else {
        s.push_str(
            "
Start every host of the cluster; the devices find each other and the cluster serves once
a majority of each store's chunks is up. Check it from the machine that keeps the bundle:

  set -a; . <bundle>/client/admin.env; set +a
  tenure status
",
        );
    }
    s
}
