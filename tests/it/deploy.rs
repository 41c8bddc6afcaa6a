//! The manifests in `deploy/` grant tagpin least privilege, run it hardened, and build.
//!
//! Both variants are rendered the way a user renders them, `kubectl kustomize deploy/` and
//! `kubectl kustomize deploy/cronjob/` (offline; `KUBECTL` names another kubectl binary), and
//! every rendered object is checked: against the Kubernetes schema (typed round trip through
//! k8s-openapi, so a misspelled field fails), and for what tagpin's deployment promises: read-only
//! RBAC, non-root read-only containers without privileges, one recreated replica with health
//! probes, a CronJob that never overlaps, no Secret in the build, a valid configuration wired to
//! the environment variables and files the pods get, and an image that kustomize can override.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use crate::support;

use serde::Deserialize;
use serde_yaml::Value;

/// Everything the verifier reads, by (API group, resource): the workload kinds (Argo Rollouts
/// among them) and their pods, and the GitOps objects that say which commit was applied and
/// what it became. Nothing else.
const VERIFIER_READS: [(&str, &str); 13] = [
    ("", "pods"),
    ("apps", "daemonsets"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps.openshift.io", "deploymentconfigs"),
    ("argoproj.io", "applications"),
    ("argoproj.io", "rollouts"),
    ("batch", "cronjobs"),
    ("batch", "jobs"),
    ("helm.toolkit.fluxcd.io", "helmreleases"),
    ("kustomize.toolkit.fluxcd.io", "kustomizations"),
    ("source.toolkit.fluxcd.io", "gitrepositories"),
];

#[test]
fn the_verifier_role_grants_only_read_verbs() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/common/rbac.yaml"),
    )
    .unwrap();
    let mut rules_seen = 0;
    let mut granted = BTreeSet::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(document).unwrap();
        if value["kind"] != "ClusterRole" && value["kind"] != "Role" {
            continue;
        }
        for rule in value["rules"].as_sequence().unwrap() {
            rules_seen += 1;
            for verb in rule["verbs"].as_sequence().unwrap() {
                let verb = verb.as_str().unwrap();
                assert!(
                    ["get", "list", "watch"].contains(&verb),
                    "write verb {verb} in {rule:?}"
                );
            }
            let resources: Vec<&str> = rule["resources"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert!(
                !resources.contains(&"*") && !resources.contains(&"secrets"),
                "{resources:?}"
            );
            for group in rule["apiGroups"].as_sequence().unwrap() {
                for resource in &resources {
                    granted.insert((group.as_str().unwrap().to_string(), resource.to_string()));
                }
            }
        }
    }
    assert_eq!(rules_seen, 8);
    let expected: BTreeSet<(String, String)> = VERIFIER_READS
        .iter()
        .map(|(g, r)| (g.to_string(), r.to_string()))
        .collect();
    assert_eq!(granted, expected, "exactly what the verifier reads");
}

// ---------------------------------------------------------------------------------------------
// Rendering

const NAMESPACE: &str = "tagpin";
const IMAGE_NAME: &str = "ghcr.io/tagpin/tagpin";
const USER_ID: i64 = 65532;
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One rendered variant.
struct Build {
    /// The directory given to `kubectl kustomize`, relative to the repository.
    dir: &'static str,
    objects: Vec<Value>,
}

/// `kubectl kustomize DIR`, or a failure carrying kubectl's own output.
fn kustomize(dir: &Path) -> Vec<Value> {
    support::kubectl::kustomize(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// Both variants, rendered once for all the tests.
fn builds() -> &'static [Build] {
    static BUILDS: OnceLock<Vec<Build>> = OnceLock::new();
    BUILDS.get_or_init(|| {
        ["deploy", "deploy/cronjob"]
            .into_iter()
            .map(|dir| Build {
                dir,
                objects: kustomize(&repo().join(dir)),
            })
            .collect()
    })
}

/// `deploy/operator/`, rendered once: checked with the others where the same promises hold
/// (schema, hardening, network policy), and on its own for its RBAC and objects.
fn operator() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| Build {
        dir: "deploy/operator",
        objects: kustomize(&repo().join("deploy/operator")),
    })
}

/// `deploy/operator-multi-tenant/`, the shared install, rendered once.
fn multi_tenant() -> &'static Build {
    static BUILD: OnceLock<Build> = OnceLock::new();
    BUILD.get_or_init(|| Build {
        dir: "deploy/operator-multi-tenant",
        objects: kustomize(&repo().join("deploy/operator-multi-tenant")),
    })
}

/// Every variant, the operator's (single-team and shared) included.
fn all_builds() -> impl Iterator<Item = &'static Build> {
    builds().iter().chain([operator(), multi_tenant()])
}

fn build(dir: &str) -> &'static Build {
    builds().iter().find(|b| b.dir == dir).unwrap()
}

fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn label(object: &Value) -> String {
    format!("{}/{}", kind(object), name(object))
}

impl Build {
    fn one(&self, wanted: &str) -> &Value {
        let found: Vec<&Value> = self.objects.iter().filter(|o| kind(o) == wanted).collect();
        assert_eq!(found.len(), 1, "{}: expected one {wanted}", self.dir);
        found[0]
    }

    /// Every pod template (or pod) in the build, with the object holding it.
    fn pod_specs(&self) -> Vec<(&Value, &Value)> {
        self.objects
            .iter()
            .filter_map(|o| {
                let spec = match kind(o) {
                    "Pod" => &o["spec"],
                    "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
                        &o["spec"]["template"]["spec"]
                    }
                    "CronJob" => &o["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                    _ => return None,
                };
                Some((o, spec))
            })
            .collect()
    }
}

/// Every container of a pod spec, init containers included.
fn containers(pod: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|key| pod[*key].as_sequence())
        .flatten()
        .collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_sequence()
        .map(|s| s.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The value following `flag` in a container's args.
fn flag<'a>(container: &'a Value, flag: &str) -> Option<&'a str> {
    let args = strings(&container["args"]);
    args.iter()
        .position(|a| *a == flag)
        .and_then(|i| args.get(i + 1).copied())
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The container port a probe or Service port names, by name or by number.
fn resolve_port(container: &Value, port: &Value) -> Option<i64> {
    container["ports"].as_sequence()?.iter().find_map(|p| {
        let number = p["containerPort"].as_i64()?;
        (port.as_i64() == Some(number) || (port.is_string() && p["name"] == *port))
            .then_some(number)
    })
}

