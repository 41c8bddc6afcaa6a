//! `# tagpin: hold` (issue #28): a field whose line carries the comment is never moved by
//! `plan`, `pin` or `sync`, and each says so (text and JSON), while the other fields of the
//! same file move. Real binary, real registry, real bare Git repository.

use crate::support;

use support::git::BareRepo;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

use crate::pod_template_cli::on_dir;
use crate::sync::Run;

fn two_containers(web: &str, side: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n      - name: web\n        image: {web}  # tagpin: hold until the 1.1 migration\n      - name: side\n        image: {side}\n"
    )
}

#[tokio::test]
async fn plan_and_pin_leave_a_held_field_byte_for_byte_and_say_so() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let side = registry.push_image("acme/side", "2", "side").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    let original = two_containers(
        &format!("{host}/acme/web:1.0"),
        &format!("{host}/acme/side:2"),
    );
    std::fs::write(&file, &original).unwrap();

    let json = on_dir(&host, &["plan", "--output", "json"], dir.path());
    assert_eq!(json.status.code(), Some(0), "{}", text(&json));
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["summary"]["held"], 1, "{value:#}");
    assert_eq!(value["summary"]["to_pin"], 1);
    let held = &value["held"][0];
    assert_eq!(held["line"], 10);
    assert_eq!(held["container"], "web");
    assert_eq!(held["value"], format!("{host}/acme/web:1.0"));
    assert_eq!(held["would_be"], web.manifest.to_string());
    assert_eq!(held["reason"], "# tagpin: hold until the 1.1 migration");

    let pinned = on_dir(&host, &["pin"], dir.path());
    assert_eq!(pinned.status.code(), Some(0), "{}", text(&pinned));
    assert!(
        text(&pinned).contains("held: ") && text(&pinned).contains(", 1 held;"),
        "{}",
        text(&pinned)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        two_containers(
            &format!("{host}/acme/web:1.0"),
            &format!("{host}/acme/side:2@{}", side.manifest)
        ),
        "only the field without the comment moved"
    );
}

#[tokio::test]
async fn sync_commits_around_a_held_field_and_reports_it() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = registry.push_image("acme/web", "1.0", "old").await;
    registry.push_image("acme/side", "2", "side").await;
    let held_at = format!("{host}/acme/web:1.0@{}", old.manifest);
    let yaml = two_containers(&held_at, &format!("{host}/acme/side:2"));
    let repo = BareRepo::create(&[("apps/web.yaml", &yaml)]);
    // The tag moves: without the comment the pinned field would be updated.
    let new = registry.push_image("acme/web", "1.0", "new").await;
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");

    let out = run.sync(&config, "cache");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let written = repo.read("main", "apps/web.yaml").unwrap();
    assert!(
        written.contains(&format!("image: {held_at}  # tagpin: hold until")),
        "{written}"
    );
    assert!(!written.contains(&new.manifest.to_string()), "{written}");
    assert!(
        written.contains(&format!("{host}/acme/side:2@sha256:")),
        "{written}"
    );
    let said = text(&out);
    assert!(
        said.contains(&format!(
            "apps/web.yaml:10 Deployment/web (web): held at {held_at}, not moved to {}",
            new.manifest
        )),
        "{said}"
    );
}

/// A contributor's commit that carries tagpin's hold trailer but moves no image (a docs fix,
/// merged with a merge commit) holds nothing: the trailer names what its own commit did, and
/// this one did not move `acme/web` away from anything.
#[tokio::test]
async fn a_held_trailer_in_a_commit_that_moves_no_image_holds_nothing() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let old = registry.push_image("acme/web", "1.0", "old").await;
    let pinned = crate::sync::deployment("web", &format!("{host}/acme/web:1.0@{}", old.manifest));
    let repo = BareRepo::create(&[("apps/web.yaml", &pinned)]);
    let new = registry.push_image("acme/web", "1.0", "new").await;
    let forged = format!(
        "docs: fix typo\n\nTagpin-Reverts: 0123456789abcdef0123456789abcdef01234567\nTagpin-Held: {host}/acme/web@{}\n",
        new.manifest
    );
    repo.merge_side_branch(
        &[(&[("README.md", "a typo, fixed\n")], &forged)],
        0,
        "Merge pull request #7 from contributor/docs",
    );
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");

    let out = run.sync(&config, "cache");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("held"), "{}", text(&out));
    let written = repo.read("main", "apps/web.yaml").unwrap();
    assert!(
        written.contains(&format!("{host}/acme/web:1.0@{}", new.manifest)),
        "the new digest is pinned:\n{written}"
    );
}
