//! The monitoring kit of `deploy/monitoring/`: the alerts, as a user's overlay renders them
//! (`kubectl kustomize`), are checked and unit-tested by the real `promtool` (Debian's
//! `prometheus` package; `PROMTOOL` names another binary) on series that fire them and
//! series that must not (`tests/fixtures/monitoring/alerts.test.yaml`); and every metric and
//! label they read is one tagpin serves: two `tagpin run --leader-elect` replicas are
//! scraped, and every family's labels are read from `Metrics::encode`.

use crate::run::commit_mode_config;
use crate::support;
use crate::support::eventually_async;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Output, Stdio};

use serde_yaml::Value;
use support::git::BareRepo;
use support::kube::{Grant, KubeServer};
use support::manifests::deployment;
use support::registry::{free_port, Mode, TestRegistry};
use tokio::process::{Child, Command};

/// The labels a target's series get from the ServiceMonitor (`deploy/monitoring/servicemonitor`):
/// a scraped `namespace` of tagpin's own becomes `exported_namespace`.
const TARGET_LABELS: [&str; 7] = [
    "job",
    "namespace",
    "service",
    "pod",
    "instance",
    "endpoint",
    "container",
];

/// Series the rules may read that tagpin does not serve: Prometheus' own.
const PROMETHEUS_SERIES: [&str; 1] = ["up"];

/// `promtool ARGS` in `dir`; fails the test with the install command when promtool is missing.
fn promtool(dir: &Path, args: &[&str]) -> Output {
    let promtool = std::env::var_os("PROMTOOL").unwrap_or_else(|| "promtool".into());
    std::process::Command::new(&promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {promtool:?} ({e}); these tests need promtool: \
                 `apt-get install -y prometheus` (Debian's package ships it), or set PROMTOOL \
                 to its path"
            )
        })
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The PrometheusRule of the controller's install with the monitoring components, as
/// `kubectl kustomize` renders it.
fn rendered_rule() -> Value {
    crate::deploy::with_monitoring("deploy")
        .into_iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule in the render")
}

/// Every alerting rule of the PrometheusRule.
fn alerts(rule: &Value) -> Vec<&Value> {
    rule["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter(|r| r["alert"].is_string())
        .collect()
}

fn fixture() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/monitoring/alerts.test.yaml"),
    )
    .unwrap()
}

#[test]
fn the_alerts_pass_promtool_check_and_their_unit_tests() {
    let rule = rendered_rule();
    let dir = tempfile::tempdir().unwrap();
    // The rule file is the PrometheusRule's spec, as the Prometheus Operator hands it on.
    std::fs::write(
        dir.path().join("alerts.yaml"),
        serde_yaml::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.path().join("alerts.test.yaml"), fixture()).unwrap();

    let checked = promtool(dir.path(), &["check", "rules", "alerts.yaml"]);
    assert!(checked.status.success(), "{}", text(&checked));
    let rules = alerts(&rule).len();
    assert!(
        text(&checked).contains(&format!("SUCCESS: {rules} rules found")),
        "{}",
        text(&checked)
    );
    let tested = promtool(dir.path(), &["test", "rules", "alerts.test.yaml"]);
    assert!(tested.status.success(), "{}", text(&tested));
}

#[test]
fn every_alert_pages_with_a_summary_and_a_runbook_and_is_tested_firing_and_silent() {
    let rule = rendered_rule();
    let tests: Value = serde_yaml::from_str(&fixture()).unwrap();
    // alert -> (tested firing, tested silent)
    let mut tested: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for case in tests["tests"].as_sequence().unwrap() {
        for eval in case["alert_rule_test"].as_sequence().unwrap() {
            let name = eval["alertname"].as_str().unwrap().to_string();
            let fires = eval["exp_alerts"]
                .as_sequence()
                .is_some_and(|a| !a.is_empty());
            let seen = tested.entry(name).or_default();
            if fires {
                seen.0 = true;
            } else {
                seen.1 = true;
            }
        }
    }
    let mut names = BTreeSet::new();
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        assert!(names.insert(name), "{name} twice");
        assert!(name.starts_with("Tagpin"), "{name}");
        assert!(
            matches!(
                alert["labels"]["severity"].as_str(),
                Some("critical" | "warning")
            ),
            "{name}: severity"
        );
        for annotation in ["summary", "description", "runbook"] {
            let value = alert["annotations"][annotation]
                .as_str()
                .unwrap_or_default();
            assert!(value.len() > 20, "{name}: no {annotation}");
        }
        assert_eq!(
            tested.get(name),
            Some(&(true, true)),
            "{name}: promtool must see series that fire it and series that must not"
        );
    }
    let unknown: Vec<&String> = tested
        .keys()
        .filter(|t| !names.contains(t.as_str()))
        .collect();
    assert!(unknown.is_empty(), "tests of no alert: {unknown:?}");
}

