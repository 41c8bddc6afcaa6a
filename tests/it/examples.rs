//! What `examples/` shows a newcomer must keep working.

use std::path::Path;

/// The example configurations in `examples/config` are documentation; they must stay valid.
#[test]
fn the_example_configurations_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if let Err(e) = tagpin::config::Config::load(&path) {
            panic!("{e}");
        }
        seen.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    seen.sort();
    // One per forge's pull-request mode, and the commit-mode one.
    assert!(seen.len() >= 7, "{seen:?}");
    for forge in [
        "gitlab",
        "gitea",
        "bitbucket",
        "bitbucket-server",
        "azure-devops",
    ] {
        let name = format!("pull-request-mode-{forge}.yaml");
        assert!(seen.contains(&name), "{name} missing from {seen:?}");
    }
}
