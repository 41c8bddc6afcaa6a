//! `tagpin operator` with promotion stages, the real binary: staging runs on the cluster the
//! operator runs in (`in_cluster: true`), production on another local Kubernetes API server
//! reached through a kubeconfig held in a Secret; a real registry, a real bare Git remote and
//! the local GitHub server. The operator pins staging, verifies it, and promotes its exact
//! digests into production's paths by pull request, as `tagpin run` does.

use crate::operator::{cluster, condition, event_reasons, pinned_repository, Operator, NS};
use crate::support;
use crate::support::eventually;

use serde_json::{json, Value};
use support::git::BareRepo;
use support::github::GitHubServer;
use support::kube::{secret, KubeServer};
use support::registry::{Mode, TestRegistry};
use support::workloads::LiveDeployment;

const GH_TOKEN: &str = "ghs_operator_promote_41d7";
const PR_BRANCH: &str = "tagpin/promote/production";
const STAGING_NS: &str = "shop-staging";
const PRODUCTION_NS: &str = "shop";

/// `web`'s Deployment in `namespace`, as a team writes it; `image` is the whole value.
fn web_yaml(namespace: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {namespace}\n\
         spec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: web\n  template:\n    \
         metadata:\n      labels:\n        app: web\n    spec:\n      containers:\n      \
         - name: web\n        image: {image}\n"
    )
}

/// The registry, the repository (staging names a tag, production pins the old digest), the
/// GitHub server, the operator's cluster (staging) and production's.
pub(crate) struct World {
    _registry: TestRegistry,
    host: String,
    repo: BareRepo,
    github: GitHubServer,
    /// The cluster the operator runs in: staging's.
    pub(crate) kube: KubeServer,
    pub(crate) production: KubeServer,
    pub(crate) dir: tempfile::TempDir,
    /// What staging's tag points to, and what production pins at first.
    new: String,
    old: String,
}

impl World {
    pub(crate) async fn new() -> World {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let new = registry
            .push_image("acme/web", "1.5.0", "web-1.5.0")
            .await
            .manifest;
        let old = registry
            .push_image("acme/web", "1.4.0", "web-1.4.0")
            .await
            .manifest;
        let repo = BareRepo::create(&[
            (
                "envs/staging/web.yaml",
                &web_yaml(STAGING_NS, &format!("{host}/acme/web:1.5.0")),
            ),
            (
                "envs/production/web.yaml",
                &web_yaml(PRODUCTION_NS, &format!("{host}/acme/web:1.4.0@{old}")),
            ),
        ]);
        let github = GitHubServer::start(GH_TOKEN, "acme", "gitops", repo.path()).await;
        let kube = cluster().await;
        let production = KubeServer::start().await;
        kube.apply(secret(
            NS,
            "git-creds",
            &[support::kube::TAGPIN_SECRET],
            &[("GITHUB_TOKEN", GH_TOKEN)],
        ));
        World {
            _registry: registry,
            host,
            repo,
            github,
            kube,
            production,
            dir: tempfile::tempdir().unwrap(),
            new,
            old,
        }
    }

    /// The object `shop` promoting staging into production through the kubeconfig Secret
    /// `prod-kubeconfig`, staging's tag pinned at `new` and its pod running `running`;
    /// `rolled_out`: staging's rollout is done.
    fn shop(&self, running: &str, rolled_out: bool) {
        self.production_kubeconfig_secret("prod-kubeconfig", &[]);
        let image = self.image("1.5.0", &self.new);
        runs(
            &self.kube,
            STAGING_NS,
            &image,
            &self.image_id(running),
            rolled_out,
        );
        self.kube.apply(pinned_repository(
            "shop",
            json!({}),
            self.spec("prod-kubeconfig"),
        ));
    }

    /// Production's kubeconfig in Secret `name` of the objects' namespace, watched.
    fn production_kubeconfig_secret(&self, name: &str, extra: &[(&str, &str)]) {
        let kubeconfig = self.production.kubeconfig_yaml();
        let mut data = vec![("kubeconfig", kubeconfig.as_str())];
        data.extend_from_slice(extra);
        self.kube
            .apply(secret(NS, name, &[support::kube::TAGPIN_SECRET], &data));
    }

    /// A spec pinning staging by commit and promoting it into production by pull request, no
    /// soak; production's cluster through the kubeconfig in Secret `kubeconfig_secret`.
    pub(crate) fn spec(&self, kubeconfig_secret: &str) -> Value {
        json!({
            "repository": {"url": self.repo.file_url(), "branch": "main"},
            "mode": "commit",
            "registries": {"insecure": [self.host]},
            "secret_ref": {"name": "git-creds"},
            "forge": {"api_url": self.github.api_url(), "owner": "acme", "repo": "gitops",
                      "token_env": "GITHUB_TOKEN"},
            "promotion": {"stages": [
                {"name": "staging", "paths": ["envs/staging"], "cluster": {"in_cluster": true}},
                {"name": "production", "paths": ["envs/production"],
                 "cluster": {"kubeconfig_secret_ref": {"name": kubeconfig_secret}},
                 "soak": "0s", "mode": "pull-request"},
            ]},
        })
    }

