//! The dashboard (`--ui-listen`), served by the real `tagpin run` on a promotion fixture (a
//! real registry, a bare Git remote, a local GitHub, two local Kubernetes API servers) and
//! looked at in a real headless chromium: what a person sees (stages, digests, verdicts, a
//! promotion's reason), keyboard navigation, axe-core's accessibility checks, and an update
//! that appears without a reload.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::run::{runs, Controller, SECRET};
use crate::support;
use crate::support::browser::{self, Browser, ENTER};
use support::git::BareRepo;
use support::github::GitHubServer;
use support::kube::{deployment as live_deployment, KubeServer};
use support::manifests::deployment;
use support::registry::{free_port, ImageDigests, Mode, TestRegistry};

/// `TAGPIN_UPDATE_SCREENSHOT=1` writes the repository page's screenshot to
/// docs/img/dashboard.png (the one docs/dashboard.md shows); otherwise it goes to a
/// temporary directory.
const UPDATE_SCREENSHOT_ENV: &str = "TAGPIN_UPDATE_SCREENSHOT";

/// A hold comment that is markup, as anyone who can push to the GitOps repository may write.
const HOSTILE: &str = "<img src=x onerror=\"window.__xss=1\"> & <b>bold</b>";

/// Two stages, staging and production, each on its own local cluster; `web` runs the tag in
/// staging (not pinned yet) and an older version in production.
struct World {
    registry: TestRegistry,
    pushed: ImageDigests,
    staging: KubeServer,
    _production: KubeServer,
    _github: GitHubServer,
    _repo: BareRepo,
    dir: tempfile::TempDir,
    config: PathBuf,
}

