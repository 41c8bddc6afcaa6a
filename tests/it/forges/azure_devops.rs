//! What Azure DevOps does its own way, end to end (the real binary against the local Azure
//! DevOps of `support::azure_devops`, in the worlds of `forges.rs`): pull requests and
//! statuses read page by page (`$top`/`$skip`, `top`/`skip`); a pull request opened meanwhile
//! adopted on `409`; a `429` waited out or reported; a bad token (`401`, or the `203` sign-in
//! page), a missing repository and a read-only token named; a body past the 4,000 characters
//! of a description cut with its plan block whole.

use crate::forges::{digest_of, Hub, Kind, Stages, World, ADO_PROJECT, ADO_REPO, BOT};
use crate::support;

use serde_json::json;
use support::azure_devops::{AzureDevOpsServer, Fault, Scope, MAX_DESCRIPTION};
use support::manifests::deployment_with_replicas;
use support::output_text as text;

fn ado(w: &World) -> &AzureDevOpsServer {
    match &w.hub {
        Hub::AzureDevOps(ado) => ado,
        _ => unreachable!("an Azure DevOps world"),
    }
}

/// tagpin's pull request is on the second page of the active ones into `main` (people opened
/// more than a page after it): the controller finds it there and verifies it. Reading one page
/// only, it would never post its verdict.
#[tokio::test]
async fn azure_devops_the_controller_finds_its_pull_request_on_a_later_page() {
    let w = World::new(Kind::AzureDevOps).await;
    let ado = ado(&w);
    assert_eq!(w.sync().await.status.code(), Some(0));
    let main = w.repo.head("main").unwrap();
    for n in 0..support::azure_devops::DEFAULT_TOP + 4 {
        let branch = format!("feature/{n}");
        w.repo.reset_branch(&branch, &main);
        ado.open_pull_as(
            "reviewer",
            ADO_REPO,
            &branch,
            "main",
            &format!("Feature {n}"),
        );
    }
    let head = w.repo.head("tagpin/main").unwrap();

    let (child, _) = w.controller("1h");
    let verified = support::eventually_or("tagpin/converged on tagpin's head", || {
        ado.statuses(&head)
            .iter()
            .any(|s| s.context() == "tagpin/converged")
    })
    .await;
    let output = support::terminate(child, "tagpin run").await;

    let log = String::from_utf8_lossy(&output.stderr);
    assert!(verified, "pull request !1 was not verified: {log}");
    let skips: Vec<String> = ado
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pullrequests"))
        .filter_map(|r| r.query.clone())
        .filter(|q| q.contains("%24skip=100"))
        .collect();
    assert!(!skips.is_empty(), "the second page was read");
    w.hub.assert_no_violations();
}

/// More than a page of statuses on the commit staging soaks (a CI posting its own): tagpin's
/// own stage status, on the second page, still carries the soak clock, and the next
/// `promote` neither restarts it nor posts it again. Reading one page only, tagpin would
/// not find its clock and would start a new one.
#[tokio::test]
async fn azure_devops_the_soak_clock_is_read_from_a_later_page() {
    let w = Stages::new(Kind::AzureDevOps, "1h").await;
    let Hub::AzureDevOps(ado) = &w.hub else {
        unreachable!("an Azure DevOps world")
    };
    let image = w.sync().await;
    w.runs(&w.staging, &image, &digest_of(&image));
    let (code, report, out) = w.promote().await;
    assert_eq!(code, Some(3), "{}", text(&out));
    let since = report["gate"]["since"].as_i64().unwrap();
    let tip = w.tip();
    ado.add_token("ado-ci-bot", "ci-bot", Scope::Write);
    let client = reqwest::Client::new();
    for n in 0..120 {
        let posted = client
            .post(format!(
                "{}/{ADO_PROJECT}/_apis/git/repositories/{ADO_REPO}/commits/{tip}/statuses?api-version=7.1",
                ado.api_url()
            ))
            .basic_auth("", Some("ado-ci-bot"))
            .json(&json!({"state": "succeeded", "context": {"genre": "ci", "name": format!("step-{n}")}}))
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 201);
    }
    let stage_statuses = || {
        ado.statuses(&tip)
            .iter()
            .filter(|s| s.context() == "tagpin/stage/staging")
            .count()
    };
    let before = stage_statuses();

    let (code, report, out) = w.promote().await;

    assert_eq!(code, Some(3), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "soaking", "{report:#}");
    assert_eq!(report["gate"]["since"].as_i64(), Some(since), "{report:#}");
    assert_eq!(stage_statuses(), before, "the clock is not posted again");
    assert!(ado.requests().iter().any(|r| r.path.ends_with("/statuses")
        && r.query.as_deref().is_some_and(|q| q.contains("skip=100"))));
    w.hub.assert_no_violations();
}