    fn image(&self, tag: &str, digest: &str) -> String {
        format!("{}/acme/web:{tag}@{digest}", self.host)
    }

    fn image_id(&self, digest: &str) -> String {
        format!("{}/acme/web@{digest}", self.host)
    }

    pub(crate) async fn operator(&self) -> Operator {
        Operator::start(self.dir.path(), &self.kube, "op", &[]).await
    }

    /// `status.promotions` of object `name`.
    pub(crate) fn promotions(&self, name: &str) -> Vec<Value> {
        self.kube
            .get("PinnedRepository", NS, name)
            .and_then(|o| o["status"]["promotions"].as_array().cloned())
            .unwrap_or_default()
    }
}

/// `web` in `namespace` of `kube`: its Deployment names `image`, its one pod runs `image_id`;
/// `rolled_out`: the Deployment's rollout is done.
fn runs(kube: &KubeServer, namespace: &str, image: &str, image_id: &str, rolled_out: bool) {
    let web = LiveDeployment::new(namespace, "web").container("web", image);
    match rolled_out {
        true => web.apply(kube),
        false => web.apply_rolling_out(kube),
    };
    web.pod("web-7d9f6c-0").running(kube, &[image_id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_converged_staging_is_promoted_into_production_and_the_merge_verified_there() {
    let w = World::new().await;
    // Staging already runs the digest its tag points to: what sync pins is converged.
    w.shop(&w.new, true);
    // Another object whose production kubeconfig Secret does not exist.
    w.kube.apply(pinned_repository(
        "no-kubeconfig",
        json!({}),
        w.spec("missing-kubeconfig"),
    ));
    let operator = w.operator().await;

    eventually("the promotion pull request is opened", || {
        !w.github.prs().is_empty()
    })
    .await;
    let prs = w.github.prs();
    assert_eq!(prs.len(), 1, "one pull request");
    assert_eq!(prs[0].head_ref, PR_BRANCH);
    assert_eq!(prs[0].base_ref, "main");
    // Sync pinned staging on main; the pull request carries that very digest into
    // production's file, and changes nothing else.
    let staging = w.repo.read("main", "envs/staging/web.yaml").unwrap();
    assert!(staging.contains(&w.image("1.5.0", &w.new)), "{staging}");
    let promoted = w.repo.read(PR_BRANCH, "envs/production/web.yaml").unwrap();
    assert_eq!(
        promoted,
        web_yaml(PRODUCTION_NS, &w.image("1.5.0", &w.new)),
        "production on {PR_BRANCH}"
    );
    assert_eq!(
        w.repo.read(PR_BRANCH, "envs/staging/web.yaml").unwrap(),
        staging
    );
    assert!(
        w.repo
            .read("main", "envs/production/web.yaml")
            .unwrap()
            .contains(&w.old),
        "main's production is left for the pull request"
    );

    eventually("status.promotions names the pull request", || {
        w.promotions("shop")
            .first()
            .is_some_and(|p| p["pullRequest"]["number"] == 1)
    })
    .await;
    let entry = &w.promotions("shop")[0];
    assert_eq!(entry["stage"], "production");
    assert_eq!(entry["from"], "staging");
    assert_eq!(entry["gate"], "open");
    assert!(
        entry["message"]
            .as_str()
            .unwrap()
            .starts_with("staging converged since "),
        "{entry}"
    );
    assert_eq!(entry["pullRequest"]["branch"], PR_BRANCH);
    let object = w.kube.get("PinnedRepository", NS, "shop").unwrap();
    assert_eq!(object["status"]["verdict"]["state"], "converged");
    // Events are published after the status is written.
    eventually("a PromotionOpened Event", || {
        event_reasons(&w.kube, "shop").contains(&"PromotionOpened".to_string())
    })
    .await;
    assert_eq!(
        condition(&w.kube, "shop", "Ready").unwrap()["status"],
        "True"
    );

    // The object without its kubeconfig Secret stalls, naming the field and the Secret.
    eventually("the object without its kubeconfig Secret Stalled", || {
        condition(&w.kube, "no-kubeconfig", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&w.kube, "no-kubeconfig", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "SecretNotFound");
    assert_eq!(
        stalled["message"],
        format!(
            "spec.promotion.stages[1].cluster.kubeconfig_secret_ref: Secret {NS}/missing-kubeconfig not found"
        )
    );

    // A person merges it and Argo CD rolls it out on production; the kubeconfig Secret's
    // change brings the object back, and the merge is verified on production's cluster.
    let merge = w.repo.commit_as_other_writer(
        "main",
        &[("envs/production/web.yaml", &promoted)],
        &format!("Merge pull request #1 from acme/{PR_BRANCH}"),
    );
    w.github.merge_pr(1, &merge);
    runs(
        &w.production,
        PRODUCTION_NS,
        &w.image("1.5.0", &w.new),
        &w.image_id(&w.new),
        true,
    );
    w.production_kubeconfig_secret("prod-kubeconfig", &[("rotated", "1")]);
    eventually("the merged promotion is verified on production", || {
        w.promotions("shop")
            .first()
            .is_some_and(|p| p["verdict"]["state"] == "converged")
    })
    .await;
    // The merge above is two steps (the commit, then the pull request marked merged): a pass
    // that ran between them saw the pull request still open and the merge already verified,
    // and says both until its next pass, which another change of the Secret brings.
    if w.promotions("shop")[0].get("pullRequest").is_some() {
        w.production_kubeconfig_secret("prod-kubeconfig", &[("rotated", "2")]);
        eventually("the next pass sees the merge only", || {
            w.promotions("shop")[0].get("pullRequest").is_none()
        })
        .await;
    }
    let entry = &w.promotions("shop")[0];
    assert_eq!(
        entry["verdict"]["source"],
        format!("commit {}", &merge[..12])
    );
    assert_eq!(entry["verdict"]["converged"], 1);
    assert!(entry.get("pullRequest").is_none(), "merged: {entry}");
    let converged: Vec<String> = w
        .github
        .statuses(&merge)
        .into_iter()
        .filter(|s| s.context == "tagpin/converged")
        .map(|s| s.state)
        .collect();
    assert_eq!(converged, ["success"]);
    assert_eq!(w.github.prs().len(), 1, "nothing more to promote");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_staging_not_converged_is_not_promoted_and_the_status_says_why() {
    let w = World::new().await;
    // Staging is still rolling out: its pod runs the old digest.
    w.shop(&w.old, false);
    let operator = w.operator().await;

    eventually("status.promotions says why nothing is promoted", || {
        w.promotions("shop")
            .first()
            .is_some_and(|p| p["gate"] == "waiting")
    })
    .await;
    let entry = &w.promotions("shop")[0];
    assert!(
        entry["message"]
            .as_str()
            .unwrap()
            .starts_with("staging is not converged yet: "),
        "{entry}"
    );
    assert!(entry.get("pullRequest").is_none(), "{entry}");
    eventually("a PromotionBlocked Event", || {
        event_reasons(&w.kube, "shop").contains(&"PromotionBlocked".to_string())
    })
    .await;
    // Staging is checked again every second while it rolls out: still nothing proposed. (Its
    // lists are watched, so a pass is counted by the operator's metric, not by pod lists.)
    for _ in 0..2 {
        let before = operator.reconciled_at("shop").await;
        support::eventually_async("another pass verified staging", || async {
            operator.reconciled_at("shop").await > before
        })
        .await;
    }
    assert!(w.github.prs().is_empty(), "{:?}", w.github.prs());
    assert_eq!(w.repo.branches(), ["main"]);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kubeconfig_secret_that_would_run_a_command_in_the_controller_is_refused() {
    let w = World::new().await;
    // Whoever may write Secrets in the namespace must not run commands in the controller.
    let marker = w.dir.path().join("exec-ran");
    let token = w.production.kubeconfig_yaml();
    let exec = format!(
        "exec: {{apiVersion: client.authentication.k8s.io/v1, command: touch, args: ['{}']}}",
        marker.display()
    );
    let hostile: String = token
        .lines()
        .map(|line| match line.trim_start().starts_with("token:") {
            true => format!("    {exec}"),
            false => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(hostile.contains("command: touch"), "{hostile}");
    w.kube.apply(secret(
        NS,
        "exec-kubeconfig",
        &[support::kube::TAGPIN_SECRET],
        &[("kubeconfig", hostile.as_str())],
    ));
    w.kube.apply(pinned_repository(
        "shop",
        json!({}),
        w.spec("exec-kubeconfig"),
    ));
    let operator = w.operator().await;

    eventually("the object stalls on its kubeconfig", || {
        condition(&w.kube, "shop", "Stalled").is_some()
    })
    .await;
    let stalled = condition(&w.kube, "shop", "Stalled").unwrap();
    assert_eq!(stalled["reason"], "InvalidSpec");
    let message = stalled["message"].as_str().unwrap();
    assert!(
        message.starts_with("spec.promotion.stages[1].cluster.kubeconfig_secret_ref")
            && message.contains("user \"tagpin\" sets exec"),
        "{message}"
    );
    operator.stop().await;
    assert!(!marker.exists(), "the kubeconfig's command ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stage_cluster_that_does_not_answer_skips_its_promotion_and_sync_goes_on() {
    let w = World::new().await;
    // Staging's kubeconfig names an API server nobody listens on; production is the
    // operator's own cluster.
    let port = support::registry::free_port();
    let dead = w
        .production
        .kubeconfig_yaml()
        .replace(&w.production.url(), &format!("https://127.0.0.1:{port}"));
    w.kube.apply(secret(
        NS,
        "staging-kubeconfig",
        &[support::kube::TAGPIN_SECRET],
        &[("kubeconfig", dead.as_str())],
    ));
    let mut spec = w.spec("unused");
    spec["promotion"]["stages"][0]["cluster"] =
        json!({"kubeconfig_secret_ref": {"name": "staging-kubeconfig"}});
    spec["promotion"]["stages"][1]["cluster"] = json!({"in_cluster": true});
    w.kube.apply(pinned_repository("shop", json!({}), spec));
    let operator = w.operator().await;

    eventually("the promotion is reported unreachable", || {
        w.promotions("shop")
            .first()
            .is_some_and(|p| p["gate"] == "unreachable")
    })
    .await;
    // Sync pinned staging all the same.
    let object = w.kube.get("PinnedRepository", NS, "shop").unwrap();
    assert_eq!(
        object["status"]["lastPin"]["commit"],
        w.repo.head("main").unwrap().as_str()
    );
    assert!(w
        .repo
        .read("main", "envs/staging/web.yaml")
        .unwrap()
        .contains(&w.image("1.5.0", &w.new)));
    let entry = &w.promotions("shop")[0];
    let message = entry["message"].as_str().unwrap();
    assert!(
        message.starts_with("stage staging: cannot reach its cluster (the kubeconfig in key \"kubeconfig\" of Secret staging-kubeconfig)"),
        "{entry}"
    );
    let reconciling = condition(&w.kube, "shop", "Reconciling").unwrap();
    assert_eq!(reconciling["reason"], "Unreachable");
    assert!(
        reconciling["message"]
            .as_str()
            .unwrap()
            .starts_with("promotion staging into production: stage staging: cannot reach"),
        "{reconciling}"
    );
    assert!(condition(&w.kube, "shop", "Stalled").is_none());
    eventually("a PromotionBlocked Event", || {
        event_reasons(&w.kube, "shop").contains(&"PromotionBlocked".to_string())
    })
    .await;
    let blocked: Vec<Value> = w
        .kube
        .events(NS)
        .into_iter()
        .filter(|e| e["regarding"]["name"] == "shop" && e["reason"] == "PromotionBlocked")
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["type"], "Warning");
    assert!(w.github.prs().is_empty());
    operator.stop().await;
}

#[test]
fn the_promotion_example_is_valid_for_the_crd_and_the_validator() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/operator");
    let read = |file: &str| -> Value {
        serde_yaml::from_str(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap()
    };
    let example = read("pinnedrepository-promotion.example.yaml");
    let crd = read("crd.yaml");
    support::kube::check_custom_resource(&crd, &example).unwrap_or_else(|e| panic!("{e}"));
    let config = tagpin::config::Config::from_resource_spec(&example["spec"], "team-a/shop")
        .unwrap_or_else(|e| panic!("{e}"));
    let stages = config.promotion.unwrap().stages;
    assert_eq!(stages[0].cluster, tagpin::config::ClusterTarget::InCluster);
    assert_eq!(
        stages[1].cluster,
        tagpin::config::ClusterTarget::KubeconfigSecret {
            name: "production-kubeconfig".into(),
            key: "kubeconfig".into()
        }
    );
    assert!(tagpin::operator::names_secret(
        example["spec"].as_object().unwrap(),
        "production-kubeconfig"
    ));
    // A file kubeconfig is the controller's disk: refused, naming the field.
    let mut on_disk = example["spec"].clone();
    on_disk["promotion"]["stages"][1]["cluster"] = json!({"kubeconfig": "/etc/prod.kubeconfig"});
    let problems = tagpin::config::Config::from_resource_spec(&on_disk, "team-a/shop")
        .unwrap_err()
        .problems;
    assert_eq!(
        problems,
        [
            "spec.promotion.stages[1].cluster.kubeconfig: names something on the controller's own \
          disk; a PinnedRepository takes kubeconfig_secret_ref or in_cluster"
        ]
    );
}
