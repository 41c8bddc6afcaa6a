//! The `tagpin` binary a benchmark starts: `$TAGPIN_BINARY`, else the release binary beside
//! the benchmark's own directory (`target/release/tagpin` for `target/release/examples/…`).

use std::path::{Path, PathBuf};

pub fn tagpin_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("TAGPIN_BINARY") {
        return PathBuf::from(binary);
    }
    let exe = std::env::current_exe().expect("this example's path");
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("tagpin"))
        .expect("target directory");
    assert!(
        binary.is_file(),
        "{} is missing: build it first with `cargo build --release --bin tagpin`",
        binary.display()
    );
    binary
}