/// A person opened a pull request from tagpin's branch after tagpin listed: Azure DevOps
/// answers `409` (`TF401179`) to tagpin's, and that one is adopted in the same pass with
/// tagpin's title, description and labels; no second one is opened.
#[tokio::test]
async fn azure_devops_a_pull_request_opened_meanwhile_is_adopted_on_409() {
    let w = World::new(Kind::AzureDevOps).await;
    let ado = ado(&w);
    ado.inject(Fault::new("POST", "/pullrequests", 502));
    assert_eq!(w.sync().await.status.code(), Some(1));
    ado.open_pull_as("reviewer", ADO_REPO, "tagpin/main", "main", "WIP");
    ado.inject(Fault::new("GET", "/pullrequests", 200).json_body(json!({"value": [], "count": 0})));

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let changes = w.hub.changes();
    assert_eq!(changes.len(), 1, "adopted, not doubled: {changes:?}");
    assert_eq!(changes[0].title, "Pin 1 image(s) to digests");
    assert!(changes[0].body.contains("<!-- tagpin-plan"));
    assert!(changes[0].labels.contains(&"tagpin".to_string()));
    assert!(ado
        .requests()
        .iter()
        .any(|r| r.method == "POST" && r.path.ends_with("/pullrequests") && r.status == 409));
    w.hub.assert_no_violations();
}

/// A `429` with `Retry-After` (and Azure DevOps's `X-RateLimit-*` headers) is waited out; one
/// asking longer than tagpin waits is reported with its wait, and nothing is written.
#[tokio::test]
async fn azure_devops_a_rate_limit_is_waited_out_or_reported_with_its_wait() {
    let w = World::new(Kind::AzureDevOps).await;
    let ado = ado(&w);
    ado.inject(Fault::rate_limited("GET", "/pullrequests", 3600));
    let refused = w.sync().await;
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        text(&refused).contains("rate limited; Azure DevOps asks to wait 3600s"),
        "{}",
        text(&refused)
    );
    assert!(w.hub.changes().is_empty());

    ado.inject(Fault::rate_limited("GET", "/pullrequests", 1).times(2));
    let waited = w.sync().await;
    assert_eq!(waited.status.code(), Some(0), "{}", text(&waited));
    assert_eq!(w.hub.changes().len(), 1);
    let lists: Vec<u16> = ado
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/pullrequests"))
        .map(|r| r.status)
        .collect();
    assert_eq!(lists[1..4], [429, 429, 200], "{lists:?}");
    w.hub.assert_no_violations();
}

