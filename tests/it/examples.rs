//! What `examples/` shows a newcomer must keep working.

use std::path::Path;

/// The example configurations in `examples/config` are documentation; they must stay valid.
#[test]
fn the_example_configurations_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if let Err(e) = tagpin::config::Config::load(&path) {
            panic!("{e}");
        }
        seen += 1;
    }
    assert_eq!(seen, 5);
}
