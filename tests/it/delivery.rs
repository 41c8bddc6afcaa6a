//! Delivery metrics (DORA, issue #39), end to end: `tagpin run` (the real binary) drives a
//! repository through pin -> converged -> failed -> revert -> converged -> promotion, against
//! a real registry, a real bare repository, the local GitHub server (production is promoted
//! by pull request, merged by the test) and two local Kubernetes API servers. The test
//! records when it made each thing happen and when it saw each result, then checks
//! `tagpin report --output json` (the real binary, its own mirror) and `/metrics` against
//! those times, within the clock's resolution (one second).

use std::path::Path;

use serde_json::Value;

use crate::minimum_age::push_created;
use crate::run::{metric_sum, Controller};
use crate::support;
use crate::sync::deployment;

use support::eventually_or;
use support::git::{git_command, git_ok, BareRepo};
use support::github::GitHubServer;
use support::kube::KubeServer;
use support::registry::{Mode, TestRegistry};
use support::workloads::{image_id, LiveDeployment};

const TOKEN: &str = "ghs_delivery_39";
const PROMOTION_BRANCH: &str = "tagpin/promote/production";

fn now() -> i64 {
    tagpin::clock::unix_now()
}

/// `shop/Deployment/web` on `kube` rolled out on `image`, its pod running it.
fn runs(kube: &KubeServer, image: &str) {
    let live = LiveDeployment::new("shop", "web").container("app", image);
    live.apply(kube);
    live.pod("web-1").running(kube, &[image_id(image)]);
}

/// `shop/Deployment/web` on `kube` rolled out on `image`, its pod crash-looping.
fn crash_loops(kube: &KubeServer, image: &str) {
    let live = LiveDeployment::new("shop", "web").container("app", image);
    live.apply(kube);
    live.pod("web-1")
        .crash_looping(kube, &[image_id(image)], "back-off 5m0s restarting");
}

/// A person merges the promotion pull request: a real merge commit (first parent the
/// branch's tip, second the pull request's head), dated now.
fn merge(repo: &BareRepo, github: &GitHubServer, number: u64, head: &str) -> String {
    let base = repo.head("main").unwrap();
    let tree = git_ok(repo.path(), &["rev-parse", &format!("{head}^{{tree}}")]);
    let date = format!("@{} +0000", now());
    let out = git_command()
        .current_dir(repo.path())
        .env("GIT_AUTHOR_DATE", &date)
        .env("GIT_COMMITTER_DATE", &date)
        .args(["commit-tree", &tree, "-p", &base, "-p", head, "-m"])
        .arg(format!(
            "Merge pull request #{number} from acme/{PROMOTION_BRANCH}"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let merge = String::from_utf8(out.stdout).unwrap().trim().to_string();
    git_ok(
        repo.path(),
        &["update-ref", "refs/heads/main", &merge, &base],
    );
    github.merge_pr(number, &merge);
    merge
}

/// `tagpin report --output json` over the repository, with a mirror of its own.
fn report(dir: &Path, config: &Path) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["report", "--since", "1d", "--output", "json", "--config"])
        .arg(config)
        .arg("--cache-dir")
        .arg(dir.join("report-cache"))
        .env("HOME", dir)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn unix(rfc3339: &Value) -> i64 {
    let text = rfc3339.as_str().unwrap_or_else(|| panic!("{rfc3339}"));
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

/// `value` lies within `[low, high]`, one second of clock resolution on either side.
fn within(what: &str, value: i64, (low, high): (i64, i64)) {
    assert!(
        low - 1 <= value && value <= high + 1,
        "{what}: {value} not within [{low}, {high}]"
    );
}

fn change<'v>(report: &'v Value, stage: &str) -> &'v Value {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["stage"] == stage)
        .unwrap_or_else(|| panic!("no change in {stage}: {report:#}"))
}

