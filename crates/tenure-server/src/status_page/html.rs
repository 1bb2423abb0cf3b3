//! The status page as HTML: a [`Page`] rendered server-side with inline CSS and no
//! script; every client-supplied string goes through [`esc`].

use super::view::{LockRow, Page};
use super::{ELECTION_SUFFIX, REFRESH_SECS};
use crate::driver::status::{DETAIL_LOCKS_MAX, DETAIL_SESSIONS_MAX};
use std::fmt::Write as _;
use tenure_client::lookup::convert::state_name as node_state_name;
use tenure_client::status::{chunk_state_name, mgr_state_name};
use tenure_core::ids::DeviceId;
use tenure_core::layout::{ChunkState, MgrState};
use tenure_core::lookup::NodeState;

/// `s` with the characters HTML gives a meaning escaped, for text and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) const CSS: &str = r#"
:root { --ok:#1a7f37; --ok-bg:#dafbe1; --warn:#9a6700; --warn-bg:#fff8c5; --bad:#cf222e;
  --bad-bg:#ffebe9; --info:#0969da; --info-bg:#ddf4ff; --muted:#57606a; --line:#d0d7de; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:#1f2328; background:#f6f8fa; }
header { background:#24292f; color:#fff; padding:12px 24px; display:flex; flex-wrap:wrap;
  align-items:baseline; gap:8px 24px; }
header h1 { font-size:20px; margin:0; font-weight:600; }
header .meta { color:#d0d7de; font-size:13px; }
header code { color:#fff; }
nav { padding:6px 24px; background:#32383f; font-size:13px; color:#d0d7de; }
nav a { color:#9cd0ff; margin-right:14px; text-decoration:none; }
nav a.here { color:#fff; font-weight:600; }
main { padding:16px 24px 24px; display:grid; grid-template-columns:repeat(auto-fit,minmax(480px,1fr));
  gap:16px; }
section { background:#fff; border:1px solid var(--line); border-radius:6px; padding:0 0 4px;
  overflow:auto; }
section.wide { grid-column:1/-1; }
section h2 { font-size:15px; margin:0; padding:10px 14px; border-bottom:1px solid var(--line);
  background:#f6f8fa; border-radius:6px 6px 0 0; }
section h2 small { color:var(--muted); font-weight:400; margin-left:6px; }
.cards { display:flex; flex-wrap:wrap; gap:12px; grid-column:1/-1; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:8px 16px;
  min-width:130px; }
.card b { display:block; font-size:22px; }
.card span { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; padding:5px 14px; border-bottom:1px solid #eaeef2; vertical-align:top;
  white-space:nowrap; }
th { color:var(--muted); font-weight:600; font-size:12px; text-transform:uppercase; }
tr:last-child td { border-bottom:none; }
td.name { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; white-space:normal;
  word-break:break-all; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.pill { display:inline-block; padding:0 8px; border-radius:10px; font-size:12px; font-weight:600;
  margin-right:4px; }
.ok { color:var(--ok); background:var(--ok-bg); }
.warn { color:var(--warn); background:var(--warn-bg); }
.bad { color:var(--bad); background:var(--bad-bg); }
.info { color:var(--info); background:var(--info-bg); }
.muted { color:var(--muted); }
.pill.muted { background:#eaeef2; }
td.wrap { white-space:normal; }
td.mono { font-family:ui-monospace,SFMono-Regular,Menlo,monospace; }
p.empty { color:var(--muted); padding:6px 14px; margin:0; }
footer { color:var(--muted); font-size:12px; padding:0 24px 16px; }
footer a { color:var(--info); }
"#;

pub(super) fn pill(class: &str, text: &str) -> String {
    format!(r#"<span class="pill {class}">{}</span>"#, esc(text))
}

pub(super) fn mgr_class(state: &str) -> &'static str {
    match state {
        s if s == mgr_state_name(MgrState::Manager) => "ok",
        "" => "muted",
        _ => "warn",
    }
}

pub(super) fn chunk_class(state: &str) -> &'static str {
    match state {
        s if s == chunk_state_name(ChunkState::RegularLease) => "ok",
        s if s == chunk_state_name(ChunkState::NoLease)
            || s == chunk_state_name(ChunkState::GarbageCollect) =>
        {
            "bad"
        }
        _ => "warn",
    }
}

pub(super) fn lookup_class(state: &str) -> &'static str {
    match state {
        s if s == node_state_name(NodeState::Leader) => "ok",
        s if s == node_state_name(NodeState::Active) => "info",
        _ => "muted",
    }
}

pub(super) fn snapshot_class(status: &str) -> &'static str {
    match status {
        "complete" | "recorded" => "ok",
        "failed" => "bad",
        _ => "warn",
    }
}

pub(super) fn device_link(p: &Page, id: u64) -> String {
    match p
        .devices
        .iter()
        .find(|d| d.id == id)
        .and_then(|d| d.status_page.as_deref())
    {
        Some(addr) if id != p.device.id => {
            format!(r#"<a href="http://{}/">d{id}</a>"#, esc(addr))
        }
        _ => format!("d{id}"),
    }
}

pub(super) fn duration_ms(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{} h {} min", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

pub(super) fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// How long before `now_ms` the moment `ms` was (both Unix ms).
pub(super) fn ago(now_ms: u64, ms: u64) -> String {
    if ms == 0 {
        return "—".into();
    }
    match now_ms.saturating_sub(ms) {
        0..1000 => "just now".into(),
        d => format!("{} ago", duration_ms(d / 1000 * 1000)),
    }
}

pub(super) fn unix_time(ms: u64) -> String {
    // UTC, from the civil-from-days algorithm (no calendar crate needed for one column).
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

pub(super) fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body>\n",
        esc(title)
    )
}

pub(super) fn render_error(me: DeviceId, why: &str) -> String {
    let mut h = head(&format!("Tenure {me}: no answer"));
    let _ = writeln!(
        h,
        "<header><h1>Tenure · device {me}</h1></header><main><section class=\"wide\">\
         <h2>No status</h2><p class=\"empty\">{}</p></section></main></body></html>",
        esc(why)
    );
    h
}

/// The status page of `p`.
pub fn render(p: &Page) -> String {
    let me = p.device.id;
    let mut h = head(&format!("Tenure d{me} status"));
    // Header: who this is.
    let mut roles = String::new();
    if p.acting_coordinator {
        roles.push_str(&pill("ok", "coordinator"));
    }
    if let Some(l) = &p.lookup {
        roles.push_str(&pill(
            lookup_class(&l.state),
            &format!("lookup {}", l.state),
        ));
    }
    let _ = writeln!(
        h,
        "<header><h1>Tenure · device d{me}</h1>{roles}<span class=\"meta\">version {} · client \
         <code>{}</code> · peer <code>{}</code> · metrics <code>{}</code> · up {} · {}</span>\
         </header>",
        esc(p.device.version),
        esc(&p.device.client_addr),
        esc(&p.device.peer_addr),
        esc(&p.device.metrics_addr),
        duration_ms(p.device.uptime_secs * 1000),
        unix_time(p.generated_unix_ms),
    );
    // Links to every device's page.
    h.push_str("<nav>devices:");
    for d in &p.devices {
        match (&d.status_page, d.me) {
            (_, true) => {
                let _ = write!(h, r#" <a class="here" href="/">d{}</a>"#, d.id);
            }
            (Some(addr), false) => {
                let _ = write!(h, r#" <a href="http://{}/">d{}</a>"#, esc(addr), d.id);
            }
            (None, false) => {
                let _ = write!(h, r#" <span class="muted">d{}</span>"#, d.id);
            }
        }
    }
    h.push_str("</nav>\n<main>\n");
    cards(&mut h, p);
    devices_section(&mut h, p);
    lookup_section(&mut h, p);
    locks_section(&mut h, p);
    stores_section(&mut h, p);
    sessions_section(&mut h, p);
    elections_section(&mut h, p);
    snapshots_section(&mut h, p);
    chunks_section(&mut h, p);
    let _ = write!(
        h,
        "</main>\n<footer>Locks and sessions are those of the stores this device manages; \
         every other store's are on its manager's page. This page reloads every \
         {REFRESH_SECS} s · <a href=\"/status.json\">status.json</a> · \
         <a href=\"/metrics\">metrics</a></footer>\n</body></html>\n"
    );
    h
}

pub(super) fn cards(h: &mut String, p: &Page) {
    let managed = p.stores.iter().filter(|s| s.source == "manager").count();
    let held: usize = (p.locks.iter()).filter(|l| !l.holders.is_empty()).count();
    let objects: u64 = p.stores.iter().filter_map(|s| s.objects).sum();
    let coordinator = match &p.coordinator {
        Some(t) => format!("d{} <small>term {}</small>", t.device, t.term),
        None => "none".into(),
    };
    let alive = p.devices.iter().filter(|d| d.seen_by_lookup).count();
    let members = p.devices.iter().filter(|d| d.state != "retired").count();
    h.push_str("<div class=\"cards\">");
    for (value, label) in [
        (format!("{alive} / {members}"), "devices up"),
        (coordinator, "coordinator"),
        (
            format!("{managed} / {}", p.stores_total),
            "stores managed here",
        ),
        (p.sessions.len().to_string(), "sessions here"),
        (held.to_string(), "locks held here"),
        (objects.to_string(), "objects here"),
        (p.snapshots.len().to_string(), "snapshots"),
    ] {
        let _ = write!(
            h,
            "<div class=\"card\"><b>{value}</b><span>{label}</span></div>"
        );
    }
    h.push_str("</div>\n");
}

pub(super) fn devices_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Devices<small>membership version {}</small></h2><table><tr><th>device</th>\
         <th>state</th><th>roles</th><th>client address</th></tr>",
        p.membership_version
    );
    for d in &p.devices {
        let member = match d.state.as_str() {
            "active" => pill("ok", "active"),
            "retiring" => pill("warn", "retiring"),
            other => pill("muted", other),
        };
        let heard = if d.seen_by_lookup {
            pill("ok", "up")
        } else {
            pill("bad", "not heard")
        };
        let mut roles = String::new();
        if d.me {
            roles.push_str(&pill("info", "this device"));
        }
        if d.coordinator {
            let term = p.coordinator.as_ref().map_or(0, |t| t.term);
            roles.push_str(&pill("ok", &format!("coordinator (term {term})")));
        }
        if d.lookup_leader {
            roles.push_str(&pill("ok", "lookup leader"));
        }
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{member}{heard}</td><td class=\"wrap\">{roles}</td><td class=\"mono\">{}</td></tr>",
            device_link(p, d.id),
            esc(&d.client_addr)
        );
    }
    h.push_str("</table></section>\n");
}

pub(super) fn stores_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section class=\"wide\"><h2>Stores<small>{} in all; manager and epoch as this device knows them</small>\
         </h2><table><tr><th>store</th><th>manager</th><th class=\"num\">epoch</th><th>here</th>\
         <th class=\"num\">sessions</th><th class=\"num\">locks</th><th class=\"num\">objects</th>\
         <th>chunks</th></tr>",
        p.stores_total
    );
    for s in &p.stores {
        let manager = match s.manager {
            Some(m) => device_link(p, m),
            None => pill("bad", "unknown"),
        };
        let here = match (s.role.as_str(), s.chunks_here) {
            ("", 0) => String::from("<span class=\"muted\">—</span>"),
            ("", _) => pill("muted", "chunk"),
            (role, _) => pill(mgr_class(role), role),
        };
        let count = |v: Option<usize>| v.map_or(String::from("—"), |n| n.to_string());
        let objects = match (s.objects, s.object_bytes) {
            (Some(n), Some(b)) if n > 0 => format!("{n} ({})", bytes(b)),
            (Some(n), _) => n.to_string(),
            _ => "—".into(),
        };
        let mut chunks = esc(&s.layout.join(" "));
        if !s.failed.is_empty() {
            chunks.push(' ');
            chunks.push_str(&pill("bad", &format!("failed {}", s.failed.join(" "))));
        }
        let _ = write!(
            h,
            "<tr><td>s{}</td><td>{manager}</td><td class=\"num\">{}</td><td>{here}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{objects}</td>\
             <td class=\"name\">{chunks}</td></tr>",
            s.store,
            s.epoch,
            count(s.sessions),
            count(s.locks),
        );
    }
    h.push_str("</table></section>\n");
}

pub(super) fn locks_section(h: &mut String, p: &Page) {
    let locks: Vec<&LockRow> = (p.locks.iter())
        .filter(|l| !l.name.ends_with(ELECTION_SUFFIX))
        .collect();
    let _ = write!(
        h,
        "<section class=\"wide\"><h2>Locks<small>{} held or waited for, in the stores managed \
         here{}</small></h2>",
        locks.len(),
        cut(
            p.locks.len(),
            p.stores.iter().filter_map(|s| s.locks).sum(),
            DETAIL_LOCKS_MAX
        )
    );
    if locks.is_empty() {
        h.push_str("<p class=\"empty\">No lock is held or waited for here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>lock</th><th>store</th><th>holders (session · mode · fencing token)</th>\
         <th>queue (oldest first)</th></tr>",
    );
    for l in locks {
        let holders = if l.holders.is_empty() {
            pill("muted", "free")
        } else {
            (l.holders.iter())
                .map(|x| {
                    format!(
                        "{} session {} · token {}",
                        pill(if x.mode == "exclusive" { "bad" } else { "info" }, x.mode),
                        x.session,
                        esc(&x.token)
                    )
                })
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let queue = if l.waiters.is_empty() {
            String::from("<span class=\"muted\">—</span>")
        } else {
            (l.waiters.iter().enumerate())
                .map(|(i, w)| format!("{}. session {} {}", i + 1, w.session, pill("warn", w.mode)))
                .collect::<Vec<_>>()
                .join("<br>")
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>s{}</td><td>{holders}</td><td>{queue}</td></tr>",
            esc(&l.name),
            l.store
        );
    }
    h.push_str("</table></section>\n");
}

pub(super) fn elections_section(h: &mut String, p: &Page) {
    let elections: Vec<&LockRow> = (p.locks.iter())
        .filter(|l| l.name.ends_with(ELECTION_SUFFIX))
        .collect();
    if elections.is_empty() {
        return;
    }
    h.push_str(
        "<section><h2>Elections<small>in the stores managed here</small></h2><table><tr>\
         <th>election</th><th>leader (session · token)</th><th class=\"num\">candidates</th></tr>",
    );
    for l in elections {
        let name = &l.name[..l.name.len() - ELECTION_SUFFIX.len()];
        let leader = match l.holders.first() {
            Some(x) => format!("session {} · token {}", x.session, esc(&x.token)),
            None => pill("warn", "none"),
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>{leader}</td><td class=\"num\">{}</td></tr>",
            esc(name),
            l.waiters.len()
        );
    }
    h.push_str("</table></section>\n");
}

/// A note when a list is cut: `listed` of `total` rows, at most `max` per store.
pub(super) fn cut(listed: usize, total: usize, max: usize) -> String {
    if listed >= total {
        return String::new();
    }
    format!(" (the first {max} of each store: {listed} of {total})")
}

pub(super) fn sessions_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Sessions<small>{} open in the stores managed here{}</small></h2>",
        p.sessions.len(),
        cut(
            p.sessions.len(),
            p.stores.iter().filter_map(|s| s.sessions).sum(),
            DETAIL_SESSIONS_MAX
        )
    );
    if p.sessions.is_empty() {
        h.push_str("<p class=\"empty\">No open session here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>session</th><th>store</th><th class=\"num\">TTL</th>\
         <th class=\"num\">expires in</th><th class=\"num\">locks held</th></tr>",
    );
    for s in &p.sessions {
        let expires = match s.expires_in_ms {
            Some(0) => pill("bad", "expiring"),
            Some(ms) if ms < s.ttl_ms / 3 => pill("warn", &duration_ms(ms)),
            Some(ms) => duration_ms(ms),
            None => "—".into(),
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>s{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{expires}</td><td class=\"num\">{}</td></tr>",
            s.id,
            s.store,
            duration_ms(s.ttl_ms),
            s.locks_held
        );
    }
    h.push_str("</table></section>\n");
}

pub(super) fn lookup_section(h: &mut String, p: &Page) {
    let Some(l) = &p.lookup else {
        return;
    };
    let leader = match l.leader {
        Some(d) => device_link(p, d),
        None => pill("bad", "none"),
    };
    let up: Vec<String> = l.up.iter().map(|d| device_link(p, *d)).collect();
    let _ = writeln!(
        h,
        "<section><h2>Lookup node<small>seed 003</small></h2><table>\
         <tr><th>state</th><td>{}</td></tr><tr><th>leader</th><td>{leader}</td></tr>\
         <tr><th>live entries</th><td>{}</td></tr><tr><th>subscriptions</th><td>{}</td></tr>\
         <tr><th>nodes up</th><td>{}</td></tr></table></section>",
        pill(lookup_class(&l.state), &l.state),
        l.entries,
        l.subscriptions,
        up.join(" ")
    );
}

pub(super) fn snapshots_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Snapshots<small>{} this device took part in</small></h2>",
        p.snapshots.len()
    );
    if p.snapshots.is_empty() {
        h.push_str("<p class=\"empty\">No snapshot yet.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>snapshot</th><th>status</th><th>when</th><th>devices</th>\
         <th class=\"num\">part</th></tr>",
    );
    for s in p.snapshots.iter().rev() {
        let mut status = pill(snapshot_class(&s.status), &s.status);
        if s.initiated_here {
            status.push_str(&pill("info", "started here"));
        }
        if !s.error.is_empty() {
            let _ = write!(status, " <span class=\"muted\">{}</span>", esc(&s.error));
        }
        let devices: Vec<String> = s.devices.iter().map(|d| format!("d{d}")).collect();
        let _ = write!(
            h,
            "<tr><td class=\"mono\">{}</td><td>{status}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(&s.id),
            ago(p.generated_unix_ms, s.unix_ms),
            devices.join(" "),
            s.part_bytes.map_or(String::from("—"), bytes)
        );
    }
    h.push_str("</table></section>\n");
}

pub(super) fn chunks_section(h: &mut String, p: &Page) {
    let _ = write!(
        h,
        "<section><h2>Chunks<small>{} held here</small></h2>",
        p.chunks.len()
    );
    if p.chunks.is_empty() {
        h.push_str("<p class=\"empty\">No chunk here.</p></section>\n");
        return;
    }
    h.push_str(
        "<table><tr><th>chunk</th><th>store</th><th>state</th><th class=\"num\">epoch</th>\
         <th>lease from</th></tr>",
    );
    for c in &p.chunks {
        let lease = match c.lease_manager {
            Some(d) => device_link(p, d),
            None => "—".into(),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>s{}</td><td>{}</td><td class=\"num\">{}</td><td>{lease}</td></tr>",
            esc(&c.id),
            c.store,
            pill(chunk_class(&c.state), &c.state),
            c.epoch
        );
    }
    h.push_str("</table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status_page::{
        DeviceRow, DeviceView, HolderRow, SnapshotRow, StoreRow, TermView, WaiterRow,
    };

    fn page() -> Page {
        Page {
            device: DeviceView {
                id: 1,
                version: "0.1.0",
                peer_addr: "127.0.0.1:1".into(),
                client_addr: "127.0.0.1:2".into(),
                metrics_addr: "127.0.0.1:3".into(),
                uptime_secs: 5,
            },
            generated_unix_ms: 1_767_225_600_000,
            stores_total: 2,
            coordinator: Some(TermView { device: 1, term: 3 }),
            acting_coordinator: true,
            membership_version: 0,
            devices: vec![DeviceRow {
                id: 1,
                state: "active".into(),
                me: true,
                coordinator: true,
                lookup_leader: true,
                seen_by_lookup: true,
                client_addr: "127.0.0.1:2".into(),
                status_page: Some("127.0.0.1:3".into()),
            }],
            stores: vec![StoreRow::new(0), StoreRow::new(1)],
            chunks: Vec::new(),
            sessions: Vec::new(),
            locks: vec![LockRow {
                store: 0,
                name: "/web/<script>alert(\"x\")</script>&co".into(),
                holders: vec![HolderRow {
                    session: 42,
                    mode: "exclusive",
                    token: "1.7".into(),
                }],
                waiters: vec![WaiterRow {
                    session: 43,
                    mode: "shared",
                }],
            }],
            lookup: None,
            snapshots: vec![SnapshotRow {
                id: "1-2".into(),
                status: "failed".into(),
                initiated_here: true,
                devices: Vec::new(),
                unix_ms: 0,
                part_bytes: None,
                error: "<img src=x>".into(),
            }],
        }
    }

    #[test]
    fn status_page_escapes_every_client_string() {
        let html = render(&page());
        assert!(!html.contains("<script>"), "a lock name is not markup");
        assert!(!html.contains("<img"), "an error text is not markup");
        assert!(html.contains("/web/&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;co"));
        assert!(html.contains("session 42"));
        assert!(html.contains("1. session 43"));
        assert!(html.contains(r#"<meta http-equiv="refresh" content="2">"#));
        assert!(!html.contains("the first"), "nothing was cut");
        let mut cut = page();
        cut.stores[0].locks = Some(250);
        assert!(render(&cut).contains("(the first 200 of each store: 1 of 250)"));
    }

    #[test]
    fn status_page_dates_are_utc_calendar_dates() {
        assert_eq!(unix_time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(unix_time(1_767_225_600_000), "2026-01-01 00:00:00 UTC");
        assert_eq!(
            unix_time(951_782_400_000 + 3_661_000),
            "2000-02-29 01:01:01 UTC"
        );
    }

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(esc("/plain/name"), "/plain/name");
    }
}
