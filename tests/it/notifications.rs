//! Notifications end to end (issue #39): `tagpin run` and `tagpin operator`, the real
//! binaries, verify a pin the kubelet cannot pull (Failed), and tell it to local receivers
//! (`support::receiver`) that answer 503 to the first request on each path. Each kind gets
//! exactly one message, well-formed for its kind, retried once after the 503, and never a
//! second one: not at the next verification, not after a restart on the same cache
//! directory.

use crate::operator::{cluster, pinned_repository, Operator, NS};
use crate::run::{forge_world, metric_sum, Controller};
use crate::support;
use crate::support::receiver::{Received, Receiver, ANSWER_MARKER};

use hmac::{Hmac, Mac};
use serde_json::json;
use support::git::BareRepo;
use support::kube::KubeServer;
use support::manifests::deployment;
use support::registry::{Mode, TestRegistry};
use support::workloads::LivePod;

const HMAC_KEY: &str = "whsec-notify-5a1f";
const TOKEN: &str = "ghs_notify_77c0";

/// `namespace/Deployment/web` applied on `image`, its pod unable to pull it.
fn cannot_pull(kube: &KubeServer, namespace: &str, image: &str) {
    kube.apply(support::kube::deployment(
        namespace,
        "web",
        &[("app", "web")],
        &[("app", image)],
    ));
    LivePod::new(namespace, "web-1")
        .label("app", "web")
        .container("app", image)
        .waiting(
            kube,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{image}\""),
        );
}

/// The two requests of one message: the first answered 503, the second (the same body) 200.
fn retried_once(receiver: &Receiver, path: &str) -> Received {
    let got = receiver.received(path);
    assert_eq!(got.len(), 2, "{path}: {got:#?}");
    assert_eq!((got[0].status, got[1].status), (503, 200), "{path}");
    assert_eq!(
        got[0].body, got[1].body,
        "{path}: the retry sends the same body"
    );
    got[1].clone()
}