// ---------------------------------------------------------------------------------------------
// What each variant contains

#[test]
fn both_variants_build_offline_with_the_expected_objects() {
    let expected: BTreeMap<&str, Vec<&str>> = BTreeMap::from([
        (
            "deploy",
            vec![
                "ClusterRole/tagpin-verifier",
                "ClusterRoleBinding/tagpin-verifier",
                "ConfigMap/tagpin-config",
                "Deployment/tagpin",
                "Namespace/tagpin",
                "NetworkPolicy/tagpin",
                "Service/tagpin",
                "ServiceAccount/tagpin",
            ],
        ),
        (
            "deploy/cronjob",
            vec![
                "ClusterRole/tagpin-verifier",
                "ClusterRoleBinding/tagpin-verifier",
                "ConfigMap/tagpin-config",
                "CronJob/tagpin-sync",
                "Namespace/tagpin",
                "NetworkPolicy/tagpin",
                "ServiceAccount/tagpin",
            ],
        ),
    ]);
    for build in builds() {
        let mut found: Vec<String> = build.objects.iter().map(label).collect();
        found.sort();
        assert_eq!(found, expected[build.dir], "{}", build.dir);
        for object in &build.objects {
            let cluster_scoped = matches!(
                kind(object),
                "Namespace" | "ClusterRole" | "ClusterRoleBinding"
            );
            let namespace = object["metadata"]["namespace"].as_str();
            if cluster_scoped {
                assert_eq!(namespace, None, "{}: {}", build.dir, label(object));
            } else {
                assert_eq!(
                    namespace,
                    Some(NAMESPACE),
                    "{}: {}",
                    build.dir,
                    label(object)
                );
            }
        }
    }
}

/// Deserializes into the k8s-openapi type and serializes back: a field the schema does not
/// know (a typo) is dropped on the way and shows up as a difference, a wrong type fails.
fn round_trip<T>(object: &serde_json::Value) -> Result<(), String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    match first_difference(object, &back, String::new()) {
        None => Ok(()),
        Some(path) => Err(format!("{path}: not in the schema, or not of its type")),
    }
}

