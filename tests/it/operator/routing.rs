//! A registry webhook to the operator reaches the objects whose images are in the pushed
//! repository, and only them: at fleet size a push of one tag must not cost a reconcile (a ref
//! listing, lists, a status read) of every object. The repositories are served over smart
//! HTTP, so every Git request of every object is seen.

use super::*;

const SECRET: &str = "routing-webhook-secret";

/// A Distribution (`registry:2`) notification of a push of `repository:tag`.
fn push_event(host: &str, repository: &str, tag: &str) -> String {
    format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"{repository}","tag":"{tag}"}},"request":{{"host":"{host}"}}}}]}}"#
    )
}

/// Delivers `event` as the registry does, with the webhook secret.
async fn deliver(operator: &Operator, event: String) {
    let answer = reqwest::Client::new()
        .post(format!("{}/webhooks/distribution", operator.base))
        .header("authorization", format!("Bearer {SECRET}"))
        .body(event)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
}

/// Git requests (ref listings, fetches, pushes) for `repository` so far.
fn git_requests(server: &GitHttpServer, repository: &str) -> usize {
    let prefix = format!("/{repository}/");
    server
        .requests()
        .iter()
        .filter(|r| r.path.starts_with(&prefix))
        .count()
}

fn pinned_to(repo: &BareRepo, file: &str, digest: &str) -> bool {
    repo.read("main", file).is_some_and(|t| t.contains(digest))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_webhook_reconciles_the_objects_using_the_pushed_repository_and_no_other() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let api = registry.push_image("acme/api", "1.0", "api-one").await;
    let base = tempfile::tempdir().unwrap();
    let create = |name: &str, deployment_name: &str, image: &str| {
        let manifest = deployment(deployment_name, &format!("{host}/{image}:1.0"));
        BareRepo::create_in(base.path(), name, &[("apps/app.yaml", &manifest)])
    };
    let repos = [
        ("web", create("web.git", "web", "acme/web")),
        ("api-a", create("api-a.git", "api", "acme/api")),
        ("api-b", create("api-b.git", "api", "acme/api")),
    ];
    let server = GitHttpServer::start(base.path(), HttpAuth::None);
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    runs_converged(&kube, "api", &format!("{host}/acme/api:1.0"), &api.manifest);
    for (name, repo) in &repos {
        let url = server.url(repo.name());
        kube.apply(pinned_repository(name, json!({}), spec(&url, &host)));
    }
    let dir = tempfile::tempdir().unwrap();
    // As many reconciles at once as objects: had the delivery reconciled every object, the
    // others would list their refs while the concerned one pins.
    let env = [("TAGPIN_WEBHOOK_SECRET", SECRET)];
    let operator =
        Operator::start_with_env(dir.path(), &kube, "op", &["--concurrent", "3"], &env).await;
    eventually("every object pinned and Ready", || {
        repos.iter().all(|(name, _)| is_ready(&kube, name))
    })
    .await;
    let requests = |server: &GitHttpServer| -> Vec<usize> {
        repos
            .iter()
            .map(|(_, repo)| git_requests(server, repo.name()))
            .collect()
    };

    // web is pushed again: its object alone is reconciled and pins the new digest.
    let at_rest = requests(&server);
    let two = registry.push_image("acme/web", "1.0", "two").await;
    deliver(&operator, push_event(&host, "acme/web", "1.0")).await;
    eventually("web pinned to the pushed digest", || {
        pinned_to(&repos[0].1, "apps/app.yaml", &two.manifest)
    })
    .await;
    // The cluster follows, and web is Ready again (its verification stops asking).
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &two.manifest);
    let pin = repos[0].1.head("main").unwrap();
    eventually("web Ready on the pushed digest", || {
        let object = kube.get("PinnedRepository", NS, "web").unwrap();
        object["status"]["lastPin"]["commit"] == json!(pin) && is_ready(&kube, "web")
    })
    .await;
    let after_web = requests(&server);
    assert!(after_web[0] > at_rest[0], "web's repository was fetched");
    assert_eq!(
        after_web[1..],
        at_rest[1..],
        "the api objects' repositories were not even asked for their refs"
    );
    assert!(pinned_to(&repos[1].1, "apps/app.yaml", &api.manifest));

    // A push nobody uses reconciles nobody; one of api reaches both of its objects.
    deliver(&operator, push_event(&host, "acme/unused", "1.0")).await;
    let api_two = registry.push_image("acme/api", "1.0", "api-two").await;
    deliver(&operator, push_event(&host, "acme/api", "1.0")).await;
    eventually("both api objects pinned to the pushed digest", || {
        repos[1..]
            .iter()
            .all(|(_, repo)| pinned_to(repo, "apps/app.yaml", &api_two.manifest))
    })
    .await;
    assert_eq!(
        git_requests(&server, repos[0].1.name()),
        after_web[0],
        "web's repository was not asked again"
    );
    assert_eq!(repos[0].1.log("main").len(), 3, "web: one commit per push");
    operator.stop().await;
}
