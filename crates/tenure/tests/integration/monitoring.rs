//! The monitoring files in `deploy/monitoring/` against what the devices export: every
//! alert rule's and dashboard query's expression parses as PromQL, every metric they
//! name is in the server's catalog (`tenure_server::telemetry::catalog`) and is
//! exported by every device of a live local cluster, and `docs/metrics.md` lists every
//! metric and every alert. The checking function is shown to catch a rule that names a
//! metric no device exports and an expression that does not parse (planted inputs).

use promql_parser::parser::{self, Expr};
use promql_parser::util::{ExprVisitor, walk_expr};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tenure_server::telemetry::catalog::{self, Kind};

use crate::common;
use crate::common::{Guard, cluster_file, http_get, metrics_addrs, tenure, up, with_tls};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Metrics that Prometheus makes itself, not the devices.
const PROMETHEUS_OWN: &[&str] = &["up", "ALERTS", "ALERTS_FOR_STATE"];

/// A Prometheus rule file, as far as these rules use it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    groups: Vec<RuleGroup>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    name: String,
    rules: Vec<Rule>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// (alert name, expression) of every rule in `yaml`; panics on a file of another shape.
fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let file: RuleFile = serde_yaml::from_str(yaml).expect("a Prometheus rule file");
    let mut out = Vec::new();
    for g in &file.groups {
        assert!(
            !g.name.is_empty() && !g.rules.is_empty(),
            "group {:?}",
            g.name
        );
        for r in &g.rules {
            let severity = r.labels.get("severity").map(String::as_str);
            assert!(
                matches!(severity, Some("critical" | "warning")),
                "{}: severity {severity:?}",
                r.alert
            );
            assert!(r.annotations.contains_key("summary"), "{}", r.alert);
            assert!(r.annotations.contains_key("description"), "{}", r.alert);
            if let Some(f) = &r.for_ {
                parser::parse(&format!("x[{f}]"))
                    .unwrap_or_else(|e| panic!("{}: `for: {f}` is not a duration: {e}", r.alert));
            }
            out.push((r.alert.clone(), r.expr.clone()));
        }
    }
    out
}

/// (where, expression) of every query in a Grafana dashboard: each panel's targets
/// (rows' nested panels too), and the metric queries of its `label_values` variables.
fn dashboard_exprs(json: &str) -> Vec<(String, String)> {
    let d: serde_json::Value = serde_json::from_str(json).expect("dashboard JSON");
    let mut out = Vec::new();
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for p in list.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                let expr = t["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{title}: no expr"));
                out.push((format!("panel {title:?}"), expr.to_string()));
            }
            panels(&p["panels"], out);
        }
    }
    panels(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]["query"].as_str().unwrap_or_default();
        if let Some(inner) = q.strip_prefix("label_values(")
            && let Some((metric, _label)) = inner.rsplit_once(',')
        {
            out.push((format!("variable {}", v["name"]), metric.to_string()));
        }
    }
    out
}

/// `expr` with Grafana's template variables replaced by values PromQL accepts.
fn substitute(expr: &str) -> String {
    [
        ("$__rate_interval", "5m"),
        ("$__interval", "1m"),
        ("$__range", "1h"),
        ("${job}", "tenure"),
        ("$job", "tenure"),
        ("${instance}", ".*"),
        ("$instance", ".*"),
    ]
    .iter()
    .fold(expr.to_string(), |e, (var, value)| e.replace(var, value))
}

/// The metric names an expression selects.
struct Names(BTreeSet<String>);

impl ExprVisitor for Names {
    type Error = String;
    fn pre_visit(&mut self, e: &Expr) -> Result<bool, String> {
        let vs = match e {
            Expr::VectorSelector(vs) => vs,
            Expr::MatrixSelector(m) => &m.vs,
            _ => return Ok(true),
        };
        let by_matcher = (vs.matchers.matchers.iter())
            .find(|m| m.name == "__name__")
            .map(|m| m.value.clone());
        match vs.name.clone().or(by_matcher) {
            Some(n) => self.0.insert(n),
            None => return Err(format!("a selector without a metric name: {e}")),
        };
        Ok(true)
    }
}

/// The metric names `expr` (after [`substitute`]) selects, or why it does not parse.
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let ast = parser::parse(&substitute(expr))?;
    let mut names = Names(BTreeSet::new());
    walk_expr(&mut names, &ast)?;
    Ok(names.0)
}

/// What is wrong with `exprs` ((where, expression)) against `exported` (the sample
/// names a device exports): expressions that do not parse and metrics not exported.
fn problems(exprs: &[(String, String)], exported: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (at, expr) in exprs {
        match metric_names(expr) {
            Err(e) => out.push(format!("{at}: does not parse: {e}\n  {expr}")),
            Ok(names) => {
                for n in names {
                    if !PROMETHEUS_OWN.contains(&n.as_str()) && !exported.contains(&n) {
                        out.push(format!("{at}: {n} is not exported"));
                    }
                }
            }
        }
    }
    out
}