// ---------------------------------------------------------------------------------------------
// The metrics the alerts read, against what tagpin serves

/// Sample names served for each family a `/metrics` page declares (`# TYPE`): a counter's
/// `_total`, a histogram's `_bucket`, `_sum` and `_count`, a gauge's own name.
fn served_names(page: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in page.lines() {
        let Some(declared) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (family, kind) = declared.split_once(' ').unwrap();
        match kind.trim() {
            "counter" => {
                names.insert(format!("{family}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{family}{suffix}"));
                }
            }
            _ => {
                names.insert(family.to_string());
            }
        }
    }
    names
}

/// Each sample name of a page and the label names its samples carry.
fn labels_by_name(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let sample = regex::Regex::new(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? ").unwrap();
    let label = regex::Regex::new(r#"([a-zA-Z_][a-zA-Z0-9_]*)="#).unwrap();
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        if let Some(c) = sample.captures(line) {
            let labels = found.entry(c[1].to_string()).or_default();
            let own = c.get(2).map_or("", |m| m.as_str());
            for l in label.captures_iter(own) {
                labels.insert(l[1].to_string());
            }
        }
    }
    found
}

/// Every family of the controller and the operator with one series, through the label types
/// their code uses: `encode` then shows each family's label names.
fn every_family_with_a_series() -> String {
    use tagpin::metrics::*;
    let m = Metrics::new();
    let text = |s: &str| s.to_string();
    inc(
        &m.passes,
        PassLabels {
            outcome: text("ok"),
            trigger: text("schedule"),
        },
    );
    m.pass_seconds.observe(1.0);
    m.resolve_seconds.observe(1.0);
    inc(
        &m.registry_requests,
        RegistryLabels {
            host: text("r.io"),
            status: text("200"),
        },
    );
    m.rate_limit_remaining
        .get_or_create(&HostLabels { host: text("r.io") })
        .set(5);
    m.commits.inc();
    inc(
        &m.pull_requests,
        ActionLabels {
            action: text("opened"),
        },
    );
    m.webhook_coalesced.inc();
    m.zero_verifications();
    inc(
        &m.verification_errors,
        ErrorLabels {
            kind: text("forge"),
        },
    );
    m.zero_promotions(["production"]);
    m.zero_notifications("slack");
    m.last_success.set(1);
    m.registry_clients.set(1);
    m.object_reconciled
        .get_or_create(&ObjectLabels {
            namespace: text("team-a"),
            name: text("web"),
        })
        .set(1);
    m.pass_interval.set(300);
    m.set_leader("tagpin-leader", true);
    inc(
        &m.deployments,
        DeploymentLabels {
            stage: text("staging"),
            outcome: text("reverted"),
        },
    );
    let stage = StageLabels {
        stage: text("staging"),
    };
    m.lead_time.get_or_create(&stage).observe(60.0);
    m.time_to_restore.get_or_create(&stage).observe(60.0);
    m.set_audit(&std::collections::BTreeMap::new());
    m.encode()
}

/// The label names a series of `name` has once scraped: its own, a clashing `namespace`
/// renamed `exported_namespace`, and the target's.
fn scraped_labels(own: &BTreeSet<String>) -> BTreeSet<String> {
    own.iter()
        .map(|l| match l.as_str() {
            "namespace" => "exported_namespace".to_string(),
            other => other.to_string(),
        })
        .chain(TARGET_LABELS.iter().map(|l| l.to_string()))
        .collect()
}

/// What an expression reads: (series name, label names it matches on), and the label names
/// of its `by`, `without`, `on` and `ignoring` clauses.
type Reads = (Vec<(String, Vec<String>)>, Vec<String>);

fn reads(expr: &str) -> Reads {
    let re = |pattern: &str| regex::Regex::new(pattern).unwrap();
    let selector = re(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}");
    let matcher = re(r#"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*""#);
    let clause = re(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)");
    let range = re(r"\[[^\]]*\]");
    let word = re(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?");
    let keywords = [
        "and",
        "or",
        "unless",
        "offset",
        "bool",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let mut series = Vec::new();
    for c in selector.captures_iter(expr) {
        let matchers = matcher
            .captures_iter(&c[2])
            .map(|l| l[1].to_string())
            .collect();
        series.push((c[1].to_string(), matchers));
    }
    // What is left once selectors (and the label values in them), clauses and ranges are
    // gone: functions (a name and a parenthesis), keywords, numbers, and bare series names.
    let rest = selector.replace_all(expr, " ");
    let mut grouping = Vec::new();
    for c in clause.captures_iter(&rest) {
        let labels = c[2].split(',').map(str::trim).filter(|l| !l.is_empty());
        grouping.extend(labels.map(str::to_string));
    }
    let rest = clause.replace_all(&rest, " ");
    let rest = range.replace_all(&rest, " ");
    for c in word.captures_iter(&rest) {
        let name = &c[1];
        if c.get(2).is_none() && !keywords.contains(&name) {
            series.push((name.to_string(), Vec::new()));
        }
    }
    (series, grouping)
}

/// A `tagpin run --leader-elect` replica, its log in a file.
struct Replica {
    child: Child,
    base: String,
    log: std::path::PathBuf,
}

impl Replica {
    async fn start(dir: &Path, name: &str, config: &Path, kubeconfig: &Path) -> Replica {
        let port = free_port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["run", "--interval", "1h", "--verify-interval", "1h"])
            .args(["--leader-elect", "--leader-elect-retry-period", "500ms"])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(config)
            .arg("--cache-dir")
            .arg(dir.join(format!("cache-{name}")))
            .env("HOME", dir)
            .env("RUST_LOG", "tagpin=info")
            .env_remove("DOCKER_CONFIG")
            .env_remove("TAGPIN_WEBHOOK_SECRET")
            .env("KUBECONFIG", kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", "tagpin")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start tagpin run");
        Replica {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let answer = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        let status = answer.status().as_u16();
        Some((status, answer.text().await.ok()?))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn stop(self) {
        let output = support::terminate(self.child, "tagpin run").await;
        assert_eq!(output.status.code(), Some(0));
    }
}

/// The value of the sample named exactly `series` (labels included) on a page.
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// The series names and, for each, the label names the alerts read.
fn read_by_alerts() -> BTreeMap<String, BTreeSet<String>> {
    let rule = rendered_rule();
    let mut read: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for alert in alerts(&rule) {
        let (series, _) = reads(alert["expr"].as_str().unwrap());
        for (metric, matchers) in series {
            read.entry(metric).or_default().extend(matchers);
        }
    }
    read
}

#[test]
fn every_metric_and_label_the_alerts_read_is_one_tagpin_serves() {
    let page = every_family_with_a_series();
    let served = served_names(&page);
    let labels = labels_by_name(&page);
    let rule = rendered_rule();
    for alert in alerts(&rule) {
        let name = alert["alert"].as_str().unwrap();
        let (series, grouping) = reads(alert["expr"].as_str().unwrap());
        assert!(!series.is_empty(), "{name}: reads no series");
        let mut allowed: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for (metric, matchers) in &series {
            if PROMETHEUS_SERIES.contains(&metric.as_str()) {
                for label in matchers {
                    assert!(
                        TARGET_LABELS.contains(&label.as_str()),
                        "{name}: {metric}{{{label}}}"
                    );
                }
                continue;
            }
            assert!(
                served.contains(metric),
                "{name} reads {metric}, which tagpin does not serve; it serves {served:#?}"
            );
            let own = labels
                .get(metric)
                .unwrap_or_else(|| panic!("{metric}: no series in Metrics::encode"));
            let scraped = scraped_labels(own);
            for label in matchers {
                assert!(
                    scraped.contains(label),
                    "{name}: {metric} has no label {label} (it has {scraped:?})"
                );
            }
            allowed.extend(scraped);
        }
        for label in grouping {
            assert!(
                allowed.contains(&label),
                "{name} groups or matches by {label}, which none of its series has"
            );
        }
    }
    // The parser found what the rules read (one that finds nothing would pass anything).
    let read = read_by_alerts();
    for expected in [
        "tagpin_last_success_timestamp_seconds",
        "tagpin_pass_interval_seconds",
        "tagpin_passes_total",
        "tagpin_object_last_reconcile_timestamp_seconds",
        "tagpin_verifications_total",
        "tagpin_promotions_total",
        "tagpin_webhook_deliveries_total",
        "tagpin_registry_rate_limit_remaining",
        "tagpin_leader",
        "up",
    ] {
        assert!(read.contains_key(expected), "{expected} not in {read:?}");
    }
    assert_eq!(
        read["tagpin_verifications_total"],
        BTreeSet::from(["verdict".to_string(), "source".to_string()])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_and_its_standby_say_who_leads_and_serve_what_the_alerts_read() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1")),
    )]);
    let kube = KubeServer::start().await;
    kube.grant(Grant::namespaced(
        "tagpin",
        &["get", "create", "update"],
        &["leases"],
    ));
    let dir = tempfile::tempdir().unwrap();
    let config = commit_mode_config(dir.path(), &repo, &host);
    let kubeconfig = kube.kubeconfig(dir.path());

    let leader = Replica::start(dir.path(), "replica-a", &config, &kubeconfig).await;
    eventually_async(
        "replica-a leads, finishes its first cycle and reads its history",
        || async {
            leader.get("/readyz").await.is_some_and(|(s, _)| s == 200)
                && leader
                    .get("/metrics")
                    .await
                    .is_some_and(|(_, page)| page.contains("tagpin_deployments_total{"))
        },
    )
    .await;
    let standby = Replica::start(dir.path(), "replica-b", &config, &kubeconfig).await;
    eventually_async("replica-b stands by", || async {
        standby.log().contains("standing by")
            && standby.get("/healthz").await.is_some_and(|(s, _)| s == 200)
    })
    .await;
    let (_, leading) = leader.get("/metrics").await.unwrap();
    let (_, standing_by) = standby.get("/metrics").await.unwrap();
    leader.stop().await;
    standby.stop().await;

    // Who leads, per Lease, and the interval the alerts count in.
    let lease = "tagpin_leader{lease=\"tagpin-leader\"}";
    assert_eq!(value(&leading, lease), Some(1.0), "{leading}");
    assert_eq!(value(&standing_by, lease), Some(0.0), "{standing_by}");
    for page in [&leading, &standing_by] {
        assert_eq!(
            value(page, "tagpin_pass_interval_seconds"),
            Some(3600.0),
            "{page}"
        );
    }
    // Counters the alerts see on their first increment are served at zero from the start.
    for series in [
        "tagpin_webhook_deliveries_total{sender=\"harbor\",result=\"unauthorized\"}",
        "tagpin_webhook_deliveries_total{sender=\"ghcr\",result=\"accepted\"}",
        "tagpin_verifications_total{verdict=\"failed\",source=\"branch\"}",
        "tagpin_verifications_total{verdict=\"failed\",source=\"merged\"}",
    ] {
        assert_eq!(value(&leading, series), Some(0.0), "{series}: {leading}");
    }
    // Every series the alerts read is on the leader's page, but for those this controller has
    // no occasion to serve: the operator's per-object times, promotions (no stages here) and a
    // rate limit (this registry reports none). Deployments are served at zero for each stage
    // once its history was read, before any settled.
    let served = served_names(&leading);
    let missing: BTreeSet<String> = read_by_alerts()
        .into_keys()
        .filter(|name| !served.contains(name) && !PROMETHEUS_SERIES.contains(&name.as_str()))
        .collect();
    assert_eq!(
        missing,
        BTreeSet::from([
            "tagpin_object_last_reconcile_timestamp_seconds".to_string(),
            "tagpin_promotions_total".to_string(),
            "tagpin_registry_rate_limit_remaining".to_string(),
        ]),
        "{leading}"
    );
    // What the processes serve is what Metrics::encode lists, the label checks' source.
    let listed = served_names(&every_family_with_a_series());
    for name in served.union(&served_names(&standing_by)) {
        assert!(listed.contains(name), "{name} is not in Metrics::encode");
    }
}

/// The operator serves who leads, its interval and each object's last reconcile time, which
/// TagpinNoLeader and TagpinObjectNotReconciled read.
#[tokio::test(flavor = "multi_thread")]
async fn the_operator_serves_who_leads_its_interval_and_each_objects_reconcile_time() {
    use crate::operator::{cluster, pinned_repository, spec, Operator};
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1")),
    )]);
    let kube = cluster().await;
    kube.apply(pinned_repository(
        "web",
        serde_json::json!({}),
        spec(&repo.file_url(), &host),
    ));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;
    eventually_async("the operator reconciles web", || async {
        operator.reconciled_at("web").await.is_some()
    })
    .await;
    // Without --leader-elect it acts alone: 1, with no Lease named.
    assert_eq!(operator.metric("tagpin_leader{lease=\"\"}").await, Some(1));
    assert_eq!(
        operator.metric("tagpin_pass_interval_seconds").await,
        Some(3600)
    );
    operator.stop().await;
}