fn assert_slack(message: &Received, digest: &str) {
    assert_eq!(message.headers["content-type"], "application/json");
    let body = message.json();
    let text = body["text"].as_str().unwrap();
    assert!(text.starts_with("main: verification failed for "), "{text}");
    assert!(text.contains("ImagePullBackOff"), "{text}");
    let blocks = body["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[0]["text"]["type"], "plain_text");
    let fields = blocks.iter().find_map(|b| b["fields"].as_array()).unwrap();
    assert!(fields
        .iter()
        .any(|f| f["text"] == format!("*Digest*\n{digest}")));
}

fn assert_teams(message: &Received, digest: &str) {
    assert_eq!(message.headers["content-type"], "application/json");
    let body = message.json();
    assert_eq!(body["type"], "message");
    let attachment = &body["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    assert_eq!(card["version"], "1.4");
    let facts = card["body"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "FactSet")
        .unwrap();
    assert!(facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["title"] == "Digest" && f["value"] == digest));
}

/// A CloudEvent with every required attribute, its HMAC checked as a receiver checks it.
fn assert_cloudevent(message: &Received, digest: &str, source: &str) {
    assert_eq!(
        message.headers["content-type"],
        "application/cloudevents+json"
    );
    let signature = &message.headers["x-tagpin-signature-256"];
    let hex = signature.strip_prefix("sha256=").unwrap();
    let expected: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(HMAC_KEY.as_bytes()).unwrap();
    mac.update(&message.body);
    mac.verify_slice(&expected)
        .expect("the signature is the HMAC-SHA256 of the body");
    let event = message.json();
    assert_eq!(event["specversion"], "1.0");
    assert_eq!(event["type"], "dev.tagpin.failed");
    assert_eq!(event["source"], source);
    assert_eq!(event["id"].as_str().unwrap().len(), 32);
    let time = event["time"].as_str().unwrap();
    assert!(time.ends_with('Z') && time.contains('T'), "{time}");
    assert_eq!(event["data"]["verdict"], "failed");
    assert_eq!(event["data"]["digest"], digest);
    let image = event["data"]["image"].as_str().unwrap();
    assert!(image.ends_with("/acme/web"), "{image}");
    assert!(event["data"]["reason"]
        .as_str()
        .unwrap()
        .contains("ImagePullBackOff"));
}

#[tokio::test]
async fn a_failed_verdict_is_told_once_to_each_kind_retried_after_a_503_and_not_after_a_restart() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let notifications = "notifications:\n\
        \x20 - {kind: slack, url_env: SLACK_URL, events: [failed]}\n\
        \x20 - {kind: msteams, url_env: TEAMS_URL, events: [failed]}\n\
        \x20 - {kind: webhook, url_env: HOOK_URL, secret_env: HOOK_KEY, events: [failed]}\n";
    let (_github, kube, dir, config) =
        forge_world(&repo, &host, TOKEN, "commit", notifications).await;
    let receiver = Receiver::start().await;
    let kubeconfig = kube.kubeconfig(dir.path());
    let env = [
        ("KUBECONFIG", kubeconfig.to_str().unwrap().to_string()),
        ("GH_TOKEN", TOKEN.to_string()),
        ("SLACK_URL", receiver.url("/services/T0/B0/slack-s3cret")),
        ("TEAMS_URL", receiver.url("/workflows/teams")),
        ("HOOK_URL", receiver.url("/hook")),
        ("HOOK_KEY", HMAC_KEY.to_string()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let start = || Controller::start_with_args(dir.path(), &config, &env, &["--interval", "1s"]);
    let controller = start().await;
    let pinned = format!("{host}/acme/web:1.0@{}", pushed.manifest);
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&pinned));

    // Argo CD applies the pin; the kubelet cannot pull it: the next round finds it Failed.
    cannot_pull(&kube, "shop", &pinned);
    let paths = ["/services/T0/B0/slack-s3cret", "/workflows/teams", "/hook"];
    support::eventually("each receiver took the message on its second try", || {
        paths.iter().all(|p| receiver.received(p).len() >= 2)
    })
    .await;
    support::eventually_async("the three deliveries are counted", || async {
        let metrics = controller.metrics().await;
        ["slack", "msteams", "webhook"].iter().all(|kind| {
            metrics.contains(&format!(
                "tagpin_notifications_total{{kind=\"{kind}\",result=\"sent\"}} 1"
            ))
        })
    })
    .await;
    let digest = pushed.manifest.as_str();
    assert_slack(&retried_once(&receiver, paths[0]), digest);
    assert_teams(&retried_once(&receiver, paths[1]), digest);
    let hook = retried_once(&receiver, paths[2]);
    assert_cloudevent(&hook, digest, &repo.file_url());

    // Passes go on every second: two more of them tell nobody again.
    later_passes(&controller).await;
    let (code, log) = controller.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert!(
        !log.contains("slack-s3cret"),
        "a webhook URL's path is never logged:\n{log}"
    );
    assert!(!log.contains(ANSWER_MARKER), "{log}");
    assert_eq!(receiver.all().len(), 6, "{:#?}", receiver.all());

    // A new process on the same cache directory verifies the tip again, finds it Failed
    // again, and tells nobody: the ledger says it was told.
    let restarted = start().await;
    support::eventually_async("the restarted controller finds the tip Failed", || async {
        metric_sum(
            &restarted.metrics().await,
            "tagpin_verifications_total{verdict=\"failed\"",
        ) >= 1.0
    })
    .await;
    later_passes(&restarted).await;
    let (code, log) = restarted.stop().await;
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(receiver.all().len(), 6, "{:#?}\n{log}", receiver.all());
    assert!(dir.path().join("cache/tagpin-notified.json").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_tells_a_failed_verdict_once_over_https_from_the_url_in_its_secret() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "web").await;
    let image = format!("{host}/acme/web:1.0");
    let repo = BareRepo::create(&[("apps/web.yaml", &deployment("web", &image))]);
    let dir = tempfile::tempdir().unwrap();
    // The webhook over HTTPS (its CA given to the operator as the system's roots); Teams over
    // plain HTTP to 127.0.0.1, which --notify-allow-http names; Slack over plain HTTP to
    // `localhost`, which it does not: refused, never sent.
    let (secure, ca) = Receiver::start_tls(dir.path()).await;
    let plain = Receiver::start().await;
    let refused = plain.url("/refused").replace("127.0.0.1", "localhost");
    let kube = cluster().await;
    kube.apply(support::kube::secret(
        NS,
        "creds",
        &[support::kube::TAGPIN_SECRET],
        &[
            ("hook-url", &secure.url("/hook")),
            ("hook-key", HMAC_KEY),
            ("teams-url", &plain.url("/teams")),
            ("slack-url", &refused),
        ],
    ));
    kube.apply(pinned_repository(
        "web",
        json!({}),
        json!({
            "repository": {"url": repo.file_url(), "branch": "main"},
            "paths": ["apps"],
            "registries": {"insecure": [host]},
            "secret_ref": {"name": "creds"},
            "notifications": [
                {"kind": "webhook", "url_secret_key": "hook-url", "secret_key": "hook-key",
                 "events": ["failed"]},
                {"kind": "msteams", "url_secret_key": "teams-url", "events": ["failed"]},
                {"kind": "slack", "url_secret_key": "slack-url", "events": ["failed"]},
            ],
        }),
    ));
    let pinned = format!("{image}@{}", pushed.manifest);
    cannot_pull(&kube, "default", &pinned);
    let args = ["--notify-allow-http", "127.0.0.1", "--interval", "1s"];
    let env = [("SSL_CERT_FILE", ca.to_str().unwrap())];
    let operator = Operator::start_with_env(dir.path(), &kube, "op", &args, &env).await;
    support::eventually(
        "both receivers took the message on their second try",
        || secure.received("/hook").len() >= 2 && plain.received("/teams").len() >= 2,
    )
    .await;
    let hook = retried_once(&secure, "/hook");
    assert_cloudevent(
        &hook,
        &pushed.manifest,
        "/namespaces/team-a/pinnedrepositories/web",
    );
    assert_teams(&retried_once(&plain, "/teams"), &pushed.manifest);
    let series = |kind: &str, result: &str| {
        format!("tagpin_notifications_total{{kind=\"{kind}\",result=\"{result}\"}}")
    };
    support::eventually_async("the deliveries and the refusal are counted", || async {
        operator.metric(&series("webhook", "sent")).await == Some(1)
            && operator.metric(&series("msteams", "sent")).await == Some(1)
            && operator.metric(&series("slack", "refused")).await >= Some(1)
    })
    .await;
    // Later reconciles (one a second) send nothing more.
    let told = operator.reconciled_at("web").await.unwrap();
    support::eventually_async("two more reconciles of the object", || async {
        operator.reconciled_at("web").await >= Some(told + 2)
    })
    .await;
    assert_eq!(operator.metric(&series("webhook", "sent")).await, Some(1));
    let log = operator.stop().await;
    assert!(plain.received("/refused").is_empty());
    assert_eq!(secure.all().len(), 2, "{:#?}\n{log}", secure.all());
    assert_eq!(plain.all().len(), 2, "{:#?}\n{log}", plain.all());
    // Nothing a receiver says reaches the object's status or Events, nor the log.
    let object = kube.get("PinnedRepository", NS, "web").unwrap();
    assert!(!object.to_string().contains(ANSWER_MARKER), "{object}");
    let events = format!("{:?}", kube.events(NS));
    assert!(!events.contains(ANSWER_MARKER), "{events}");
    assert!(!log.contains(ANSWER_MARKER), "{log}");
}