async fn promotion_world() -> World {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    registry.push_image("acme/api", "2", "api").await;
    // Held by a comment whose text is HTML: the page must show it as text.
    let api = format!("{host}/acme/api:2");
    let held = deployment("api", &api).replace(&api, &format!("{api} # tagpin: hold {HOSTILE}"));
    let repo = BareRepo::create(&[
        (
            "envs/staging/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("envs/staging/api.yaml", &held),
        (
            "envs/production/web.yaml",
            &deployment("web", &format!("{host}/acme/web:0.9")),
        ),
    ]);
    let github = GitHubServer::start("ghs_ui", "acme", "gitops", repo.path()).await;
    let (staging, production) = (KubeServer::start().await, KubeServer::start().await);
    let dir = tempfile::tempdir().unwrap();
    let mut kubeconfigs = Vec::new();
    for (name, kube) in [("staging", &staging), ("production", &production)] {
        let at = dir.path().join(name);
        std::fs::create_dir_all(&at).unwrap();
        kubeconfigs.push(kube.kubeconfig(&at));
    }
    let config = dir.path().join("tagpin.yaml");
    std::fs::write(
        &config,
        format!(
            "repository: {{url: '{}', branch: main}}\nmode: commit\n\
             registries: {{insecure: ['{host}']}}\nverify: {{default_namespace: shop}}\n\
             forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: GH_TOKEN}}\n\
             promotion:\n  stages:\n\
             \x20 - {{name: staging, paths: [envs/staging], cluster: {{kubeconfig: '{}'}}}}\n\
             \x20 - {{name: production, paths: [envs/production], soak: 1h, cluster: {{kubeconfig: '{}'}}}}\n",
            repo.file_url(),
            github.api_url(),
            kubeconfigs[0].display(),
            kubeconfigs[1].display(),
        ),
    )
    .unwrap();
    for (kube, tag) in [(&staging, "1.0"), (&production, "0.9")] {
        kube.apply(live_deployment(
            "shop",
            "web",
            &[("app", "web")],
            &[("app", &format!("{host}/acme/web:{tag}"))],
        ));
    }
    World {
        registry,
        pushed,
        staging,
        _production: production,
        _github: github,
        _repo: repo,
        dir,
        config,
    }
}

async fn api(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// The repository's page as the API gives it, once `ready` holds for it (within 60 s).
async fn detail_when(http: &reqwest::Client, base: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let overview = api(http, &format!("{base}/api/repositories")).await;
        let mut last = Value::Null;
        if let Some(id) = overview["repositories"][0]["id"].as_str() {
            last = api(http, &format!("{base}/api/repositories/{id}")).await;
            if ready(&last) {
                return last;
            }
        }
        assert!(Instant::now() < deadline, "not as expected: {last:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn stage<'a>(detail: &'a Value, name: &str) -> &'a Value {
    detail["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name}: {detail:#}"))
}

/// Waits (60 s at most) until the page's visible text holds every one of `wanted`.
async fn sees(browser: &Browser, wanted: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = browser.text().await;
        if wanted.iter().all(|w| text.contains(w)) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the page does not show all of {wanted:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn screenshot_path(dir: &Path) -> PathBuf {
    if std::env::var(UPDATE_SCREENSHOT_ENV).as_deref() == Ok("1") {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/img/dashboard.png")
    } else {
        dir.join("dashboard.png")
    }
}

#[tokio::test]
async fn a_person_sees_stages_digests_verdicts_and_gates_and_the_page_follows_the_cycle() {
    if let Some(why) = browser::missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let world = promotion_world().await;
    let host = world.registry.host();
    let ui_port = free_port();
    let ui = format!("http://127.0.0.1:{ui_port}");
    let ui_listen = format!("127.0.0.1:{ui_port}");
    let controller = Controller::start_with_args(
        world.dir.path(),
        &world.config,
        &[("GH_TOKEN", "ghs_ui")],
        &["--interval", "1h", "--ui-listen", &ui_listen],
    )
    .await;
    let http = reqwest::Client::new();
    let digest = world.pushed.manifest.clone();
    let pinned = format!("{host}/acme/web:1.0@{digest}");

    // Staging's verdict on the pin: the cluster still runs the tag.
    let before = detail_when(&http, &ui, |d| {
        stage(d, "staging")["images"][0]["digest"] == json!(digest)
            && stage(d, "production")["gate"].is_object()
    })
    .await;
    let staging_verdict = stage(&before, "staging")["images"][0]["verdict"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(staging_verdict, "converged", "{before:#}");

    let browser = Browser::start().await;
    browser.goto(&format!("{ui}/")).await;
    let repository = before["key"].as_str().unwrap();
    sees(
        &browser,
        &["Repositories", repository, "staging", "production"],
    )
    .await;
    // The CSP and the other headers are on every answer.
    let page = http.get(format!("{ui}/")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert!(
        browser.accessibility_problems().await.is_empty(),
        "overview: {:?}",
        browser.accessibility_problems().await
    );

    // What Git says is shown as text, never run as markup.
    browser.goto(&format!("{ui}/")).await;
    let id = before["id"].as_str().unwrap();
    browser.goto(&format!("{ui}/repositories/{id}")).await;
    sees(&browser, &[&format!("# tagpin: hold {HOSTILE}")]).await;
    let injected = browser
        .run(
            "return [document.querySelectorAll('main img, main b').length, window.__xss === undefined];",
            json!([]),
        )
        .await;
    assert_eq!(injected, json!([0, true]));
    browser.goto(&format!("{ui}/")).await;
    sees(&browser, &["Repositories", repository]).await;

    // Keyboard: Tab reaches the repository's link, Enter opens it.
    let link = browser
        .tab_to(10, |f| {
            f["href"]
                .as_str()
                .is_some_and(|h| h.starts_with("/repositories/"))
        })
        .await;
    assert!(link.is_some(), "Tab never reached the repository's link");
    browser.press(ENTER).await;
    support::eventually_async("the repository's page", || async {
        browser.url().await.contains("/repositories/")
    })
    .await;
    let short = &digest[..7 + 12];
    let gate_reason = stage(&before, "production")["gate"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    sees(
        &browser,
        &[
            "Stages",
            "staging",
            "production",
            short,
            &staging_verdict,
            &gate_reason,
            "Promotion from staging",
        ],
    )
    .await;
    // The full digest on hover, and a copy button reached by Tab.
    let titled = browser
        .run(
            "return document.querySelectorAll('code[title=\"' + arguments[0] + '\"]').length;",
            json!([digest]),
        )
        .await;
    assert!(
        titled.as_u64().unwrap_or(0) >= 1,
        "no element titled with the full digest"
    );
    let copy = browser
        .tab_to(20, |f| {
            f["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("Copy digest"))
        })
        .await;
    assert_eq!(
        copy.map(|f| f["label"].clone()),
        Some(json!(format!("Copy digest {digest}")))
    );
    let problems = browser.accessibility_problems().await;
    assert!(problems.is_empty(), "repository page: {problems:?}");

    // Staging converges; the next pass (a webhook) sees it: the page follows without a reload.
    browser
        .run("window.__notReloaded = 42; return 1;", json!([]))
        .await;
    runs(
        &world.staging,
        "web",
        &pinned,
        &format!("{host}/acme/web@{digest}"),
        "web-1",
    );
    let event = format!(
        r#"{{"events":[{{"action":"push","target":{{"repository":"acme/web","tag":"1.0"}},"request":{{"host":"{host}"}}}}]}}"#
    );
    let auth = format!("Bearer {SECRET}");
    assert_eq!(
        controller
            .deliver("distribution", Some(&auth), &event)
            .await,
        202
    );
    let after = detail_when(&http, &ui, |d| {
        stage(d, "staging")["verdict"] == "converged"
            && stage(d, "production")["gate"]["state"] == "soaking"
    })
    .await;
    let soaking = stage(&after, "production")["gate"]["reason"]
        .as_str()
        .unwrap()
        .to_string();
    let text = sees(&browser, &["converged", "1 / 1", &soaking, "left of 1h"]).await;
    assert!(
        !text.contains(&gate_reason) || gate_reason == soaking,
        "{text}"
    );
    // The timeline is the cycle's own events, as the notifications tell them: staging's
    // convergence of the pushed digest, shown on the page without a reload.
    let fed =
        detail_when(&http, &ui, |d| {
            d["timeline"].as_array().into_iter().flatten().any(|e| {
                e["kind"] == "converged" && e["stage"] == "staging" && e["digest"].is_string()
            })
        })
        .await;
    let text = sees(&browser, &["Timeline"]).await;
    let timeline = &text[text.find("Timeline").unwrap()..];
    assert!(timeline.contains("converged"), "{fed:#}\n{text}");
    assert_eq!(
        browser.run("return window.__notReloaded;", json!([])).await,
        json!(42),
        "the page was reloaded"
    );
    let shot = screenshot_path(world.dir.path());
    std::fs::write(&shot, browser.screenshot().await).unwrap();
    browser.quit().await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

#[tokio::test]
async fn the_dashboard_is_off_by_default_and_never_on_the_webhook_port() {
    let world = promotion_world().await;
    let controller = Controller::start_with_args(
        world.dir.path(),
        &world.config,
        &[("GH_TOKEN", "ghs_ui")],
        &["--interval", "1h"],
    )
    .await;
    for path in ["/", "/api/repositories", "/assets/app.js"] {
        let answer = reqwest::get(format!("{}{path}", controller.base))
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{path} on the webhook port");
    }
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
}

/// The delivery report's JSON shape (section 2 of #39), as the lead's wiring hands it to the
/// board: two changes on two days, one with a lead time.
fn delivery_figures() -> Value {
    json!({
        "since": "2026-11-07T00:00:00Z",
        "stages": [{
            "name": "staging", "deployments": 2, "failures": 1, "change_failure_rate": 0.5,
            "lead_time_seconds": {"median": 840, "p90": 1500},
            "time_to_restore_seconds": {"median": 600}
        }],
        "changes": [
            {"image": "r.example/acme/web", "digest": format!("sha256:{}", "a".repeat(64)),
             "stage": "staging", "created": "2026-12-01T10:00:00Z", "pinned": "2026-12-01T10:05:00Z",
             "converged": "2026-12-01T10:14:00Z", "outcome": "converged"},
            {"image": "r.example/acme/web", "digest": format!("sha256:{}", "b".repeat(64)),
             "stage": "staging", "created": "2026-12-02T09:00:00Z", "pinned": "2026-12-02T09:01:00Z",
             "converged": null, "outcome": "failed"}
        ]
    })
}

fn events(repository: &str) -> Vec<tagpin::event::Event> {
    use tagpin::event::{ChangeLink, Event, EventKind};
    let event = |kind, time, reason: Option<&str>| Event {
        kind,
        time,
        repository: repository.to_string(),
        stage: "staging".into(),
        image: Some("r.example/acme/web".into()),
        digest: Some(format!("sha256:{}", "b".repeat(64))),
        commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        change_request: Some(ChangeLink {
            number: 7,
            url: Some("https://git.example/acme/gitops/pull/7".into()),
        }),
        reason: reason.map(str::to_string),
    };
    vec![
        event(EventKind::Pinned, 1_764_666_060, None),
        event(
            EventKind::Failed,
            1_764_667_000,
            Some("web: CrashLoopBackOff <b>x</b>"),
        ),
        event(EventKind::Reverted, 1_764_667_300, None),
    ]
}

#[tokio::test]
async fn the_timeline_and_the_delivery_panel_show_what_the_board_holds() {
    if let Some(why) = browser::missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let key = "https://git.example/acme/gitops.git";
    let config = tagpin::config::Config::parse(
        &format!("repository: {{url: '{key}', branch: main}}\n"),
        Path::new("tagpin.yaml"),
    )
    .unwrap();
    let board = tagpin::ui::Board::default();
    board.update(key, tagpin::ui::RepoView::new(key, &config, 1_764_667_300));
    board.record(events(key));
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ui = format!("http://{}", listener.local_addr().unwrap());
    let app = tagpin::ui::http::router(board.clone(), tagpin::ui::UiAuth::None);
    tokio::spawn(tagpin::server::serve_app(
        listener,
        app,
        stop,
        tagpin::server::HttpLimits::default(),
    ));
    let id = tagpin::ui::board::id_of(key);

    let browser = Browser::start().await;
    browser.goto(&format!("{ui}/repositories/{id}")).await;
    sees(
        &browser,
        &["No delivery figures yet", "reverted", "failed", "pinned"],
    )
    .await;
    // Newest first, the reason as text, the change request linked.
    let text = browser.text().await;
    let timeline = &text[text.find("Timeline").unwrap()..];
    let (reverted, pinned) = (
        timeline.find("reverted").unwrap(),
        timeline.find("pinned").unwrap(),
    );
    assert!(reverted < pinned, "{text}");
    assert!(text.contains("web: CrashLoopBackOff <b>x</b>"), "{text}");
    let links = browser
        .run(
            "return [...document.querySelectorAll('ol.timeline a')].map(a => a.href);",
            json!([]),
        )
        .await;
    assert_eq!(links[0], "https://git.example/acme/gitops/pull/7");

    // The lead's delivery report arrives: the panel fills in without a reload.
    board.set_delivery(key, Some(delivery_figures()));
    sees(
        &browser,
        &[
            "Deployments per day",
            "Lead time per change",
            "50%",
            "14m / 25m",
            "10m",
        ],
    )
    .await;
    let bars = browser
        .run(
            "return [...document.querySelectorAll('figure svg')].map(s => \
             [s.getAttribute('aria-label'), s.querySelectorAll('rect').length]);",
            json!([]),
        )
        .await;
    assert_eq!(bars[0][1], 1, "one change with a lead time: {bars}");
    assert!(
        bars[0][0].as_str().unwrap().ends_with("14m"),
        "built at 10:00, converged at 10:14: {bars}"
    );
    assert_eq!(bars[1][1], 2, "deployments on two days: {bars}");
    let problems = browser.accessibility_problems().await;
    assert!(problems.is_empty(), "{problems:?}");
    browser.quit().await;
}

/// `tagpin` with `args`, as a user runs it; its exit code and stderr.
fn tagpin(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(args)
        .env("HOME", dir)
        .env("KUBECONFIG", dir.join("no-kubeconfig"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_operator_dashboard_for_anyone_must_be_asked_for_and_run_has_no_tenancy_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = tagpin(
        &[
            "operator",
            "--ui-listen",
            "127.0.0.1:0",
            "--ui-auth",
            "none",
        ],
        dir.path(),
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("--ui-allow-anonymous"), "{err}");
    let (code, err) = tagpin(
        &[
            "run",
            "--config",
            "tagpin.yaml",
            "--ui-listen",
            "127.0.0.1:0",
            "--ui-auth",
            "token",
        ],
        dir.path(),
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("--ui-auth") && err.contains("only `none`"),
        "{err}"
    );
}