/// An unknown token (`401`, or the `203` sign-in page Azure DevOps answers on some routes), a
/// repository that is not there and a read-only token are each told apart, and the token is
/// never shown.
#[tokio::test]
async fn azure_devops_token_and_repository_problems_are_named() {
    let w = World::new(Kind::AzureDevOps).await;
    let ado = ado(&w);
    let out = w.tagpin_with_token("sync", &[], "ado-unknown-0000").await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("401 Unauthorized") && text(&out).contains("the token is not valid"),
        "{}",
        text(&out)
    );

    ado.inject(Fault::sign_in_page("GET", "/pullrequests"));
    let out = w.sync().await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("Azure DevOps at ")
            && text(&out).contains("the answer is a web page, not JSON")
            && text(&out).contains("sign-in page")
            && !text(&out).contains("<html"),
        "{}",
        text(&out)
    );

    ado.add_token("ado-read-only", BOT, Scope::Read);
    let out = w.tagpin_with_token("sync", &[], "ado-read-only").await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("403 Forbidden") && text(&out).contains("Code (Read & write)"),
        "{}",
        text(&out)
    );
    assert!(w.hub.changes().is_empty());

    let config = std::fs::read_to_string(w.config())
        .unwrap()
        .replace("repo: gitops,", "repo: nope,");
    w.write_config(&config);
    let out = w.sync().await;
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("404 Not Found")
            && text(&out).contains(&format!("{ADO_PROJECT}/nope is not at {}", ado.api_url())),
        "{}",
        text(&out)
    );
    assert!(w.hub.changes().is_empty());
    w.hub.assert_no_violations();
}

