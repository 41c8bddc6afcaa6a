//! The 16 MiB limit on a manifest holds before anything is read: a file in Git over it is
//! refused from its object header, naming the file, while the other manifests are pinned.

use crate::support;

use support::git::BareRepo;
use support::output_text as text;
use support::registry::{Mode, TestRegistry};

use crate::sync::{deployment, Run};

/// 17 MiB of YAML comment lines, no two alike, so the blob does not compress to nothing.
fn seventeen_mib_manifest() -> String {
    let mut text = String::with_capacity(17 * 1024 * 1024 + 64);
    let mut n: u64 = 0x9e37_79b9_7f4a_7c15;
    while text.len() < 17 * 1024 * 1024 {
        n ^= n << 13;
        n ^= n >> 7;
        n ^= n << 17;
        text.push_str(&format!(
            "# {n:016x}{:016x}{:016x}\n",
            n.rotate_left(21),
            !n
        ));
    }
    text
}

#[tokio::test]
async fn a_17_mib_manifest_in_git_is_refused_by_name_and_the_others_are_pinned() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let web = registry.push_image("acme/web", "1", "one").await;
    let web_yaml = deployment("web", &format!("{host}/acme/web:1"));
    let huge = seventeen_mib_manifest();
    let repo = BareRepo::create(&[("apps/web.yaml", &web_yaml), ("apps/huge.yaml", &huge)]);
    let run = Run::new();
    let config = run.config(&repo.file_url(), &host, "");

    let out = run.sync(&config, "cache");

    let all = text(&out);
    assert!(
        all.contains("apps/huge.yaml: file is 17825") && all.contains("16777216-byte limit"),
        "{all}"
    );
    assert_eq!(
        repo.read("main", "apps/web.yaml").unwrap(),
        deployment("web", &format!("{host}/acme/web:1@{}", web.manifest))
    );
}

#[tokio::test]
async fn a_blob_over_the_limit_is_refused_from_its_header_and_never_handed_out() {
    use tagpin::git::{Credentials, Mirror};
    use tagpin::manifest::{FileFilter, ManifestError, MAX_FILE_BYTES};
    use tagpin::render::Lookup;

    let huge = seventeen_mib_manifest();
    let repo = BareRepo::create(&[("apps/web.yaml", "kind: List\n"), ("apps/huge.yaml", &huge)]);
    let cache = tempfile::tempdir().unwrap();
    let mirror = Mirror::open(cache.path(), &repo.file_url(), Credentials::None).unwrap();
    mirror.fetch("main", "tagpin/").unwrap();
    let tip = mirror.tip("main").unwrap();

    let read = mirror
        .read_files(tip, &["apps".to_string()], &FileFilter::default())
        .unwrap();

    let names: Vec<_> = read
        .files
        .iter()
        .map(|f| f.path.display().to_string())
        .collect();
    assert_eq!(names, vec!["apps/web.yaml"]);
    match read.errors.as_slice() {
        [ManifestError::TooLarge { path, size, limit }] => {
            assert_eq!(path.display().to_string(), "apps/huge.yaml");
            assert_eq!(*size, huge.len() as u64);
            assert_eq!(*limit, MAX_FILE_BYTES);
        }
        other => panic!("expected one TooLarge error, got {other:?}"),
    }

    // The lookups of kustomize rendering read from the same tree, under the same limit.
    match mirror
        .read_path(tip, std::path::Path::new("apps/huge.yaml"))
        .unwrap()
    {
        Lookup::Refused(why) => assert!(
            why.contains("apps/huge.yaml") && why.contains("larger than"),
            "{why}"
        ),
        Lookup::File(bytes) => panic!("handed out {} bytes", bytes.len()),
        other => panic!("unexpected {other:?}"),
    }
}
