//! Golden tests for pinning: each `tests/fixtures/golden/<case>/original` tree, planned with the
//! digests of `resolutions.json`, must become `<case>/expected` byte for byte, and planning the
//! expected tree again must change nothing. The digests stand in for a registry's answers; the
//! scanner, planner and rewriter are tagpin's own, unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::shared_fixture;

use sha2::{Digest as _, Sha256};
use tagpin::manifest::FileFilter;
use tagpin::pipeline::{self, ImageSelection};
use tagpin::plan;
use tagpin::reference::{Digest, Reference};
use tagpin::registry::{ManifestKind, ResolveKey, ResolveResult, Resolved};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden")
}

/// `{ "nginx:1.27": "sha256:…" }` as the registry's answers, keyed the way a pass asks.
fn resolutions() -> BTreeMap<ResolveKey, ResolveResult> {
    let text = std::fs::read_to_string(corpus().join("resolutions.json")).unwrap();
    let table: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    let mut out: BTreeMap<ResolveKey, ResolveResult> = BTreeMap::new();
    for (image, digest) in table {
        let key = ResolveKey::of(&Reference::parse(&image).unwrap());
        let resolved = Resolved {
            digest: Digest::parse(&digest).unwrap(),
            kind: ManifestKind::Image,
            media_type: "application/vnd.oci.image.manifest.v1+json".to_string(),
        };
        if let Some(Ok(previous)) = out.get(&key) {
            assert_eq!(
                previous.digest, resolved.digest,
                "resolutions.json gives two digests for {key}"
            );
        }
        out.insert(key, Ok(resolved));
    }
    out
}

/// Plans one tree through the same pipeline as `plan`, `sync` and `verify`, and returns each
/// file's resulting bytes (unchanged files as they were).
fn pin_tree(
    root: &Path,
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
) -> Vec<(PathBuf, Vec<u8>)> {
    let gathered = pipeline::gather_working_tree(&[root.to_path_buf()], &FileFilter::default());
    let originals: Vec<(PathBuf, Vec<u8>)> = gathered
        .files
        .iter()
        .map(|f| (f.path.clone(), f.bytes.clone()))
        .collect();
    let scanned = pipeline::scan(gathered, &ImageSelection::default());
    assert!(
        scanned.errors.is_empty(),
        "{}: {:?}",
        root.display(),
        scanned.errors
    );
    let planned = plan::plan(&scanned.files, resolutions, &Default::default());
    assert!(
        planned.problems.is_empty(),
        "{}: {:?}",
        root.display(),
        planned.problems
    );
    originals
        .into_iter()
        .map(|(path, bytes)| {
            let updated = planned
                .files
                .iter()
                .find(|f| f.path == path)
                .map_or(bytes, |f| f.updated.clone());
            (path.strip_prefix(root).unwrap().to_path_buf(), updated)
        })
        .collect()
}

fn readable_diff(want: &[u8], got: &[u8]) -> String {
    similar::TextDiff::from_lines(
        String::from_utf8_lossy(want).as_ref(),
        String::from_utf8_lossy(got).as_ref(),
    )
    .unified_diff()
    .header("expected", "got")
    .to_string()
}

#[test]
fn every_golden_case_pins_byte_for_byte_and_is_idempotent() {
    let resolutions = resolutions();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 20, "only {} golden cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().unwrap().to_string_lossy();
        let expected_root = case.join("expected");
        for (rel, got) in pin_tree(&case.join("original"), &resolutions) {
            let want = std::fs::read(expected_root.join(&rel))
                .unwrap_or_else(|e| panic!("{name}: expected/{}: {e}", rel.display()));
            if got != want {
                failures.push(format!(
                    "{name}/{}:\n{}",
                    rel.display(),
                    readable_diff(&want, &got)
                ));
            }
        }
        for (rel, again) in pin_tree(&expected_root, &resolutions) {
            let want = std::fs::read(expected_root.join(&rel)).unwrap();
            if again != want {
                failures.push(format!(
                    "{name}/{}: a second pass changed it",
                    rel.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The golden OpenShift cases are verbatim copies of the real captures.
#[test]
fn the_openshift_cases_are_the_real_captures_unedited() {
    for (case, capture) in [
        (
            "openshift-deployment/original/deployment.yaml",
            "openshift-nginx-deployment.yaml",
        ),
        (
            "openshift-pod-list/original/pods.yaml",
            "openshift-nginx-pods.yaml",
        ),
    ] {
        let copy = std::fs::read(corpus().join(case)).unwrap_or_else(|e| panic!("{case}: {e}"));
        let capture = std::fs::read(shared_fixture(capture)).unwrap();
        assert!(copy == capture, "golden/{case} differs from the capture");
    }
}

/// `tests/fixtures/shared` holds copies of the real captures that must never be edited:
/// each file must still hash to what `SHA256SUMS` recorded when it was copied in.
#[test]
fn the_shared_captures_are_unedited_copies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shared");
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let mut checked = 0;
    for line in sums.lines().filter(|l| !l.trim().is_empty()) {
        let (want, name) = line
            .split_once("  ")
            .unwrap_or_else(|| panic!("SHA256SUMS: not `<hex>  <name>`: {line:?}"));
        let bytes = std::fs::read(shared_fixture(name)).unwrap();
        let got = format!("{:x}", Sha256::digest(&bytes));
        assert_eq!(got, want, "tests/fixtures/shared/{name} was edited");
        checked += 1;
    }
    assert_eq!(
        checked, 3,
        "SHA256SUMS lists {checked} captures, expected 3"
    );
}