/// Eight images make a body past the 4,000 characters an Azure DevOps description holds: the
/// pull request is opened all the same, its description cut and saying so, its plan block
/// whole in the pull request's properties (where `verify --pr` and the next pass read it),
/// and a quiet pass writes nothing.
#[tokio::test]
async fn azure_devops_a_long_body_keeps_its_plan_block_in_the_properties() {
    let w = World::new(Kind::AzureDevOps).await;
    let ado = ado(&w);
    let host = w.registry.host();
    let mut files = Vec::new();
    for n in 0..7 {
        let name = format!("service-number-{n}");
        w.registry
            .push_image(&format!("acme/{name}"), "1.0", &format!("{name}-1"))
            .await;
        files.push((
            format!("apps/{name}.yaml"),
            deployment_with_replicas(&name, &format!("{host}/acme/{name}:1.0"), 1),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, c)| (f.as_str(), c.as_str()))
        .collect();
    w.repo
        .commit_as_other_writer("main", &files, "Seven more services");

    let out = w.sync().await;

    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let pulls = ado.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    let description = &pulls[0].description;
    assert!(
        description.chars().count() <= MAX_DESCRIPTION,
        "{}",
        description.len()
    );
    assert!(
        description.contains("cut: Azure DevOps keeps 4,000 characters"),
        "{description}"
    );
    let kept = pulls[0]
        .properties
        .get("tagpin.plan")
        .expect("the plan is kept");
    let plan = tagpin::proposal::body::parse(kept).expect("the plan block is whole");
    assert_eq!(plan.pins.len(), 8);
    let verify = w
        .tagpin_with_token("verify", &["--pr", "1"], crate::forges::TOKEN)
        .await;
    assert!(
        !text(&verify).contains("plan block"),
        "the plan is read back: {}",
        text(&verify)
    );
    let writes = || ado.requests().iter().filter(|r| r.method != "GET").count();
    let before = writes();
    let quiet = w.sync().await;
    assert_eq!(quiet.status.code(), Some(0), "{}", text(&quiet));
    assert_eq!(writes(), before, "a quiet pass writes nothing");
    w.hub.assert_no_violations();
}

/// A promotion of eight images from staging to production: its body (evidence, table and plan
/// block) is past the 4,000 characters of a description, so Azure DevOps keeps it cut and its
/// plan in the properties. The next `promote`, with nothing new to say, reads the plan back,
/// compares the body as Azure DevOps keeps it and writes nothing; compared whole, or without
/// its plan, it would rewrite the description on every pass.
#[tokio::test]
async fn azure_devops_a_long_promotion_body_is_not_rewritten_every_pass() {
    let registry = support::registry::TestRegistry::start(support::registry::Mode::Plain).await;
    let host = registry.host();
    let mut files = Vec::new();
    for n in 0..8 {
        let name = format!("service-number-{n}");
        registry
            .push_image(&format!("acme/{name}"), "1.5.0", &format!("{name}-1.5.0"))
            .await;
        let old = registry
            .push_image(&format!("acme/{name}"), "1.4.0", &format!("{name}-1.4.0"))
            .await
            .manifest;
        files.push((
            format!("envs/staging/{name}.yaml"),
            deployment_with_replicas(&name, &format!("{host}/acme/{name}:1.5.0"), 1),
        ));
        files.push((
            format!("envs/production/{name}.yaml"),
            deployment_with_replicas(&name, &format!("{host}/acme/{name}:1.4.0@{old}"), 1),
        ));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(f, c)| (f.as_str(), c.as_str()))
        .collect();
    let repo = support::git::BareRepo::create(&files);
    let ado = AzureDevOpsServer::start(
        crate::forges::TOKEN,
        BOT,
        crate::forges::ADO_ORG,
        ADO_PROJECT,
        ADO_REPO,
        repo.path(),
    )
    .await;
    let (staging, production) = (
        support::kube::KubeServer::start().await,
        support::kube::KubeServer::start().await,
    );
    let dir = tempfile::tempdir().unwrap();
    let mut kubeconfigs = Vec::new();
    for (name, kube) in [("staging", &staging), ("production", &production)] {
        std::fs::create_dir_all(dir.path().join(name)).unwrap();
        kubeconfigs.push(kube.kubeconfig(&dir.path().join(name)));
    }
    std::fs::write(
        dir.path().join("tagpin.yaml"),
        format!(
            "repository: {{url: '{}', branch: main}}\n\
             mode: commit\n\
             registries: {{insecure: ['{host}']}}\n\
             verify: {{default_namespace: shop}}\n\
             forge: {{kind: azure-devops, api_url: '{}', project: {ADO_PROJECT}, repo: {ADO_REPO}, token_env: TAGPIN_FORGE_TOKEN}}\n\
             promotion:\n  stages:\n\
             \x20 - name: staging\n    paths: [envs/staging]\n    cluster: {{kubeconfig: '{}'}}\n\
             \x20 - name: production\n    paths: [envs/production]\n    cluster: {{kubeconfig: '{}'}}\n    soak: 0s\n    mode: pull-request\n",
            repo.file_url(),
            ado.api_url(),
            kubeconfigs[0].display(),
            kubeconfigs[1].display(),
        ),
    )
    .unwrap();
    let tagpin = |args: &'static [&'static str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"));
        cmd.args(args)
            .arg("--config")
            .arg(dir.path().join("tagpin.yaml"))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("HOME", dir.path())
            .env("KUBECONFIG", dir.path().join("no-such-kubeconfig"))
            .env("TAGPIN_FORGE_TOKEN", crate::forges::TOKEN)
            .env_remove("DOCKER_CONFIG")
            .env_remove("RUST_LOG");
        async move { cmd.output().await.unwrap() }
    };
    let synced = tagpin(&["sync"]).await;
    assert_eq!(synced.status.code(), Some(0), "{}", text(&synced));
    for n in 0..8 {
        let name = format!("service-number-{n}");
        let manifest = repo
            .read("main", &format!("envs/staging/{name}.yaml"))
            .unwrap();
        let image = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("image: "))
            .unwrap()
            .to_string();
        let digest = image.split_once('@').unwrap().1.to_string();
        let web = support::workloads::LiveDeployment::new("shop", &name).container("app", &image);
        web.apply(&staging);
        web.pod(&format!("{name}-1"))
            .running(&staging, &[&format!("{host}/acme/{name}@{digest}")]);
    }
    let opened = tagpin(&["promote", "--to", "production"]).await;
    assert_eq!(opened.status.code(), Some(0), "{}", text(&opened));
    let pulls = ado.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:?}");
    assert!(
        pulls[0]
            .description
            .contains("cut: Azure DevOps keeps 4,000 characters"),
        "{}",
        pulls[0].description
    );
    let writes = || ado.requests().iter().filter(|r| r.method != "GET").count();
    let before = writes();

    let again = tagpin(&["promote", "--to", "production"]).await;

    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(!text(&again).contains(crate::forges::TOKEN));
    let patched: Vec<String> = ado
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(writes(), before, "nothing written again: {patched:?}");
    ado.assert_no_violations();
}