/// The delivery figures the dashboard at `ui` shows for the one repository, once its stages
/// are those of `report` (60 s at most: `run` reads the history after a cycle).
async fn dashboard_delivery(ui: &str, report: &Value) -> Value {
    let http = reqwest::Client::new();
    let get = |url: String| {
        let http = http.clone();
        async move {
            http.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let overview = get(format!("http://{ui}/api/repositories")).await;
        let id = overview["repositories"][0]["id"]
            .as_str()
            .unwrap_or_default();
        let detail = get(format!("http://{ui}/api/repositories/{id}")).await;
        if detail["delivery"]["stages"] == report["stages"] || std::time::Instant::now() > deadline
        {
            return detail["delivery"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn stage<'v>(report: &'v Value, name: &str) -> &'v Value {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name}: {report:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pin_that_fails_after_converging_is_reverted_and_the_report_and_metrics_say_so() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let t0 = now();
    let (good_built, bad_built) = (t0 - 7200, t0 - 3600);
    let old = push_created(&registry, "acme/web", "0.9", "old", Some(t0 - 86_400)).await;
    let good = push_created(&registry, "acme/web", "1.0", "good", Some(good_built)).await;
    let pinned = |digest: &str| format!("{host}/acme/web:1.0@{digest}");
    let repo = BareRepo::create(&[
        ("envs/staging/web.yaml", &deployment("web", &pinned(&good))),
        (
            "envs/production/web.yaml",
            &deployment("web", &pinned(&old)),
        ),
    ]);
    let github = GitHubServer::start(TOKEN, "acme", "gitops", repo.path()).await;
    let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
    runs(&production, &pinned(&old));
    // The tag moves to a new build, which staging already runs (Argo CD is quick).
    let bad = push_created(&registry, "acme/web", "1.0", "bad", Some(bad_built)).await;
    runs(&staging, &pinned(&bad));

    let dir = tempfile::tempdir().unwrap();
    let kubeconfigs = [("staging", &staging), ("production", &production)].map(|(name, kube)| {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        kube.kubeconfig(&at)
    });
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\nmode: commit\n\
             registries: {{insecure: ['{host}']}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GITHUB_TOKEN}}\n\
             verify: {{default_namespace: shop, on_failure: revert}}\n\
             promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [envs/staging], cluster: {{kubeconfig: '{}'}}}}\n\
             \x20 - {{name: production, paths: [envs/production], cluster: {{kubeconfig: '{}'}}, \
             soak: 0s, mode: pull-request}}\n",
            repo.file_url(),
            github.api_url(),
            kubeconfigs[0].display(),
            kubeconfigs[1].display(),
        ),
    )
    .unwrap();
    let env = [("GITHUB_TOKEN", TOKEN)];
    let ui = format!("127.0.0.1:{}", support::registry::free_port());
    let args = ["--interval", "2s", "--ui-listen", ui.as_str()];
    let controller = Controller::start_with_args(dir.path(), &config, &env, &args).await;
    let fail = |what: &str, log: String| -> ! {
        panic!("{what}: {:?} {:?}\n{log}", repo.log("main"), github.prs())
    };

    // pin -> converged
    let converged_on = |sha: &str| github.has_status(sha, "tagpin/converged", "success");
    let pin_converged = eventually_or("the pin converged", || {
        repo.log("main").len() == 2 && converged_on(&repo.head("main").unwrap())
    })
    .await;
    let pin_seen = now();
    if !pin_converged {
        fail("the pin", controller.stop().await.1);
    }
    let pin = repo.head("main").unwrap();

    // -> failed: the pods crash-loop after the pin converged.
    let crashed = now();
    crash_loops(&staging, &pinned(&bad));
    let failed = eventually_or("the converged pin judged Failed", || {
        github.has_status(&pin, "tagpin/converged", "failure")
    })
    .await;
    let failed_seen = now();
    if !failed {
        fail("failed after converged", controller.stop().await.1);
    }

    // -> revert -> converged
    let reverted = eventually_or("the revert", || repo.log("main").len() == 3).await;
    if !reverted {
        fail("the revert", controller.stop().await.1);
    }
    let revert = repo.head("main").unwrap();
    let restored = now();
    runs(&staging, &pinned(&good));
    let revert_converged = eventually_or("the revert converged", || converged_on(&revert)).await;
    let revert_seen = now();
    if !revert_converged {
        fail("the revert's verdict", controller.stop().await.1);
    }

    // -> promotion: the pull request carries the restored digest; production runs it, and a
    // person merges it.
    let promoted_file = || {
        repo.read(PROMOTION_BRANCH, "envs/production/web.yaml")
            .is_some_and(|text| text.contains(&good))
    };
    let open = eventually_or("the promotion carries the good digest", || {
        let head = repo.head(PROMOTION_BRANCH);
        let on_revert = head
            .as_ref()
            .is_some_and(|head| git_ok(repo.path(), &["rev-parse", &format!("{head}^")]) == revert);
        on_revert
            && promoted_file()
            && github
                .prs()
                .iter()
                .any(|pr| pr.head_ref == PROMOTION_BRANCH)
    })
    .await;
    if !open {
        fail("the promotion", controller.stop().await.1);
    }
    let pr = github
        .prs()
        .into_iter()
        .find(|pr| pr.head_ref == PROMOTION_BRANCH)
        .unwrap();
    let head = repo.head(PROMOTION_BRANCH).unwrap();
    runs(&production, &pinned(&good));
    let merged_at = now();
    let merge_commit = merge(&repo, &github, pr.number, &head);
    let mut last = Value::Null;
    let promoted = support::eventually_async_or("production converged in the report", || {
        last = report(dir.path(), &config);
        let done = last["changes"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["stage"] == "production" && !c["converged"].is_null())
        });
        std::future::ready(done)
    })
    .await;
    let promoted_seen = now();
    if !promoted {
        fail(
            &format!("production's verdict: {last:#}"),
            controller.stop().await.1,
        );
    }

    // The report, against the times the test recorded.
    let value = report(dir.path(), &config);
    eprintln!("tagpin report --output json:\n{value:#}");
    let staging_change = change(&value, "staging");
    assert_eq!(staging_change["digest"], bad.as_str(), "{value:#}");
    assert_eq!(staging_change["image"], format!("{host}/acme/web"));
    assert_eq!(staging_change["outcome"], "reverted", "{value:#}");
    assert_eq!(staging_change["created_from"], "created");
    assert_eq!(unix(&staging_change["created"]), bad_built);
    assert_eq!(staging_change["commit"], pin.as_str());
    within("pinned", unix(&staging_change["pinned"]), (t0, pin_seen));
    let pin_converged_at = unix(&staging_change["converged"]);
    within("the pin's Converged", pin_converged_at, (t0, pin_seen));
    let production_change = change(&value, "production");
    assert_eq!(production_change["digest"], good.as_str());
    assert_eq!(production_change["outcome"], "converged", "{value:#}");
    assert_eq!(production_change["commit"], merge_commit.as_str());
    assert_eq!(unix(&production_change["created"]), good_built);
    within(
        "merged",
        unix(&production_change["pinned"]),
        (merged_at, merged_at),
    );
    let production_converged_at = unix(&production_change["converged"]);
    within(
        "production's Converged",
        production_converged_at,
        (merged_at, promoted_seen),
    );
    assert_eq!(value["changes"].as_array().unwrap().len(), 2, "{value:#}");

    let staging_figures = stage(&value, "staging");
    assert_eq!(staging_figures["deployments"], 1, "{value:#}");
    assert_eq!(staging_figures["failures"], 1);
    assert_eq!(staging_figures["change_failure_rate"], 1.0);
    let staging_lead = pin_converged_at - bad_built;
    assert_eq!(staging_figures["lead_time_seconds"]["median"], staging_lead);
    assert_eq!(staging_figures["lead_time_seconds"]["p90"], staging_lead);
    within(
        "the staging lead time",
        staging_lead,
        (t0 - bad_built, pin_seen - bad_built),
    );
    let restore = staging_figures["time_to_restore_seconds"]["median"]
        .as_i64()
        .unwrap_or_else(|| panic!("{value:#}"));
    within(
        "time to restore",
        restore,
        (restored - failed_seen, revert_seen - crashed),
    );
    let production_figures = stage(&value, "production");
    assert_eq!(production_figures["deployments"], 1);
    assert_eq!(production_figures["failures"], 0);
    assert_eq!(production_figures["change_failure_rate"], 0.0);
    let production_lead = production_converged_at - good_built;
    assert_eq!(
        production_figures["lead_time_seconds"]["median"],
        production_lead
    );

    // The verdicts are in Git, as notes on the deployment commits.
    let note = git_ok(repo.path(), &["notes", "--ref", "tagpin", "show", &pin]);
    assert!(
        note.contains("\"verdict\":\"converged\"") && note.contains("\"verdict\":\"failed\""),
        "{note}"
    );

    // The same figures in the controller's metrics (each observed once).
    let metrics_show = |metrics: &str| {
        metric_sum(
            metrics,
            "tagpin_lead_time_seconds_count{stage=\"production\"}",
        ) == 1.0
            && metric_sum(
                metrics,
                "tagpin_time_to_restore_seconds_count{stage=\"staging\"}",
            ) == 1.0
            && metric_sum(metrics, "tagpin_deployments_total{") == 1.0
    };
    let mut metrics = String::new();
    let mut observed = false;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !observed && std::time::Instant::now() < deadline {
        metrics = controller.metrics().await;
        observed = metrics_show(&metrics);
        if !observed {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    // And on the dashboard: its delivery panel holds the report's figures, read by `run`.
    let dashboard = dashboard_delivery(&ui, &value).await;
    let (code, log) = controller.stop().await;
    assert!(observed, "{metrics}\n{log}");
    assert_eq!(
        dashboard["stages"], value["stages"],
        "{dashboard:#}\n{value:#}"
    );
    assert_eq!(code, Some(0), "{log}");
    let sum = |family: &str| metric_sum(&metrics, family) as i64;
    assert_eq!(
        sum("tagpin_lead_time_seconds_count{stage=\"staging\"}"),
        1,
        "{metrics}"
    );
    assert_eq!(
        sum("tagpin_lead_time_seconds_sum{stage=\"staging\"}"),
        staging_lead
    );
    assert_eq!(
        sum("tagpin_lead_time_seconds_sum{stage=\"production\"}"),
        production_lead
    );
    assert_eq!(
        sum("tagpin_time_to_restore_seconds_sum{stage=\"staging\"}"),
        restore
    );
    assert_eq!(
        sum("tagpin_deployments_total{stage=\"staging\",outcome=\"reverted\"}"),
        1,
        "the reverted pin, counted once its outcome is settled: {metrics}"
    );
    // Outcomes no deployment had yet are series at 0, so their first one is an increase.
    for outcome in ["converged", "failed", "reverted", "held", "pending"] {
        let series =
            format!("tagpin_deployments_total{{stage=\"production\",outcome=\"{outcome}\"}} ");
        assert!(metrics.contains(&series), "{series} missing: {metrics}");
    }
    github.assert_no_violations();
}
