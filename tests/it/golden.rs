//! Golden tests for pinning: each `tests/fixtures/golden/<case>/original` tree, planned with the
//! digests of `resolutions.json`, must become `<case>/expected` byte for byte, and planning the
//! expected tree again must change nothing. The digests stand in for a registry's answers; the
//! scanner, planner and rewriter are tagpin's own, unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::shared_fixture;

use sha2::{Digest as _, Sha256};
use tagpin::manifest::{self, FileFilter};
use tagpin::plan::{self, ScannedFile};
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

fn files_under(root: &Path) -> Vec<PathBuf> {
    let listing = manifest::walk(&[root.to_path_buf()], &FileFilter::default());
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    listing.files
}

/// Plans one tree and returns each file's resulting bytes (unchanged files as they were).
fn pin_tree(
    root: &Path,
    resolutions: &BTreeMap<ResolveKey, ResolveResult>,
) -> Vec<(PathBuf, Vec<u8>)> {
    let mut scanned = Vec::new();
    let mut untouched = Vec::new();
    for path in files_under(root) {
        let source = std::fs::read(&path).unwrap();
        match manifest::scan(&path, &source) {
            Ok(outcome) if !outcome.fields.is_empty() => scanned.push(ScannedFile {
                path,
                source,
                fields: outcome.fields,
            }),
            _ => untouched.push((path, source)),
        }
    }
    let planned = plan::plan(&scanned, resolutions);
    assert!(
        planned.problems.is_empty(),
        "{}: {:?}",
        root.display(),
        planned.problems
    );
    let mut out = untouched;
    for file in scanned {
        let updated = planned
            .files
            .iter()
            .find(|f| f.path == file.path)
            .map(|f| f.updated.clone())
            .unwrap_or(file.source);
        out.push((file.path, updated));
    }
    out.into_iter()
        .map(|(p, bytes)| (p.strip_prefix(root).unwrap().to_path_buf(), bytes))
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
