//! `images.policies` end to end: the real binary follows versions in a real registry with
//! many tags, lists each repository's tags once, and commits tag and digest together.

use crate::support;
use crate::sync::{deployment, Run};

use support::git::BareRepo;
use support::output_text as text;
use support::registry::{FaultProxy, ImageKind, Mode, TestRegistry};

/// Tags `count` noise versions `1.3.0`, `1.3.1`, … of one image: more tags than one page of
/// [`tagpin::sync::TAG_PAGE_SIZE`], listed before every `1.4.x`. (distribution 2.8 ignores `n`
/// and answers in one page; `Link` pagination itself is tested in `registry_client.rs`.)
async fn push_noise(registry: &TestRegistry, repo: &str, count: usize) {
    let noise = registry.push_image(repo, "1.3.0", "noise").await;
    let media_type = ImageKind::Oci.manifest_media_type();
    let bytes = registry.manifest_bytes(repo, &noise.manifest).await;
    for patch in 1..count {
        let tag = format!("1.3.{patch}");
        registry.push_manifest(repo, &tag, media_type, &bytes).await;
    }
}

const POLICIES: &str = "images:\n  policies:\n  - {match: '**/acme/web', semver: '~1.4'}\n  - {match: '**/acme/job', pattern: '^build-(?P<n>[0-9]+)$', extract: '$n', order: numerical}\n";

// Multi-threaded: the proxy must answer while the test thread waits for the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_follows_a_semver_range_and_a_build_number_pattern() {
    let registry = TestRegistry::start(Mode::Plain).await;
    // tagpin talks to the registry through a recording proxy, to count its tag list requests.
    let proxy = FaultProxy::start(&registry.base_url(), Vec::new()).await;
    let host = proxy.host();
    push_noise(&registry, "acme/web", 120).await;
    let old = registry.push_image("acme/web", "1.4.2", "old").await;
    let new = registry.push_image("acme/web", "1.4.3", "new").await;
    registry.push_image("acme/web", "1.4.4-rc.1", "rc").await;
    registry.push_image("acme/web", "1.5.0", "next").await;
    registry.push_image("acme/job", "build-99", "b99").await;
    let b120 = registry.push_image("acme/job", "build-120", "b120").await;
    registry.push_image("acme/job", "build-100", "b100").await;
    registry.push_image("acme/job", "latest", "latest").await;
    let api = registry.push_image("acme/api", "2", "api").await;
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.4.2@{}", old.manifest)),
        ),
        (
            "apps/job.yaml",
            &deployment("job", &format!("{host}/acme/job:build-99")),
        ),
        (
            "apps/api.yaml",
            &deployment("api", &format!("{host}/acme/api:2")),
        ),
    ]);
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, POLICIES);

    let first = run.sync(&config, "cache");

    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1.4.3@{}", new.manifest))
    );
    assert_eq!(
        repo.read("main", "apps/job.yaml").unwrap(),
        deployment(
            "job",
            &format!("{host}/acme/job:build-120@{}", b120.manifest)
        )
    );
    // No policy matches api: its tag stays, its digest is pinned, as without policies.
    assert_eq!(
        repo.read("main", "apps/api.yaml").unwrap(),
        deployment("api", &format!("{host}/acme/api:2@{}", api.manifest))
    );
    let message = support::git::git_ok(repo.path(), &["log", "-1", "--format=%B", "main"]);
    assert!(
        message.contains(&format!(
            "{host}/acme/web:1.4.3 (apps/web.yaml Deployment/web/app): 1.4.2@{} -> 1.4.3@{}",
            old.manifest, new.manifest
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "build-99 (unpinned) -> build-120@{}",
            b120.manifest
        )),
        "{message}"
    );

    // One listing per repository with a policy, none for api.
    let listings = |repo: &str| {
        let path = format!("/v2/{repo}/tags/list");
        proxy.requests().iter().filter(|r| r.path == path).count()
    };
    assert_eq!(
        (
            listings("acme/web"),
            listings("acme/job"),
            listings("acme/api")
        ),
        (1, 1, 0)
    );

    let again = run.sync(&config, "cache");
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(text(&again).contains("nothing to pin"), "{}", text(&again));
}

#[tokio::test]
async fn a_policy_that_matches_no_tag_names_the_image_and_leaves_the_field() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.4.2", "old").await;
    registry.push_image("acme/web", "latest", "latest").await;
    let api = registry.push_image("acme/api", "2", "api").await;
    let web_yaml = deployment("web", &format!("{host}/acme/web:1.4.2"));
    let repo = BareRepo::create(&[
        ("apps/web.yaml", &web_yaml),
        (
            "apps/api.yaml",
            &deployment("api", &format!("{host}/acme/api:2")),
        ),
    ]);
    let run = Run::new();
    let config = run.config(
        &repo.file_url(),
        &host,
        "images:\n  policies:\n  - {match: '**/acme/web', semver: '^2'}\n",
    );

    let out = run.sync(&config, "cache");

    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "apps/web.yaml:10: {host}/acme/web: policy semver \"^2\" matches none of the 2 tag(s) the registry lists"
        )),
        "{}",
        text(&out)
    );
    assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), web_yaml);
    assert!(repo
        .read("main", "apps/api.yaml")
        .unwrap()
        .contains(&api.manifest));
}
