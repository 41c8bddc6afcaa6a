//! Verdict notes on `refs/notes/tagpin` (issue #39, `src/git/notes.rs`), on a real bare
//! repository reached as a local path and over smart HTTP: a note is pushed as a fast-forward
//! of the remote's notes ref and never touches the branch; a writer that lost a race to
//! another one fetches again and keeps both notes' words.

use std::cell::Cell;

use crate::support;

use support::git::{git_ok, BareRepo, GitHttpServer, HttpAuth};
use tagpin::config::Author;
use tagpin::git::{Credentials, Mirror};

fn author() -> Author {
    Author {
        name: "tagpin-bot".into(),
        email: "bot@example.com".into(),
        signing: None,
    }
}

/// `existing` with `line` appended.
fn appended(existing: Option<&str>, line: &str) -> String {
    format!("{}{line}\n", existing.unwrap_or(""))
}

#[test]
fn a_note_is_pushed_beside_the_branch_and_a_lost_race_is_fetched_again_and_kept() {
    let base = tempfile::tempdir().unwrap();
    let http = GitHttpServer::start(base.path(), HttpAuth::None);
    for (name, over_http) in [("local.git", false), ("http.git", true)] {
        let repo = BareRepo::create_in(base.path(), name, &[("apps/web.yaml", "kind: List\n")]);
        let url = match over_http {
            true => http.url(repo.name()),
            false => repo.file_url(),
        };
        let caches = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = Mirror::open(caches.0.path(), &url, Credentials::None).unwrap();
        let b = Mirror::open(caches.1.path(), &url, Credentials::None).unwrap();
        a.fetch("main", "tagpin/").unwrap();
        b.fetch("main", "tagpin/").unwrap();
        let tip = a.tip("main").unwrap();
        let branch = repo.head("main").unwrap();

        a.add_note(tip, &author(), &|n| Some(appended(n, "converged")))
            .unwrap();
        // b writes; the first time it has read the remote's note, a writes another one
        // before b pushes: b's push is refused, and b reads and writes again.
        let raced = Cell::new(false);
        b.add_note(tip, &author(), &|n| {
            if !raced.replace(true) {
                a.add_note(tip, &author(), &|n| Some(appended(n, "failed")))
                    .unwrap();
            }
            Some(appended(n, "converged again"))
        })
        .unwrap();
        let shown = git_ok(
            repo.path(),
            &["notes", "--ref", "tagpin", "show", &tip.to_string()],
        );
        assert_eq!(shown, "converged\nfailed\nconverged again", "{url}");
        assert_eq!(
            repo.head("main").unwrap(),
            branch,
            "{url}: the branch moved"
        );
        // An edit that changes nothing writes nothing.
        let before = git_ok(repo.path(), &["rev-parse", "refs/notes/tagpin"]);
        a.add_note(tip, &author(), &|_| None).unwrap();
        assert_eq!(
            git_ok(repo.path(), &["rev-parse", "refs/notes/tagpin"]),
            before
        );
        // What another mirror reads back.
        let c = tempfile::tempdir().unwrap();
        let reader = Mirror::open(c.path(), &url, Credentials::None).unwrap();
        reader.fetch("main", "tagpin/").unwrap();
        reader.fetch_notes().unwrap();
        assert_eq!(
            reader.note(tip).as_deref(),
            Some("converged\nfailed\nconverged again\n"),
            "{url}"
        );
        assert_eq!(reader.notes().unwrap().len(), 1);
    }
}
