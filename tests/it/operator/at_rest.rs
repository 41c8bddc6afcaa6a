//! A fleet at rest (issue #38, "nothing to do costs almost nothing"): once every object is
//! Ready, its passes read the cluster from lists a watch keeps current, not from lists read
//! again for each object, and each object's audit is made again only when its lists changed;
//! and what changes while it rests is still seen.

use crate::operator::{cluster, condition, is_ready, pinned_repository, runs_converged, spec};
use crate::operator::{Operator, NS};
use crate::support;
use crate::support::eventually;

use std::collections::BTreeMap;

use serde_json::json;
use support::git::BareRepo;
use support::kube::KubeServer;
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};
use support::workloads::LiveDeployment;

const OBJECTS: usize = 6;

fn name(n: usize) -> String {
    format!("web-{n}")
}

/// The requests of each verb the API server answered, by resource.
fn requests_of(kube: &KubeServer, verb: &str) -> BTreeMap<String, usize> {
    kube.request_counts()
        .into_iter()
        .filter(|((v, _), _)| v == verb)
        .map(|((_, resource), n)| (resource, n))
        .collect()
}

/// What `later` has more of than `earlier`.
fn more(
    earlier: &BTreeMap<String, usize>,
    later: &BTreeMap<String, usize>,
) -> BTreeMap<String, usize> {
    later
        .iter()
        .map(|(r, n)| (r.clone(), n - earlier.get(r).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Every pass of every object at rest listed the namespace's Deployments and pods again (the
/// lists were kept a second), so the fleet at rest cost API requests per object. Now the lists
/// are watched: passes at rest list nothing, and a pod that starts running an old image while
/// the fleet rests is seen by its object's next pass all the same.
#[tokio::test(flavor = "multi_thread")]
async fn at_rest_passes_list_nothing_again_and_still_see_a_pod_go_back_to_an_old_image() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = registry.push_image("acme/web", "0.9", "old").await;
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let image = format!("{host}/acme/web:1.0");
    let kube = cluster().await;
    let mut repos = Vec::new();
    for n in 0..OBJECTS {
        let file = format!("apps/{}.yaml", name(n));
        let repo = BareRepo::create(&[(&file, &deployment(&name(n), &image))]);
        let object = pinned_repository(&name(n), json!({}), spec(&repo.file_url(), &host));
        kube.apply(object);
        runs_converged(&kube, &name(n), &image, &pushed.manifest);
        repos.push(repo);
    }
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--interval", "1s"]).await;
    eventually("every object Ready", || {
        (0..OBJECTS).all(|n| is_ready(&kube, &name(n)))
    })
    .await;

    // Two more passes of every object, with nothing to change.
    let lists = requests_of(&kube, "list");
    let gets = requests_of(&kube, "get");
    for _ in 0..2 {
        let mut before = Vec::new();
        for n in 0..OBJECTS {
            before.push(operator.reconciled_at(&name(n)).await);
        }
        for (n, before) in before.into_iter().enumerate() {
            support::eventually_async(&format!("another pass of {}", name(n)), || async {
                operator.reconciled_at(&name(n)).await > before
            })
            .await;
        }
    }
    let (listed, got) = (
        more(&lists, &requests_of(&kube, "list")),
        more(&gets, &requests_of(&kube, "get")),
    );
    for resource in ["pods", "deployments"] {
        assert_eq!(
            listed.get(resource),
            None,
            "{resource} listed at rest: {listed:?}"
        );
    }
    let (lists, gets) = (listed.values().sum::<usize>(), got.values().sum::<usize>());
    assert!(
        lists + gets < OBJECTS,
        "{OBJECTS} objects passing twice at rest: lists {listed:?}, gets {got:?}"
    );

    // Each object's audit (of the whole namespace) is made again only when a list changed: a
    // Deployment no repository names, started at rest, is counted by every object's audit.
    let not_in_git = |n: usize| {
        kube.get("PinnedRepository", NS, &name(n))
            .and_then(|o| o["status"]["audit"]["workloads"]["not-in-git"].as_u64())
    };
    let mut counted = Vec::new();
    for n in 0..OBJECTS {
        eventually(&format!("{}'s audit", name(n)), || not_in_git(n).is_some()).await;
        counted.push(not_in_git(n).unwrap());
    }
    let stray = LiveDeployment::new("default", "stray").container("app", &image);
    stray.apply(&kube);
    let stray_image = format!("{host}/acme/web@{}", pushed.manifest);
    stray.pod("stray-1").running(&kube, &[stray_image]);
    for (n, counted) in counted.into_iter().enumerate() {
        eventually(&format!("{}'s audit counts the stray", name(n)), || {
            not_in_git(n) == Some(counted + 1)
        })
        .await;
    }

    // web-0's pod is replaced by one running the old image: its next pass sees it.
    let web = LiveDeployment::new("default", &name(0))
        .container("app", &format!("{image}@{}", pushed.manifest));
    let old_image = format!("{host}/acme/web@{}", old.manifest);
    web.pod(&format!("{}-1", name(0)))
        .image(&format!("{host}/acme/web:0.9@{}", old.manifest))
        .running(&kube, &[old_image]);
    eventually("web-0 no longer Converged", || {
        condition(&kube, &name(0), "Ready").is_some_and(|c| c["reason"] != "Converged")
    })
    .await;
    let object = kube.get("PinnedRepository", NS, &name(0)).unwrap();
    assert_ne!(object["status"]["verdict"]["state"], "converged");
    for n in 1..OBJECTS {
        assert!(is_ready(&kube, &name(n)), "{}", name(n));
    }
    operator.stop().await;
}

/// The sum of a family's series (`name{` or a whole `name{labels}`) on the operator's `/metrics`.
async fn metric_total(operator: &Operator, family: &str) -> f64 {
    crate::run::metric_sum(&operator.metrics_page().await, family)
}

/// A cycle's verification read the branch's tip by listing the remote's refs again, right
/// after its pass had listed them: two ref listings per object and interval at rest. The
/// verification now reads the mirror as its pass left it, so at rest a pass costs the remote one
/// ref listing, and the verdict stays Converged. The operator counts its passes, commits and
/// verdicts on `/metrics` as `tagpin run` does (it served them at zero before).
#[tokio::test(flavor = "multi_thread")]
async fn at_rest_a_cycle_asks_the_remote_for_its_refs_once() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let image = format!("{host}/acme/web:1.0");
    let kube = cluster().await;
    let repo = BareRepo::create(&[("apps/web.yaml", &deployment("web", &image))]);
    kube.apply(pinned_repository(
        "web",
        json!({}),
        spec(&repo.file_url(), &host),
    ));
    runs_converged(&kube, "web", &image, &pushed.manifest);
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &["--interval", "1s"]).await;
    eventually("web Ready", || is_ready(&kube, "web")).await;
    assert_eq!(repo.log("main").len(), 2, "the pin committed");
    assert_eq!(metric_total(&operator, "tagpin_commits_total").await, 1.0);
    support::eventually_async("web's Converged verdict counted", || async {
        let series = "tagpin_verifications_total{verdict=\"converged\",source=\"branch\"}";
        metric_total(&operator, series).await >= 1.0
    })
    .await;

    let listings = metric_total(&operator, "tagpin_git_ref_listings_total").await;
    let passes = metric_total(&operator, "tagpin_passes_total{").await;
    for _ in 0..4 {
        let before = operator.reconciled_at("web").await;
        support::eventually_async("another pass of web", || async {
            operator.reconciled_at("web").await > before
        })
        .await;
    }
    let listings = metric_total(&operator, "tagpin_git_ref_listings_total").await - listings;
    let passes = metric_total(&operator, "tagpin_passes_total{").await - passes;
    assert!(passes >= 4.0, "{passes} passes counted");
    // A pass may be under way at either reading: one listing of slack, not one per pass.
    assert!(
        listings <= passes + 1.0,
        "{listings} ref listings for {passes} passes at rest"
    );
    let ok = metric_total(&operator, "tagpin_passes_total{outcome=\"ok\"").await;
    assert!(ok >= passes, "every pass at rest ok: {ok} of {passes}");
    assert!(is_ready(&kube, "web"));
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert_eq!(
        object["status"]["verdict"]["state"], "converged",
        "{object:#}"
    );
    operator.stop().await;
}