fn first_difference(
    original: &serde_json::Value,
    back: &serde_json::Value,
    path: String,
) -> Option<String> {
    use serde_json::Value as J;
    match (original, back) {
        (J::Object(a), J::Object(b)) => a
            .iter()
            .find_map(|(k, v)| {
                let path = format!("{path}.{k}");
                match b.get(k) {
                    Some(w) => first_difference(v, w, path),
                    None => Some(path),
                }
            })
            .or_else(|| {
                b.keys()
                    .find(|k| !a.contains_key(*k))
                    .map(|k| format!("{path}.{k} (added)"))
            }),
        (J::Array(a), J::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(v, w, format!("{path}[{i}]"))),
        (a, b) if a == b => None,
        // One number, however written (kustomize prints the CRD's `maximum: 3600.0` as 3600).
        (J::Number(a), J::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ => Some(path),
    }
}

#[test]
fn every_object_matches_the_kubernetes_schema() {
    use k8s_openapi::api::{apps, batch, core, networking, rbac};
    let template = serde_json::to_value(secret_template()).unwrap();
    if let Err(e) = round_trip::<core::v1::Secret>(&template) {
        panic!("deploy/secret.example.yaml: {e}");
    }
    for build in all_builds() {
        for object in &build.objects {
            let json = serde_json::to_value(object).unwrap();
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let checked = match (api_version, kind(object)) {
                ("v1", "Namespace") => round_trip::<core::v1::Namespace>(&json),
                ("v1", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>(&json),
                ("v1", "ConfigMap") => round_trip::<core::v1::ConfigMap>(&json),
                ("v1", "Secret") => round_trip::<core::v1::Secret>(&json),
                ("v1", "Service") => round_trip::<core::v1::Service>(&json),
                ("apps/v1", "Deployment") => round_trip::<apps::v1::Deployment>(&json),
                ("batch/v1", "CronJob") => round_trip::<batch::v1::CronJob>(&json),
                ("networking.k8s.io/v1", "NetworkPolicy") => {
                    round_trip::<networking::v1::NetworkPolicy>(&json)
                }
                ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                    round_trip::<rbac::v1::ClusterRole>(&json)
                }
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                    round_trip::<rbac::v1::ClusterRoleBinding>(&json)
                }
                ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::v1::Role>(&json),
                ("policy/v1", "PodDisruptionBudget") => {
                    round_trip::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(&json)
                }
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => round_trip::<
                    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
                >(&json),
                ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                    round_trip::<rbac::v1::RoleBinding>(&json)
                }
                other => Err(format!("{other:?} has no schema check here; add one")),
            };
            if let Err(e) = checked {
                panic!("{}: {}: {e}", build.dir, label(object));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Least privilege

#[test]
fn roles_grant_only_get_list_watch_and_never_secrets() {
    for build in builds() {
        let mut roles = BTreeSet::new();
        for role in build
            .objects
            .iter()
            .filter(|o| matches!(kind(o), "ClusterRole" | "Role"))
        {
            roles.insert((kind(role).to_string(), name(role).to_string()));
            let at = format!("{}: {}", build.dir, label(role));
            assert!(
                role["aggregationRule"].is_null(),
                "{at}: aggregates other roles"
            );
            let rules = role["rules"].as_sequence().unwrap();
            if name(role) == "tagpin-verifier" {
                assert_eq!(rules.len(), 8, "{at}");
            }
            for rule in rules {
                let verbs = strings(&rule["verbs"]);
                assert!(!verbs.is_empty(), "{at}: {rule:?}");
                for verb in verbs {
                    assert!(READ_VERBS.contains(&verb), "{at}: write verb {verb:?}");
                }
                let resources = strings(&rule["resources"]);
                assert!(!resources.is_empty(), "{at}: {rule:?}");
                for resource in resources {
                    let base = resource.split('/').next().unwrap();
                    assert!(
                        base != "*" && base != "secrets" && !resource.ends_with("/*"),
                        "{at}: grants {resource:?}"
                    );
                }
                assert!(
                    !strings(&rule["apiGroups"]).contains(&"*"),
                    "{at}: {rule:?}"
                );
                assert!(rule["nonResourceURLs"].is_null(), "{at}: {rule:?}");
            }
        }
        assert!(!roles.is_empty(), "{}: no role rendered", build.dir);
        // Bindings only to the roles above (never to cluster-admin, edit, view ...), and only
        // for tagpin's own ServiceAccount.
        for binding in build
            .objects
            .iter()
            .filter(|o| matches!(kind(o), "ClusterRoleBinding" | "RoleBinding"))
        {
            let at = format!("{}: {}", build.dir, label(binding));
            let role_ref = &binding["roleRef"];
            let target = (
                role_ref["kind"].as_str().unwrap().to_string(),
                role_ref["name"].as_str().unwrap().to_string(),
            );
            assert!(
                roles.contains(&target),
                "{at}: binds {target:?}, not defined here"
            );
            for subject in binding["subjects"].as_sequence().unwrap() {
                assert_eq!(subject["kind"], "ServiceAccount", "{at}");
                assert_eq!(subject["name"], "tagpin", "{at}");
                assert_eq!(subject["namespace"], NAMESPACE, "{at}");
            }
        }
    }
}

/// A field of the container's security context, else of the pod's.
fn effective<'a>(pod: &'a Value, container: &'a Value, field: &str) -> &'a Value {
    match &container["securityContext"][field] {
        Value::Null => &pod["securityContext"][field],
        value => value,
    }
}

#[test]
fn every_container_runs_non_root_read_only_without_privileges() {
    for build in all_builds() {
        let pods = build.pod_specs();
        assert!(!pods.is_empty(), "{}: no workload rendered", build.dir);
        for (owner, pod) in pods {
            let at = format!("{}: {}", build.dir, label(owner));
            assert_eq!(pod["serviceAccountName"], "tagpin", "{at}");
            for host in ["hostNetwork", "hostPID", "hostIPC"] {
                assert_ne!(pod[host], Value::Bool(true), "{at}: {host}");
            }
            for volume in pod["volumes"].as_sequence().into_iter().flatten() {
                assert!(
                    volume["hostPath"].is_null(),
                    "{at}: hostPath volume {volume:?}"
                );
            }
            let all = containers(pod);
            assert!(!all.is_empty(), "{at}: no container");
            for container in all {
                let at = format!("{at}: container {:?}", container["name"]);
                let security = &container["securityContext"];
                assert_eq!(
                    effective(pod, container, "runAsNonRoot").as_bool(),
                    Some(true),
                    "{at}"
                );
                assert_eq!(
                    effective(pod, container, "runAsUser").as_i64(),
                    Some(USER_ID),
                    "{at}"
                );
                assert_eq!(
                    effective(pod, container, "seccompProfile")["type"],
                    "RuntimeDefault",
                    "{at}"
                );
                assert_eq!(security["readOnlyRootFilesystem"], true, "{at}");
                assert_eq!(security["allowPrivilegeEscalation"], false, "{at}");
                assert_ne!(security["privileged"], true, "{at}");
                assert!(
                    strings(&security["capabilities"]["drop"]).contains(&"ALL"),
                    "{at}: capabilities not all dropped"
                );
                assert!(
                    strings(&security["capabilities"]["add"]).is_empty(),
                    "{at}: adds capabilities"
                );
                let resources = &container["resources"];
                for request in ["cpu", "memory"] {
                    assert!(
                        resources["requests"][request].is_string(),
                        "{at}: no {request} request"
                    );
                }
                assert!(
                    resources["limits"]["memory"].is_string(),
                    "{at}: no memory limit"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The controller

#[test]
fn the_controller_is_one_recreated_replica_with_health_probes() {
    let deployment = build("deploy").one("Deployment");
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 1);
    // Passes must never overlap, not even while the pod is replaced.
    assert_eq!(spec["strategy"]["type"], "Recreate");
    assert!(spec["strategy"]["rollingUpdate"].is_null());
    let pod = &spec["template"]["spec"];
    // tagpin gives a pass under way 30 s after SIGTERM; the kubelet must wait longer.
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 45);
    let container = &pod["containers"][0];
    assert_eq!(pod["containers"].as_sequence().unwrap().len(), 1);
    assert_eq!(strings(&container["args"]).first(), Some(&"run"));
    assert_eq!(flag(container, "--listen"), Some("0.0.0.0:8080"));
    // Probes on their own port, which the webhook port's clients cannot fill.
    assert_eq!(flag(container, "--health-listen"), Some("0.0.0.0:8081"));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(resolve_port(container, &get["port"]), Some(8081), "{probe}");
    }
}

#[test]
fn the_service_serves_port_8080_named_http_from_the_controller() {
    let deploy = build("deploy");
    let service = deploy.one("Service");
    let deployment = deploy.one("Deployment");
    let ports = service["spec"]["ports"].as_sequence().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "http");
    assert_eq!(ports[0]["port"], 8080);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(resolve_port(container, &ports[0]["targetPort"]), Some(8080));
    let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        .as_mapping()
        .unwrap();
    let selector = service["spec"]["selector"].as_mapping().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(pod_labels.get(key), Some(value), "selector {key:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// The CronJob variant

#[test]
fn the_cronjob_syncs_every_15_minutes_and_never_overlaps() {
    let cronjob = build("deploy/cronjob").one("CronJob");
    let spec = &cronjob["spec"];
    assert_eq!(spec["concurrencyPolicy"], "Forbid");
    assert_eq!(spec["schedule"], "*/15 * * * *");
    // A hung pass is stopped before the next is due, or Forbid would skip every later run.
    let deadline = spec["jobTemplate"]["spec"]["activeDeadlineSeconds"]
        .as_i64()
        .expect("activeDeadlineSeconds");
    assert!(deadline < 15 * 60, "{deadline}");
    let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
    assert!(matches!(
        pod["restartPolicy"].as_str(),
        Some("Never" | "OnFailure")
    ));
    let container = &pod["containers"][0];
    assert_eq!(strings(&container["args"]).first(), Some(&"sync"));
    assert!(
        container["ports"].is_null(),
        "nothing listens in a sync pod"
    );
}

// ---------------------------------------------------------------------------------------------
// Network

fn port_set(rules: &Value) -> BTreeSet<(String, i64)> {
    let mut set = BTreeSet::new();
    for rule in rules.as_sequence().into_iter().flatten() {
        let ports = rule["ports"]
            .as_sequence()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        // A rule without ports admits every port.
        assert!(!ports.is_empty(), "rule open on every port: {rule:?}");
        for port in ports {
            set.insert((
                port["protocol"].as_str().unwrap_or("TCP").to_string(),
                port["port"].as_i64().expect("numeric port"),
            ));
        }
    }
    set
}

#[test]
fn the_network_policy_admits_only_port_8080_and_egress_on_named_ports() {
    let expected_egress: BTreeSet<(String, i64)> = [
        ("UDP", 53),
        ("TCP", 53),
        ("TCP", 443),
        ("TCP", 6443),
        ("TCP", 80),
        ("TCP", 22),
        ("TCP", 9418),
    ]
    .into_iter()
    .map(|(p, n)| (p.to_string(), n))
    .collect();
    for build in builds() {
        let policy = build.one("NetworkPolicy");
        let spec = &policy["spec"];
        assert_eq!(
            strings(&spec["policyTypes"]),
            ["Ingress", "Egress"],
            "{}",
            build.dir
        );
        assert_eq!(port_set(&spec["egress"]), expected_egress, "{}", build.dir);
        let ingress = port_set(&spec["ingress"]);
        if build.dir == "deploy" {
            assert_eq!(ingress, BTreeSet::from([("TCP".to_string(), 8080)]));
        } else {
            assert!(ingress.is_empty(), "{}: {ingress:?}", build.dir);
        }
        // The policy selects every tagpin pod of the build.
        let selector = spec["podSelector"]["matchLabels"].as_mapping().unwrap();
        assert!(!selector.is_empty());
        for (owner, _) in build.pod_specs() {
            let labels = match kind(owner) {
                "CronJob" => &owner["spec"]["jobTemplate"]["spec"]["template"]["metadata"],
                _ => &owner["spec"]["template"]["metadata"],
            }["labels"]
                .as_mapping()
                .unwrap();
            for (key, value) in selector {
                assert_eq!(
                    labels.get(key),
                    Some(value),
                    "{}: {}",
                    build.dir,
                    label(owner)
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets and configuration

fn secret_template() -> Value {
    let text = std::fs::read_to_string(repo().join("deploy/secret.example.yaml")).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

#[test]
fn no_secret_is_built_and_the_template_matches_what_the_pods_read() {
    let template = secret_template();
    assert_eq!(kind(&template), "Secret");
    let secret_name = name(&template);
    let keys: BTreeSet<&str> = template["stringData"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "GIT_TOKEN",
            "GITHUB_TOKEN",
            "TAGPIN_WEBHOOK_SECRET",
            "config.json"
        ])
    );
    // The template is never part of a build.
    for kustomization in [
        "deploy/kustomization.yaml",
        "deploy/common/kustomization.yaml",
        "deploy/cronjob/kustomization.yaml",
    ] {
        let k: Value =
            serde_yaml::from_str(&std::fs::read_to_string(repo().join(kustomization)).unwrap())
                .unwrap();
        for list in ["resources", "components", "secretGenerator"] {
            assert!(
                !format!("{:?}", k[list]).contains("secret"),
                "{kustomization}: {list} names a secret"
            );
        }
    }
    for build in builds() {
        for object in &build.objects {
            assert_ne!(kind(object), "Secret", "{}: {}", build.dir, label(object));
        }
        // Every reference to the Secret names a key of the template; none puts config.json
        // (or the whole Secret) into the environment.
        for (owner, pod) in build.pod_specs() {
            let at = format!("{}: {}", build.dir, label(owner));
            for container in containers(pod) {
                assert!(container["envFrom"].is_null(), "{at}: envFrom");
                for env in container["env"].as_sequence().into_iter().flatten() {
                    let reference = &env["valueFrom"]["secretKeyRef"];
                    if reference.is_null() {
                        continue;
                    }
                    assert_eq!(reference["name"], secret_name, "{at}");
                    let key = reference["key"].as_str().unwrap();
                    assert!(
                        keys.contains(key) && key != "config.json",
                        "{at}: key {key}"
                    );
                    assert_eq!(env["name"], key, "{at}");
                }
            }
            for volume in pod["volumes"].as_sequence().into_iter().flatten() {
                let mut secrets = vec![&volume["secret"]];
                for source in volume["projected"]["sources"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                {
                    secrets.push(&source["secret"]);
                }
                for secret in secrets.into_iter().filter(|s| !s.is_null()) {
                    let secret_ref = match &secret["secretName"] {
                        Value::Null => &secret["name"],
                        n => n,
                    };
                    assert_eq!(*secret_ref, secret_name, "{at}");
                    let items = secret["items"].as_sequence().expect("items");
                    for item in items {
                        assert_eq!(item["key"], "config.json", "{at}");
                    }
                }
            }
        }
    }
}

/// Where the file or directory at `path` in the container comes from: `configMap:NAME:KEY`,
/// `secret:NAME:KEY`, or `emptyDir` for anything on one.
fn mounted_source(pod: &Value, container: &Value, path: &str) -> Option<String> {
    let mounts = container["volumeMounts"].as_sequence()?;
    // The deepest mount holding the path.
    let mount = mounts
        .iter()
        .filter(|m| {
            let dir = m["mountPath"].as_str().unwrap_or_default();
            path == dir || path.starts_with(&format!("{}/", dir.trim_end_matches('/')))
        })
        .max_by_key(|m| m["mountPath"].as_str().unwrap_or_default().len())?;
    let dir = mount["mountPath"].as_str()?.trim_end_matches('/');
    let relative = path[dir.len()..].trim_start_matches('/');
    let volume = pod["volumes"]
        .as_sequence()?
        .iter()
        .find(|v| v["name"] == mount["name"])?;
    if !volume["emptyDir"].is_null() {
        return Some("emptyDir".to_string());
    }
    let mut sources: Vec<(&str, &Value)> = Vec::new();
    for kind in ["configMap", "secret"] {
        if !volume[kind].is_null() {
            sources.push((kind, &volume[kind]));
        }
    }
    for source in volume["projected"]["sources"]
        .as_sequence()
        .into_iter()
        .flatten()
    {
        for kind in ["configMap", "secret"] {
            if !source[kind].is_null() {
                sources.push((kind, &source[kind]));
            }
        }
    }
    sources.iter().find_map(|(kind, source)| {
        let name = source["name"]
            .as_str()
            .or_else(|| source["secretName"].as_str())?;
        let item = source["items"]
            .as_sequence()?
            .iter()
            .find(|item| item["path"] == relative)?;
        Some(format!("{kind}:{name}:{}", item["key"].as_str()?))
    })
}

#[test]
fn the_configmap_holds_a_valid_pull_request_config_wired_to_the_pods() {
    use tagpin::config::{Config, GitAuth, WriteMode};
    for build in builds() {
        let config_map = build.one("ConfigMap");
        let text = config_map["data"]["tagpin.yaml"].as_str().unwrap();
        let config = Config::parse(text, Path::new("deploy/common/configmap.yaml"))
            .unwrap_or_else(|e| panic!("{}: {e}", build.dir));
        assert_eq!(config.mode, WriteMode::PullRequest);
        let GitAuth::Token { env: git_env, .. } = &config.repository.auth else {
            panic!(
                "repository.auth is not a token: {:?}",
                config.repository.auth
            );
        };
        assert_eq!(git_env, "GIT_TOKEN");
        let forge = config.forge.as_ref().expect("forge");
        assert_eq!(forge.token_env, "GITHUB_TOKEN");
        assert_eq!(
            config.registries.docker_config.as_deref(),
            Some(Path::new("/etc/tagpin/docker"))
        );

        for (owner, pod) in build.pod_specs() {
            let container = &pod["containers"][0];
            let at = format!("{}: {}", build.dir, label(owner));
            // The tokens the configuration names are in the environment.
            for env in [git_env.as_str(), forge.token_env.as_str()] {
                assert!(env_value(container, env).is_some(), "{at}: {env} not set");
            }
            // --config is this ConfigMap's key, mounted where the args say.
            let config_path = flag(container, "--config").expect("--config");
            assert_eq!(
                mounted_source(pod, container, config_path).as_deref(),
                Some(format!("configMap:{}:tagpin.yaml", name(config_map)).as_str()),
                "{at}: {config_path}"
            );
            // Registry credentials: DOCKER_CONFIG/config.json is the Secret's config.json.
            let docker_config = env_value(container, "DOCKER_CONFIG").expect("DOCKER_CONFIG")
                ["value"]
                .as_str()
                .unwrap();
            assert_eq!(Path::new(docker_config), Path::new("/etc/tagpin/docker"));
            let secret = name(&secret_template()).to_string();
            assert_eq!(
                mounted_source(pod, container, &format!("{docker_config}/config.json")),
                Some(format!("secret:{secret}:config.json")),
                "{at}"
            );
            // Everything tagpin writes is on a writable volume (the root filesystem is
            // read-only): the mirror, HOME and the cache home.
            let cache_dir = flag(container, "--cache-dir").expect("--cache-dir");
            assert_eq!(
                config.repository.cache_dir.as_deref(),
                Some(Path::new(cache_dir)),
                "{at}: repository.cache_dir and --cache-dir differ"
            );
            assert_eq!(
                env_value(container, "XDG_CACHE_HOME").unwrap()["value"],
                "/var/cache",
                "{at}"
            );
            let home = env_value(container, "HOME").unwrap()["value"]
                .as_str()
                .unwrap();
            for writable in [cache_dir, home, "/var/cache/tagpin"] {
                assert_eq!(
                    mounted_source(pod, container, writable).as_deref(),
                    Some("emptyDir"),
                    "{at}: {writable} is not writable"
                );
            }
            // The cache directory is not a mount point: tagpin creates it, private (0700),
            // where an emptyDir mounted there would be 0777 and warned about at every start.
            let mounted_at = |path: &str| {
                container["volumeMounts"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .any(|m| m["mountPath"].as_str().map(|d| d.trim_end_matches('/')) == Some(path))
            };
            assert!(!mounted_at(cache_dir), "{at}: {cache_dir} is a mount point");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The image

/// `path` relative to `from` (both absolute, symlinks resolved).
fn relative_path(from: &Path, path: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let path: Vec<Component> = path.components().collect();
    let common = from.iter().zip(&path).take_while(|(a, b)| a == b).count();
    let mut relative = PathBuf::new();
    for _ in common..from.len() {
        relative.push("..");
    }
    for component in &path[common..] {
        relative.push(component);
    }
    relative
}

fn images(build: &Build) -> Vec<String> {
    build
        .pod_specs()
        .into_iter()
        .flat_map(|(_, pod)| containers(pod))
        .map(|c| c["image"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_image_is_overridable_with_kustomize_images() {
    for build in builds() {
        let k: Value = serde_yaml::from_str(
            &std::fs::read_to_string(repo().join(build.dir).join("kustomization.yaml")).unwrap(),
        )
        .unwrap();
        let entry = k["images"]
            .as_sequence()
            .and_then(|s| s.iter().find(|e| e["name"] == IMAGE_NAME))
            .unwrap_or_else(|| panic!("{}: no images: entry for {IMAGE_NAME}", build.dir));
        let tag = entry["newTag"].as_str().expect("newTag");
        for image in images(build) {
            assert_eq!(image, format!("{IMAGE_NAME}:{tag}"), "{}", build.dir);
        }
    }
    // An overlay of each variant replaces the image everywhere.
    let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
    for variant in ["deploy", "deploy/cronjob"] {
        let overlay = tempfile::tempdir().unwrap();
        let overlay_dir = overlay.path().canonicalize().unwrap();
        let base = relative_path(&overlay_dir, &repo().join(variant).canonicalize().unwrap());
        std::fs::write(
            overlay_dir.join("kustomization.yaml"),
            format!(
                "resources:\n  - {}\nimages:\n  - name: {IMAGE_NAME}\n    \
                 newName: registry.example.com/platform/tagpin\n    digest: {digest}\n",
                base.display()
            ),
        )
        .unwrap();
        let overridden = Build {
            dir: variant,
            objects: kustomize(&overlay_dir),
        };
        let found = images(&overridden);
        assert!(!found.is_empty());
        for image in found {
            assert_eq!(
                image,
                format!("registry.example.com/platform/tagpin@{digest}")
            );
        }
    }
}

#[test]
fn the_dockerfile_runs_the_binary_as_the_same_non_root_user() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let last_stage = dockerfile
        .rsplit_once("\nFROM ")
        .map(|(_, s)| s)
        .expect("a multi-stage Dockerfile");
    let instruction = |name: &str| {
        last_stage
            .lines()
            .rev()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l[name.len() + 1..].trim().to_string())
    };
    assert_eq!(instruction("USER").as_deref(), Some("65532:65532"));
    assert_eq!(
        instruction("ENTRYPOINT").as_deref(),
        Some(r#"["/usr/local/bin/tagpin"]"#)
    );
    for build in builds() {
        for (owner, pod) in build.pod_specs() {
            for container in containers(pod) {
                // The image's entrypoint runs; the manifests only pass arguments.
                assert!(
                    container["command"].is_null(),
                    "{}: {}",
                    build.dir,
                    label(owner)
                );
            }
        }
    }
    let dockerignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert_eq!(
        dockerignore.lines().find(|l| !l.starts_with('#')),
        Some("*")
    );
}

// ---------------------------------------------------------------------------------------------
// The operator (`deploy/operator/`)

#[test]
fn the_operator_builds_offline_with_its_crd_rbac_and_disruption_budget() {
    let mut found: Vec<String> = operator().objects.iter().map(label).collect();
    found.sort();
    assert_eq!(
        found,
        [
            "ClusterRole/tagpin-operator",
            "ClusterRole/tagpin-verifier",
            "ClusterRoleBinding/tagpin-operator",
            "ClusterRoleBinding/tagpin-verifier",
            "CustomResourceDefinition/pinnedrepositories.tagpin.dev",
            "Deployment/tagpin-operator",
            "Namespace/tagpin",
            "NetworkPolicy/tagpin",
            "PodDisruptionBudget/tagpin-operator",
            "Role/tagpin-leader-election",
            "RoleBinding/tagpin-leader-election",
            "Service/tagpin-operator",
            "ServiceAccount/tagpin",
        ],
        "no ConfigMap: the operator reads no tagpin.yaml"
    );
    let crd = operator().one("CustomResourceDefinition");
    let checked_in: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("deploy/operator/crd.yaml")).unwrap(),
    )
    .unwrap();
    let rendered = serde_json::to_value(crd).unwrap();
    assert_eq!(
        first_difference(&checked_in, &rendered, String::new()),
        None,
        "kustomize leaves the generated CRD as it is"
    );
    let pdb = &operator().one("PodDisruptionBudget")["spec"];
    assert_eq!(
        pdb["maxUnavailable"], 1,
        "a drain evicts one replica at a time"
    );
    let deployment = operator().one("Deployment");
    assert_eq!(
        pdb["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let service = operator().one("Service");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
}

/// (API group, resource, verb) of every rule of `role`.
fn grants(role: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_sequence().unwrap() {
        assert!(rule["resourceNames"].is_null() && rule["nonResourceURLs"].is_null());
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    out.insert((group.to_string(), resource.to_string(), verb.to_string()));
                }
            }
        }
    }
    out
}

#[test]
fn the_operator_is_granted_exactly_what_it_reads_and_writes() {
    let set = |items: &[(&str, &str, &str)]| -> BTreeSet<(String, String, String)> {
        items
            .iter()
            .map(|(g, r, v)| (g.to_string(), r.to_string(), v.to_string()))
            .collect()
    };
    let operator_role = operator()
        .objects
        .iter()
        .find(|o| label(o) == "ClusterRole/tagpin-operator")
        .unwrap();
    assert_eq!(
        grants(operator_role),
        set(&[
            ("tagpin.dev", "pinnedrepositories", "get"),
            ("tagpin.dev", "pinnedrepositories", "list"),
            ("tagpin.dev", "pinnedrepositories", "watch"),
            // The only writes to its own objects: their status.
            ("tagpin.dev", "pinnedrepositories/status", "get"),
            ("tagpin.dev", "pinnedrepositories/status", "patch"),
            ("tagpin.dev", "pinnedrepositories/status", "update"),
            ("events.k8s.io", "events", "create"),
            // Read only: the Secrets objects name, and a watch of the labelled ones.
            ("", "secrets", "get"),
            ("", "secrets", "list"),
            ("", "secrets", "watch"),
            // Reading an object's cluster as a ServiceAccount of its namespace; never as a
            // user or a group.
            ("", "serviceaccounts", "impersonate"),
        ])
    );
    // Leases only in its own namespace, with a Role, never cluster-wide.
    let lease_role = operator().one("Role");
    assert_eq!(lease_role["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        grants(lease_role),
        set(&[
            ("coordination.k8s.io", "leases", "get"),
            ("coordination.k8s.io", "leases", "create"),
            ("coordination.k8s.io", "leases", "update"),
        ])
    );
    // Every other role is the verifier's, read-only; every binding is to tagpin's own account.
    for role in operator()
        .objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRole" | "Role"))
    {
        let writes: Vec<_> = grants(role)
            .into_iter()
            .filter(|(_, _, verb)| !READ_VERBS.contains(&verb.as_str()))
            .collect();
        match name(role) {
            "tagpin-operator" | "tagpin-leader-election" => {}
            other => assert!(writes.is_empty(), "{other}: {writes:?}"),
        }
        for (group, resource, _) in grants(role) {
            assert!(group != "*" && resource != "*", "{}: wildcard", label(role));
        }
    }
    for binding in operator()
        .objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRoleBinding" | "RoleBinding"))
    {
        for subject in binding["subjects"].as_sequence().unwrap() {
            assert_eq!(subject["name"], "tagpin", "{}", label(binding));
            assert_eq!(subject["namespace"], NAMESPACE, "{}", label(binding));
        }
    }
}

#[test]
fn the_operator_runs_tagpin_operator_with_probes_and_no_secret_in_its_environment() {
    let deployment = operator().one("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(strings(&container["args"]).first(), Some(&"operator"));
    // Two replicas, one acting: the other stands by on the Lease.
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert!(strings(&container["args"]).contains(&"--leader-elect"));
    assert_eq!(
        env_value(container, "POD_NAMESPACE").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(flag(container, "--health-listen"), Some("0.0.0.0:8081"));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(resolve_port(container, &get["port"]), Some(8081), "{probe}");
    }
    // Tokens come from each object's Secrets, read when it is reconciled; only the webhook
    // secret is the controller's own.
    let from_secrets: Vec<&str> = container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|e| !e["valueFrom"]["secretKeyRef"].is_null())
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(from_secrets, ["TAGPIN_WEBHOOK_SECRET"]);
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 45);
}

#[test]
fn the_example_pinned_repository_is_valid_for_the_crd_and_the_validator() {
    let example: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo().join("deploy/operator/pinnedrepository.example.yaml"))
            .unwrap(),
    )
    .unwrap();
    let crd = serde_json::to_value(operator().one("CustomResourceDefinition")).unwrap();
    support::kube::check_custom_resource(&crd, &example).unwrap_or_else(|e| panic!("{e}"));
    let broken =
        serde_json::json!({"spec": {"repository": {"branch": "main"}, "mode": "sometimes"}});
    assert!(
        support::kube::check_custom_resource(&crd, &broken).is_err(),
        "the schema refuses what it can"
    );
    let config = tagpin::config::Config::from_resource_spec(&example["spec"], "team-a/web")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.secret_ref.as_deref(), Some("gitops-creds"));
    assert_eq!(
        example["metadata"]["labels"][tagpin::operator::crd::SHARD_LABEL],
        "shard1"
    );
}

/// Every (group, resource, verb, namespace) the rendered `build` grants the operator's own
/// ServiceAccount (tagpin/tagpin) through its bindings; `None`: cluster-wide.
fn granted_to_the_operator(build: &Build) -> BTreeSet<(String, String, String, Option<String>)> {
    let mut out = BTreeSet::new();
    for binding in build
        .objects
        .iter()
        .filter(|o| matches!(kind(o), "ClusterRoleBinding" | "RoleBinding"))
    {
        let ours = binding["subjects"].as_sequence().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == "tagpin" && s["namespace"] == NAMESPACE
        });
        if !ours {
            continue;
        }
        let role_ref = &binding["roleRef"];
        let role = build
            .objects
            .iter()
            .find(|o| role_ref["kind"] == kind(o) && role_ref["name"] == name(o))
            .unwrap_or_else(|| panic!("{}: binds a role not rendered", label(binding)));
        let namespace = match kind(binding) {
            "RoleBinding" => binding["metadata"]["namespace"]
                .as_str()
                .map(str::to_string),
            _ => None,
        };
        for (group, resource, verb) in grants(role) {
            out.insert((group, resource, verb, namespace.clone()));
        }
    }
    out
}

#[test]
fn the_shared_install_reads_each_objects_cluster_only_as_its_service_account() {
    let shared = multi_tenant();
    let deployment = shared.one("Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&container["args"]);
    assert_eq!(args.first(), Some(&"operator"));
    assert!(
        args.contains(&"--default-service-account=tagpin"),
        "{args:?}"
    );
    // The single-team install is the same, less that flag, plus the operator's own reads.
    let mut base: Vec<String> = operator().objects.iter().map(label).collect();
    base.retain(|l| l != "ClusterRoleBinding/tagpin-verifier");
    base.sort();
    let mut found: Vec<String> = shared.objects.iter().map(label).collect();
    found.sort();
    assert_eq!(found, base);
    let single =
        operator().one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(!strings(&single)
        .iter()
        .any(|a| a.starts_with("--default-service-account")));

    let granted = granted_to_the_operator(shared);
    // Impersonation of ServiceAccounts only: never users, groups, uids or user extras.
    let impersonates: Vec<_> = granted
        .iter()
        .filter(|(_, _, verb, _)| verb == "impersonate" || verb == "*")
        .collect();
    assert_eq!(
        impersonates,
        [&(
            String::new(),
            "serviceaccounts".to_string(),
            "impersonate".to_string(),
            None
        )]
    );
    // No read of workloads, pods or GitOps objects of its own, anywhere: every such read is
    // made as a team's ServiceAccount.
    for (group, resource, verb, namespace) in &granted {
        assert!(
            !VERIFIER_READS.contains(&(group.as_str(), resource.as_str())),
            "the shared operator itself may {verb} {group}/{resource} in {namespace:?}"
        );
    }
    // The single-team install does read them itself, cluster-wide.
    assert!(granted_to_the_operator(operator()).contains(&(
        "apps".to_string(),
        "deployments".to_string(),
        "list".to_string(),
        None
    )));
}

#[test]
fn a_teams_side_of_the_shared_install_grants_its_service_account_the_verifiers_reads_in_its_namespace(
) {
    let tenant = kustomize(&repo().join("deploy/operator-multi-tenant/tenant"));
    let mut found: Vec<String> = tenant.iter().map(label).collect();
    found.sort();
    assert_eq!(
        found,
        ["RoleBinding/tagpin-verifier", "ServiceAccount/tagpin"]
    );
    let account = tenant.iter().find(|o| kind(o) == "ServiceAccount").unwrap();
    assert_eq!(account["metadata"]["namespace"], "team-a");
    assert_eq!(account["automountServiceAccountToken"], false);
    let binding = tenant.iter().find(|o| kind(o) == "RoleBinding").unwrap();
    assert_eq!(binding["metadata"]["namespace"], "team-a");
    // The verifier's read-only ClusterRole, which the shared install keeps unbound.
    assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
    assert_eq!(binding["roleRef"]["name"], "tagpin-verifier");
    assert!(multi_tenant()
        .objects
        .iter()
        .any(|o| label(o) == "ClusterRole/tagpin-verifier"));
    let subjects = binding["subjects"].as_sequence().unwrap();
    assert_eq!(subjects.len(), 1);
    assert_eq!(subjects[0]["kind"], "ServiceAccount");
    assert_eq!(subjects[0]["name"], "tagpin");
    assert_eq!(subjects[0]["namespace"], "team-a");
    for object in &tenant {
        let json = serde_json::to_value(object).unwrap();
        let checked = match kind(object) {
            "ServiceAccount" => round_trip::<k8s_openapi::api::core::v1::ServiceAccount>(&json),
            _ => round_trip::<k8s_openapi::api::rbac::v1::RoleBinding>(&json),
        };
        checked.unwrap_or_else(|e| panic!("{}: {e}", label(object)));
    }
}

// ---------------------------------------------------------------------------------------------
// The monitoring kit (`deploy/monitoring/`): opt-in kustomize components

/// The variants the monitoring components serve: the controller and the operator.
const MONITORED: [&str; 2] = ["deploy", "deploy/operator"];

/// `variant` with the ServiceMonitor and the alerts components, rendered the way a user's
/// overlay includes them (`components:`); the overlay's directory lives as long as the render.
pub(crate) fn with_monitoring(variant: &str) -> Vec<Value> {
    let overlay = tempfile::tempdir().unwrap();
    let dir = overlay.path().canonicalize().unwrap();
    let relative = |path: &str| {
        relative_path(&dir, &repo().join(path).canonicalize().unwrap())
            .display()
            .to_string()
    };
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "resources:\n  - {}\ncomponents:\n  - {}\n  - {}\n",
            relative(variant),
            relative("deploy/monitoring/servicemonitor"),
            relative("deploy/monitoring/alerts"),
        ),
    )
    .unwrap();
    kustomize(&dir)
}

fn base_of(variant: &str) -> &'static Build {
    match variant {
        "deploy/operator" => operator(),
        _ => build(variant),
    }
}

#[test]
fn the_monitoring_components_add_a_service_monitor_and_the_alerts_and_change_nothing_else() {
    // Opt-in: without the Prometheus Operator's CRDs, `kubectl apply -k` would refuse them.
    for build in all_builds() {
        for object in &build.objects {
            assert!(
                !matches!(kind(object), "ServiceMonitor" | "PrometheusRule"),
                "{}: {}",
                build.dir,
                label(object)
            );
        }
    }
    for variant in MONITORED {
        let objects = with_monitoring(variant);
        let (added, rest): (Vec<&Value>, Vec<&Value>) = objects
            .iter()
            .partition(|o| matches!(kind(o), "ServiceMonitor" | "PrometheusRule"));
        let added: BTreeSet<String> = added.iter().map(|o| label(o)).collect();
        assert_eq!(
            added,
            BTreeSet::from([
                "PrometheusRule/tagpin".to_string(),
                "ServiceMonitor/tagpin".to_string()
            ]),
            "{variant}"
        );
        let base: Vec<&Value> = base_of(variant).objects.iter().collect();
        assert_eq!(rest, base, "{variant}: the components change the base");
        let monitoring = objects
            .iter()
            .filter(|o| matches!(kind(o), "ServiceMonitor" | "PrometheusRule"));
        for object in monitoring {
            assert_eq!(
                object["metadata"]["namespace"].as_str(),
                Some(NAMESPACE),
                "{variant}: {}",
                label(object)
            );
        }
        let rule = objects
            .iter()
            .find(|o| kind(o) == "PrometheusRule")
            .unwrap();
        assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
        assert!(!rule["spec"]["groups"][0]["rules"]
            .as_sequence()
            .unwrap()
            .is_empty());
    }
}

#[test]
fn the_service_monitor_scrapes_metrics_of_the_variants_service_with_the_job_the_alerts_read() {
    for variant in MONITORED {
        let objects = with_monitoring(variant);
        let one = |wanted: &str| {
            let found: Vec<&Value> = objects.iter().filter(|o| kind(o) == wanted).collect();
            assert_eq!(found.len(), 1, "{variant}: one {wanted}");
            found[0]
        };
        let monitor = one("ServiceMonitor");
        assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
        let (service, deployment, policy) =
            (one("Service"), one("Deployment"), one("NetworkPolicy"));
        let service_labels = service["metadata"]["labels"].as_mapping().unwrap();
        // It selects the variant's Service (a ServiceMonitor looks in its own namespace).
        let selector = monitor["spec"]["selector"]["matchLabels"]
            .as_mapping()
            .unwrap();
        assert!(!selector.is_empty());
        for (key, value) in selector {
            assert_eq!(service_labels.get(key), Some(value), "{variant}: {key:?}");
        }
        // The `job` of every series: the value of that Service label, `tagpin`, which the
        // alerts select (`up{job="tagpin"}`).
        let job_label = monitor["spec"]["jobLabel"].as_str().expect("jobLabel");
        assert_eq!(
            service_labels.get(job_label).and_then(Value::as_str),
            Some("tagpin"),
            "{variant}"
        );
        // Its one endpoint: the Service's named port, reaching the container's --listen port
        // (which serves /metrics) and admitted by the NetworkPolicy.
        let endpoints = monitor["spec"]["endpoints"].as_sequence().unwrap();
        assert_eq!(endpoints.len(), 1, "{variant}");
        assert_eq!(endpoints[0]["path"], "/metrics", "{variant}");
        let port = service["spec"]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"] == endpoints[0]["port"])
            .unwrap_or_else(|| panic!("{variant}: no Service port {:?}", endpoints[0]["port"]));
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        let number = resolve_port(container, &port["targetPort"]).expect("target port");
        assert_eq!(
            flag(container, "--listen"),
            Some(format!("0.0.0.0:{number}").as_str()),
            "{variant}"
        );
        assert!(
            port_set(&policy["spec"]["ingress"]).contains(&("TCP".to_string(), number)),
            "{variant}: the NetworkPolicy refuses the scrape port {number}"
        );
    }
}