/// The sample names of a Prometheus text exposition.
fn sample_names(text: &str) -> BTreeSet<String> {
    (text.lines())
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// The sample names of the catalog's metrics (a histogram's as its buckets, sum, count).
fn catalog_samples() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in catalog::METRICS {
        match m.kind {
            Kind::Histogram => {
                for s in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{}{s}", m.name));
                }
            }
            _ => {
                out.insert(m.name.to_string());
            }
        }
    }
    out
}

fn all_exprs() -> Vec<(String, String)> {
    let mut all = rule_exprs(&read("deploy/monitoring/tenure-alerts.yml"));
    all.extend(dashboard_exprs(&read(
        "deploy/monitoring/tenure-dashboard.json",
    )));
    all
}

#[test]
fn rules_and_dashboard_parse_and_name_only_catalogued_metrics() {
    let _turn = turn!();
    let all = all_exprs();
    assert!(all.len() > 60, "found the expressions: {}", all.len());
    let found = problems(&all, &catalog_samples());
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_rule_naming_a_metric_nobody_exports_is_reported() {
    let _turn = turn!();
    let yaml = r#"
groups:
  - name: planted
    rules:
      - alert: Planted
        expr: sum(rate(tenure_no_such_metric_total[5m])) > 0 and on() up == 1
        for: 1m
        labels: {severity: warning}
        annotations: {summary: s, description: d}
"#;
    let found = problems(&rule_exprs(yaml), &catalog_samples());
    assert_eq!(
        found,
        ["Planted: tenure_no_such_metric_total is not exported"],
        "up is Prometheus's own; the planted name is reported"
    );
}

#[test]
fn an_expression_that_does_not_parse_is_reported() {
    let _turn = turn!();
    let exprs = [
        (
            "unclosed".to_string(),
            "sum(rate(tenure_writes_total[5m])".to_string(),
        ),
        (
            "bad range".to_string(),
            "rate(tenure_writes_total[5 minutes])".to_string(),
        ),
        (
            "fine".to_string(),
            "rate(tenure_writes_total[$__rate_interval])".to_string(),
        ),
    ];
    let found = problems(&exprs, &catalog_samples());
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].starts_with("unclosed: does not parse"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("bad range: does not parse"),
        "{found:?}"
    );
}

#[test]
fn the_metrics_reference_lists_every_metric_and_alert() {
    let _turn = turn!();
    let doc = read("docs/metrics.md");
    let missing: Vec<&str> = (catalog::METRICS.iter())
        .map(|m| m.name)
        .filter(|n| !doc.contains(&format!("`{n}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/metrics.md does not list {missing:?}"
    );
    let alerts: Vec<String> = (rule_exprs(&read("deploy/monitoring/tenure-alerts.yml")))
        .into_iter()
        .map(|(a, _)| a)
        .filter(|a| !doc.contains(&format!("`{a}`")))
        .collect();
    assert!(
        alerts.is_empty(),
        "docs/metrics.md does not explain {alerts:?}"
    );
}

#[test]
fn every_metric_the_rules_and_dashboard_name_is_exported_by_every_device() {
    let _turn = turn!();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("tenure-data");
    let _guard = Guard(data.clone());
    up(&data);
    // A write to every store through each device: the request histograms' series appear
    // with the first request of their kind; the client errors' with the first error (a
    // keep-alive of a session that does not exist).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _in_rt = rt.enter();
    for d in cluster_file(&data)["devices"].as_array().unwrap() {
        let ep = d["client_addr"].as_str().unwrap().to_string();
        let c = tenure_client::Client::with_options(
            vec![ep.clone()],
            with_tls(&data, Default::default()),
        )
        .unwrap();
        for store in 0..common::STORES {
            rt.block_on(c.write(store, 1, 1))
                .expect("a write through each device");
        }
        // A keep-alive of a session that never was: a client error at this device.
        let opts = with_tls(&data, Default::default());
        let mut stub = tenure_client::proto::tenure_client::TenureClient::new(
            tenure_client::channel(&ep, &opts).unwrap(),
        );
        let ghost = tenure_client::proto::KeepAliveRequest {
            session: Some(tenure_client::proto::SessionRef { store: 0, id: 999 }),
        };
        let answered = rt.block_on(async {
            let mut answers = (stub.keep_alive(tokio_stream::iter([ghost])).await)
                .unwrap()
                .into_inner();
            answers.message().await.unwrap()
        });
        assert!(
            answered.is_some(),
            "a keep-alive of a ghost session is answered"
        );
    }
    let all = all_exprs();
    for addr in metrics_addrs(&data) {
        // Gauges set once a second are registered at start; a few scrapes at most.
        let start = Instant::now();
        loop {
            let (status, body) = http_get(&addr, "/metrics");
            assert_eq!(status, 200, "/metrics at {addr}: {body}");
            let found = problems(&all, &sample_names(&body));
            if found.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "device at {addr}:\n{}",
                found.join("\n")
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let (ok, out, err) = tenure(&["cluster", "down", "--data", data.to_str().unwrap()]);
    assert!(ok, "cluster down: {out}{err}");
}
