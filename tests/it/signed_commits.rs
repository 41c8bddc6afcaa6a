//! Signed commits (issue #40), with the real binary, a real registry, real bare repositories
//! and the real `git verify-commit`: every commit tagpin writes with `author.signing` is
//! accepted by git (SSH and OpenPGP alike), a branch that rejects unsigned commits accepts
//! tagpin's pushes, a key that cannot sign stops tagpin before it writes anything, and with
//! signing configured a trailer in a commit tagpin did not sign is not believed.
//!
//! The promotion side (a promotion's commits, pull-request mode, `require_signed_by`) is in
//! `promote/signed.rs`, beside the promotion world it uses.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::run::{metric_sum, Controller};
use crate::support;
use crate::sync::deployment;

use support::git::{BareRepo, GitHttpServer, HttpAuth};
use support::kube::KubeServer;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};
use support::signing::{Format, TestKey, Trust};
use support::workloads::LiveDeployment;

const PASSPHRASE_ENV: &str = "TAGPIN_TEST_SIGNING_PASSPHRASE";

/// `tagpin.yaml` in `dir` for `url`, pinning `apps/` from `host`, with `author` (YAML) and
/// `extra` top-level YAML.
fn config(dir: &Path, url: &str, host: &str, author: &str, extra: &str) -> PathBuf {
    let path = dir.join("tagpin.yaml");
    std::fs::write(
        &path,
        format!(
            "repository: {{url: '{url}', branch: main}}\npaths: [apps]\n\
             registries: {{insecure: ['{host}']}}\n{author}{extra}"
        ),
    )
    .unwrap();
    path
}

/// `tagpin sync` on `config`, its cache in `dir`, the passphrase in its variable.
fn sync(dir: &Path, config: &Path) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
        .args(["sync", "--config"])
        .arg(config)
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("HOME", dir)
        .env(PASSPHRASE_ENV, TestKey::PASSPHRASE)
        .env_remove("DOCKER_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tagpin")
}

/// `author:` signing with `key`, its passphrase in [`PASSPHRASE_ENV`].
fn encrypted_author(key: &TestKey) -> String {
    format!(
        "{}    passphrase_env: {PASSPHRASE_ENV}\n",
        key.author_yaml()
    )
}

#[tokio::test]
async fn a_branch_that_rejects_unsigned_commits_accepts_tagpins_signed_pins() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    for format in Format::BOTH {
        let repo = BareRepo::create(&[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )]);
        let key = TestKey::encrypted(format, "tagpin@example.com");
        let trust = Trust::of(&[&key]);
        repo.pre_receive(&trust.reject_unsigned_hook());
        let server = GitHttpServer::start(repo.base_dir(), HttpAuth::None);
        let url = server.url(repo.name());
        let dir = tempfile::tempdir().unwrap();
        let before = repo.head("main");

        // Unsigned, as tagpin wrote before: the branch refuses it.
        let unsigned = config(dir.path(), &url, &host, "", "");
        let out = sync(dir.path(), &unsigned);
        assert_ne!(out.status.code(), Some(0), "{format:?}: {}", text(&out));
        // (libgit2 does not pass on the hook's own message.)
        assert!(
            text(&out).contains("push to main was rejected: pre-receive hook declined"),
            "{format:?}: {}",
            text(&out)
        );
        assert_eq!(repo.head("main"), before);

        let signed = config(dir.path(), &url, &host, &encrypted_author(&key), "");
        let out = sync(dir.path(), &signed);
        assert_eq!(out.status.code(), Some(0), "{format:?}: {}", text(&out));
        let tip = repo.head("main").unwrap();
        assert_ne!(Some(&tip), before.as_ref(), "{format:?}");
        assert!(repo
            .read("main", "apps/web.yaml")
            .unwrap()
            .contains(&web.manifest.to_string()));
        trust.assert_verified(repo.path(), &[tip]);
    }
}