/// Waits until `controller` has made two more passes (one a second).
async fn later_passes(controller: &Controller) {
    let passes = || async { metric_sum(&controller.metrics().await, "tagpin_passes_total") };
    let before = passes().await;
    support::eventually_async("two more passes", || async {
        passes().await >= before + 2.0
    })
    .await;
}

/// `tagpin sync` once with `config` and `env`, its cache in `dir/cache`; its exit code.
async fn sync(dir: &std::path::Path, config: &std::path::Path, env: &[(&str, &str)]) -> i32 {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["sync", "--config"])
        .arg(config)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("HOME", dir)
        .env_remove("DOCKER_CONFIG")
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run tagpin sync");
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!log.contains(ANSWER_MARKER), "{log}");
    output.status.code().unwrap_or(-1)
}

#[tokio::test]
async fn tagpin_sync_tells_its_pin_once_and_waits_for_the_message_before_it_exits() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let pushed = registry.push_image("acme/web", "1.0", "one").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let dir = tempfile::tempdir().unwrap();
    let config = crate::run::commit_mode_config(dir.path(), &repo, &host);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "notifications:\n  - {kind: webhook, url_env: HOOK_URL, secret_env: HOOK_KEY, events: [pinned, failed]}\n",
    );
    std::fs::write(&config, text).unwrap();
    let receiver = Receiver::start().await;
    let url = receiver.url("/hook");
    let env = [("HOOK_URL", url.as_str()), ("HOOK_KEY", HMAC_KEY)];

    assert_eq!(sync(dir.path(), &config, &env).await, 0);
    // Delivered, after its retry, before the process exited.
    let hook = retried_once(&receiver, "/hook");
    let event = hook.json();
    assert_eq!(event["type"], "dev.tagpin.pinned");
    assert_eq!(event["subject"], "main");
    assert_eq!(event["data"]["digest"], pushed.manifest);
    assert_eq!(event["data"]["commit"], repo.head("main").unwrap().as_str());
    // Nothing to pin the second time: nothing to tell.
    assert_eq!(sync(dir.path(), &config, &env).await, 0);
    assert_eq!(receiver.all().len(), 2, "{:#?}", receiver.all());
}
