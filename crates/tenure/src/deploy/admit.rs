//! `tenure deploy admit HOST`: the running cluster admits an added host's device (the
//! coordinator adds it to the membership record), and the command waits until the device
//! serves chunks. `tenure deploy retire HOST`: the cluster drains a host's device (its
//! chunks move, its stores migrate) and retires it; the process stops by itself.

use super::bundle::Bundle;
use anyhow::{Context, bail};
use std::path::Path;
use std::time::{Duration, Instant};
use tenure_client::tls::ClientTls;
use tenure_client::{Client, ClientOptions};

/// Admit host `name` of the bundle in `out`.
pub fn run(out: &Path, name: &str, limit: Duration) -> anyhow::Result<()> {
    let b = Bundle::load(out)?;
    let h = b.host(name)?.clone();
    let peer = h.peer(b.paths()).peer_addr.to_string();
    let mine = h.client_endpoint(b.paths());
    let others = b.endpoints_but(&h);
    let (rt, opts) = admin(&b)?;
    let started = Instant::now();
    rt.block_on(async {
        let c = Client::with_options(others, opts)?;
        while let Err(e) = c.status_of(&mine).await {
            if started.elapsed() > limit {
                bail!(
                    "device {} at {mine} did not answer within {limit:?} ({e}); is it started (see hosts/{name}/INSTALL.txt)?",
                    h.id
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let answered = started.elapsed();
        let record = c
            .cluster()
            .wait_admitted(h.id, &peer, &mine, limit.saturating_sub(started.elapsed()))
            .await
            .with_context(|| format!("device {} was not admitted", h.id))?;
        let admitted = started.elapsed();
        let chunks = loop {
            let n = match c.status_of(&mine).await {
                Ok(s) => s.chunks.iter().filter(|c| c.is_serving()).count(),
                Err(_) => 0,
            };
            if n > 0 {
                break n;
            }
            if started.elapsed() > limit {
                bail!(
                    "device {} was admitted but serves no chunk after {limit:?}",
                    h.id
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        println!(
            "device {} ({name}) admitted: it answered after {:.1}s, was admitted after {:.1}s and serves {chunks} chunks after {:.1}s; the coordinator moves more onto it a few stores at a time",
            h.id,
            answered.as_secs_f64(),
            admitted.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        println!("{}", crate::cluster::describe_members(&record));
        Ok(())
    })
}

/// A runtime and the bundle's admin client options (its CA; its admin token when
/// authorization is on).
fn admin(b: &Bundle) -> anyhow::Result<(tokio::runtime::Runtime, ClientOptions)> {
    let client_dir = b.dir().join("client");
    let tls = ClientTls::from_files(&client_dir.join("ca.pem"), None)
        .context("loading the bundle's CA")?;
    let token = match std::fs::read_to_string(client_dir.join("admin.token")) {
        Ok(s) => Some(s.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).context("reading the bundle's admin token"),
    };
    let opts = ClientOptions {
        tls: Some(tls),
        token,
        request_timeout: Duration::from_secs(2),
        attempt_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    Ok((crate::cluster::runtime()?, opts))
}

/// Retire host `name`'s device and mark the host retired in the bundle in `out`.
pub fn retire(out: &Path, name: &str, limit: Duration) -> anyhow::Result<()> {
    let b = Bundle::load(out)?;
    let h = b.host(name)?.clone();
    let others = b.endpoints_but(&h);
    if others.is_empty() {
        bail!("{name} is the bundle's only host; nothing could take its chunks");
    }
    let (rt, opts) = admin(&b)?;
    let started = Instant::now();
    let record = rt.block_on(async {
        let c = Client::with_options(others, opts)?;
        c.cluster()
            .wait_retired(h.id, &[], limit, |_| {})
            .await
            .with_context(|| format!("device {} was not retired within {limit:?}", h.id))
    })?;
    Bundle::mark_retired(out, name)?;
    println!(
        "device {} ({name}) retired in {:.1}s: its chunks moved and its stores migrated; it stops by itself (then `systemctl disable --now tenure` on {name})",
        h.id,
        started.elapsed().as_secs_f64()
    );
    println!("{}", crate::cluster::describe_members(&record));
    Ok(())
}