#[tokio::test]
async fn a_key_that_cannot_sign_stops_sync_before_anything_is_written_naming_the_field() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    registry.push_image("acme/web", "1.0", "web").await;
    let repo = BareRepo::create(&[(
        "apps/web.yaml",
        &deployment("web", &format!("{host}/acme/web:1.0")),
    )]);
    let before = repo.head("main");
    let ssh = TestKey::encrypted(Format::Ssh, "tagpin@example.com");
    let pgp = TestKey::encrypted(Format::OpenPgp, "tagpin@example.com");
    let dir = tempfile::tempdir().unwrap();
    // An algorithm tagpin reads but does not sign with (ECDSA P-521), made by ssh-keygen.
    let p521 = dir.path().join("id_ecdsa_p521");
    let made = std::process::Command::new("ssh-keygen")
        .args([
            "-q", "-t", "ecdsa", "-b", "521", "-N", "", "-C", "p521", "-f",
        ])
        .arg(&p521)
        .output()
        .expect("run ssh-keygen (is openssh-client installed?)");
    assert!(made.status.success(), "{}", text(&made));
    let cases = [
        (
            // An algorithm that cannot sign here.
            ssh.author_yaml().replace(
                &ssh.private_path().display().to_string(),
                &p521.display().to_string(),
            ),
            "author.signing.key_file: the key cannot sign: ",
        ),
        (
            // The wrong passphrase.
            format!(
                "{}    passphrase_env: TAGPIN_TEST_WRONG\n",
                pgp.author_yaml()
            ),
            "author.signing.passphrase_env: the passphrase does not decrypt the key",
        ),
        (
            // None at all.
            ssh.author_yaml(),
            "author.signing.passphrase_env: the key is encrypted and no passphrase is given",
        ),
        (
            // An SSH key where OpenPGP is said.
            encrypted_author(&ssh).replace("format: ssh", "format: openpgp"),
            "author.signing.key_file: not an ASCII armoured OpenPGP secret key",
        ),
        (
            // A public key is no signing key.
            encrypted_author(&ssh).replace(
                &ssh.private_path().display().to_string(),
                &ssh.public_path().display().to_string(),
            ),
            "author.signing.key_file: not an OpenSSH private key",
        ),
    ];
    for (author, expected) in cases {
        let config = config(dir.path(), &repo.file_url(), &host, &author, "");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tagpin"))
            .args(["sync", "--config"])
            .arg(&config)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("HOME", dir.path())
            .env("TAGPIN_TEST_WRONG", "not the passphrase")
            .env(PASSPHRASE_ENV, TestKey::PASSPHRASE)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert_ne!(out.status.code(), Some(0), "{expected}: {}", text(&out));
        assert!(text(&out).contains(expected), "{expected}: {}", text(&out));
        assert!(
            !text(&out).contains(TestKey::PASSPHRASE) && !text(&out).contains("PRIVATE KEY"),
            "{}",
            text(&out)
        );
        assert_eq!(repo.head("main"), before, "{expected}");
    }
}

/// A person's commit moves `acme/web` from the digest its tag points to back to an older one
/// and carries a `Tagpin-Held` trailer for the digest it moved away from, as a revert of
/// tagpin's does. Without signing, the trailer is believed (the commit's own change backs
/// it) and the digest is held; with `author.signing`, the commit is not signed with tagpin's
/// key, so the trailer holds nothing and the tag's digest is pinned again.
#[tokio::test]
async fn a_forged_hold_trailer_in_an_unsigned_commit_is_ignored_when_signing_is_configured() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = registry.push_image("acme/web", "1.0", "old").await;
    let current = registry.push_image("acme/web", "1.0", "current").await;
    let at = |digest: &str| deployment("web", &format!("{host}/acme/web:1.0@{digest}"));
    let repo = BareRepo::create(&[("apps/web.yaml", &at(&current.manifest.to_string()))]);
    let forged = format!(
        "Roll web back\n\nTagpin-Held: {host}/acme/web@{}\n",
        current.manifest
    );
    repo.commit_as_other_writer(
        "main",
        &[("apps/web.yaml", &at(&old.manifest.to_string()))],
        &forged,
    );
    let rolled_back = repo.head("main").unwrap();
    let key = TestKey::new(Format::Ssh, "tagpin@example.com");

    // Without signing: the trailer is believed, and nothing is pinned.
    let dir = tempfile::tempdir().unwrap();
    let unsigned = config(dir.path(), &repo.file_url(), &host, "", "");
    let out = sync(dir.path(), &unsigned);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("held at"), "{}", text(&out));
    assert_eq!(repo.head("main").as_deref(), Some(rolled_back.as_str()));

    let signed = config(dir.path(), &repo.file_url(), &host, &key.author_yaml(), "");
    let out = sync(dir.path(), &signed);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("held at"), "{}", text(&out));
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        at(&current.manifest.to_string()),
        "the tag's digest is pinned again"
    );
    Trust::of(&[&key]).assert_verified(repo.path(), &[repo.head("main").unwrap()]);
}

