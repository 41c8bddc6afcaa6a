//! Signed commits in promotions (issue #40), in the promotion world of `promote.rs`: every
//! commit of sync (commit and pull-request mode) and of promotions (by pull request and by
//! commit) verifies with the real `git verify-commit`, for both formats; and
//! `promotion.require_signed_by` refuses to promote from a stage whose pinning commit another
//! key, or none, signed, naming the commit and the signer.

use super::*;

use support::signing::{Format, TestKey, Trust};

impl World {
    /// `tagpin.yaml` as [`World::write_config`] writes it, with `author` (YAML), the top-level
    /// `mode`, production promoted in `production_mode`, and `promotion` entries before
    /// `stages:` (`require_signed_by`).
    fn write_signed_config(
        &self,
        author: &str,
        mode: &str,
        production_mode: &str,
        promotion: &str,
    ) {
        std::fs::write(
            self.config(),
            format!(
                "repository: {{url: '{}', branch: main}}\n\
                 mode: {mode}\n\
                 registries: {{insecure: ['{}']}}\n\
                 forge: {{api_url: '{}', owner: acme, repo: gitops, token_env: TAGPIN_GITHUB_TOKEN}}\n\
                 {author}\
                 promotion:\n{promotion}  stages:\n\
                 \x20 - name: staging\n    paths: [{}]\n    cluster: {}\n\
                 \x20 - name: production\n    paths: [{}]\n    cluster: {}\n    mode: {production_mode}\n",
                self.repo.file_url(),
                self.host,
                self.github.api_url(),
                self.layout.stage_path("staging"),
                self.cluster("staging"),
                self.layout.stage_path("production"),
                self.cluster("production"),
            ),
        )
        .unwrap();
    }
}

#[tokio::test]
async fn every_commit_of_sync_and_promotion_in_both_modes_verifies_with_git() {
    for format in Format::BOTH {
        let w = World::new(Layout::Plain, "0s").await;
        let key = TestKey::new(format, "tagpin@example.com");
        let author = key.author_yaml();
        let mut written = Vec::new();

        // Sync in commit mode, and a promotion by pull request.
        w.write_signed_config(&author, "commit", "pull-request", "");
        w.staging_pinned_and_converged().await;
        written.push(w.tip());
        w.first_promotion().await;
        written.push(w.repo.head(PR_BRANCH).unwrap());

        // A promotion by commit.
        w.write_signed_config(&author, "commit", "commit", "");
        let before = w.tip();
        let (code, report, out) = w.promote_json().await;
        assert_eq!(code, Some(0), "{format:?}: {}", text(&out));
        assert_eq!(report["outcome"]["outcome"], "committed", "{report:#}");
        assert_ne!(w.tip(), before);
        written.push(w.tip());

        // Sync in pull-request mode: a new digest proposed on tagpin's branch.
        w.write_signed_config(&author, "pull-request", "commit", "");
        w.registry
            .push_image("acme/web", WEB_NEW, "web-1.5.0-rebuilt")
            .await;
        let out = w.tagpin(&["sync"]).await;
        assert_eq!(out.status.code(), Some(0), "{format:?}: {}", text(&out));
        written.push(w.repo.head("tagpin/main").unwrap());

        Trust::of(&[&key]).assert_verified(w.repo.path(), &written);
        w.github.assert_no_violations();
    }
}

#[tokio::test]
async fn a_promotion_from_a_stage_another_key_or_nobody_signed_is_refused_by_name() {
    let w = World::new(Layout::Plain, "0s").await;
    let tagpin = TestKey::new(Format::Ssh, "tagpin@example.com");
    let other = TestKey::new(Format::OpenPgp, "ci@example.com");
    let require = |keys: &[&TestKey]| {
        let paths: Vec<String> = keys
            .iter()
            .map(|k| format!("'{}'", k.public_path().display()))
            .collect();
        format!("  require_signed_by: [{}]\n", paths.join(", "))
    };
    // Staging pinned by a tagpin signing with another key.
    w.write_signed_config(
        &other.author_yaml(),
        "commit",
        "commit",
        &require(&[&tagpin]),
    );
    w.staging_pinned_and_converged().await;
    let pinned_by_other = w.tip();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(1), "{}", text(&out));
    assert_eq!(report["gate"]["gate"], "open", "{report:#}");
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report:#}");
    let failure = failures[0].as_str().unwrap();
    for expected in [
        format!("stage staging: commit {pinned_by_other}, which pinned its digests"),
        format!("({})", tagpin.public_path().display()),
        "it is signed by OpenPGP key ".to_string(),
    ] {
        assert!(failure.contains(&expected), "{expected:?} in {failure}");
    }
    assert_eq!(w.tip(), pinned_by_other, "nothing promoted");

    // Listed, the same key lets the promotion through.
    w.write_signed_config(
        &other.author_yaml(),
        "commit",
        "commit",
        &require(&[&tagpin, &other]),
    );
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(0), "{}", text(&out));
    assert_eq!(report["outcome"]["outcome"], "committed", "{report:#}");

    // Staging pinned again by a commit nobody signed: refused, and said so.
    w.write_signed_config("", "commit", "commit", &require(&[&tagpin, &other]));
    let rebuilt = w.rebuild_web_and_sync().await;
    let unsigned = w.tip();
    w.runs_staging(&Pins {
        web: rebuilt,
        api: w.new.api.clone(),
    });
    let (code, report, out) = w.promote_json().await;
    assert_eq!(code, Some(1), "{}", text(&out));
    let failure = report["failures"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        failure.contains(&format!("commit {unsigned}, which pinned its digests"))
            && failure.contains("it is not signed"),
        "{report:#}"
    );
    assert_eq!(w.tip(), unsigned);
    w.github.assert_no_violations();
}