/// `tagpin run` with `on_failure: revert`, signing: the pin and its revert both verify with
/// git, and the hold the signed revert carries is honoured by the passes after it (the failed
/// digest is not pinned again).
#[tokio::test(flavor = "multi_thread")]
async fn a_signed_pin_and_its_signed_revert_verify_with_git_and_the_revert_holds() {
    for format in Format::BOTH {
        let registry = TestRegistry::start(Mode::Plain).await;
        let host = registry.host();
        let good = registry.push_image("acme/web", "1.0", "good").await;
        let before = deployment("web", &format!("{host}/acme/web:1.0@{}", good.manifest));
        let repo = BareRepo::create(&[("apps/web.yaml", &before)]);
        let bad = registry.push_image("acme/web", "1.0", "bad").await;
        let bad_ref = format!("{host}/acme/web:1.0@{}", bad.manifest);
        let kube = KubeServer::start().await;
        let live = LiveDeployment::new("shop", "web").container("app", &bad_ref);
        live.apply(&kube);
        live.pod("web-1").waiting(
            &kube,
            "ImagePullBackOff",
            &format!("Back-off pulling image \"{bad_ref}\""),
        );
        let key = TestKey::new(format, "tagpin@example.com");
        let dir = tempfile::tempdir().unwrap();
        let config = config(
            dir.path(),
            &repo.file_url(),
            &host,
            &key.author_yaml(),
            "verify: {default_namespace: shop, on_failure: revert}\n",
        );
        let kubeconfig = kube.kubeconfig(dir.path());
        let base = repo.log("main").len();
        let controller = Controller::start_with_args(
            dir.path(),
            &config,
            &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
            &["--interval", "2s"],
        )
        .await;

        let reverted = support::eventually_or("the pin and its revert", || {
            repo.log("main")
                .first()
                .is_some_and(|(_, subject)| subject.starts_with("Revert pin of 1 image(s): "))
        })
        .await;
        assert!(reverted, "{format:?}: {:?}", repo.log("main"));
        let passes = |metrics: &str| metric_sum(metrics, "tagpin_passes_total{");
        let now = passes(&controller.metrics().await);
        support::eventually_async("two more passes", || async {
            passes(&controller.metrics().await) >= now + 2.0
        })
        .await;
        let (code, log) = controller.stop().await;
        assert_eq!(code, Some(0), "{log}");
        let commits = repo.log("main");
        assert_eq!(
            commits.len(),
            base + 2,
            "one pin, one revert, then nothing: {commits:?}"
        );
        assert_eq!(repo.read("main", "apps/web.yaml").unwrap(), before);
        let written: Vec<String> = commits[..2].iter().map(|(sha, _)| sha.clone()).collect();
        Trust::of(&[&key]).assert_verified(repo.path(), &written);
    }
}

/// A `PinnedRepository` signs with the key of its `secret_ref` Secret: a wrong passphrase
/// there stalls the object naming the field (nothing pushed), and once the Secret is
/// rotated the pin lands on a branch that rejects unsigned commits, and git verifies it.
#[tokio::test(flavor = "multi_thread")]
async fn a_pinned_repository_signs_with_the_key_of_its_secret() {
    use crate::operator::{cluster, condition, is_ready, pinned_repository, runs_converged};
    use crate::operator::{Operator, NS};
    use serde_json::json;

    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "one").await;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::create_in(
        base.path(),
        "gitops.git",
        &[(
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        )],
    );
    let key = TestKey::encrypted(Format::OpenPgp, "tagpin@example.com");
    let trust = Trust::of(&[&key]);
    repo.pre_receive(&trust.reject_unsigned_hook());
    let server = GitHttpServer::start(base.path(), HttpAuth::None);
    let kube = cluster().await;
    runs_converged(&kube, "web", &format!("{host}/acme/web:1.0"), &web.manifest);
    let private = key.private_text();
    kube.apply(support::kube::secret(
        NS,
        "git-creds",
        &[support::kube::TAGPIN_SECRET],
        &[
            ("signing-key", &private),
            ("signing-passphrase", "not the passphrase"),
        ],
    ));
    let spec = json!({
        "repository": {"url": server.url("gitops.git"), "branch": "main"},
        "paths": ["apps"],
        "registries": {"insecure": [host]},
        "author": {"email": key.email, "signing": {
            "format": "openpgp", "key_file": "signing-key", "passphrase_env": "signing-passphrase",
        }},
        "secret_ref": {"name": "git-creds"},
    });
    kube.apply(pinned_repository("web", json!({}), spec));
    let before = repo.head("main");
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    support::eventually("the wrong passphrase stalls the object", || {
        condition(&kube, "web", "Stalled").is_some_and(|c| c["reason"] == "InvalidSpec")
    })
    .await;
    let message = condition(&kube, "web", "Stalled").unwrap()["message"].to_string();
    assert!(
        message.contains(
            "spec.author.signing.passphrase_env: the passphrase does not decrypt the key"
        ),
        "{message}"
    );
    assert!(!message.contains("not the passphrase"), "{message}");
    assert_eq!(repo.head("main"), before, "nothing pushed");

    kube.rotate_secret(
        NS,
        "git-creds",
        &[
            ("signing-key", &private),
            ("signing-passphrase", TestKey::PASSPHRASE),
        ],
    );
    support::eventually("the signed pin lands", || is_ready(&kube, "web")).await;
    let tip = repo.head("main").unwrap();
    assert_ne!(Some(&tip), before.as_ref());
    assert!(repo
        .read("main", "apps/web.yaml")
        .unwrap()
        .contains(&web.manifest.to_string()));
    trust.assert_verified(repo.path(), &[tip]);
    let log = operator.stop().await;
    assert!(!log.contains(TestKey::PASSPHRASE) && !log.contains("PRIVATE KEY"));
}
