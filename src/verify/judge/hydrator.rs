//! Argo CD's Source Hydrator, as an Application reports it.
//!
//! An Application with `spec.sourceHydrator` has no `spec.source`: people and tools edit the
//! *dry* source (`drySource`: repository, revision, path; kustomize overlays, Helm values), Argo
//! CD renders it and commits the plain manifests to a *hydrated* branch
//! (`syncSource.targetBranch`, under `syncSource.path`), or first to `hydrateTo.targetBranch`
//! for someone to review and move, and syncs the cluster from the hydrated branch. So the commit
//! it reports as applied (`status.sync.revision`) is a hydrated commit on another branch, which
//! never descends from the pin commit: what says whether the pin is applied is the dry commit
//! that hydrated commit was rendered from. Argo CD says it in `status.sourceHydrator` for its
//! last hydration ([`Hydration::dry_of_synced`]), and in the hydrated commit itself: the
//! `hydrator.metadata` file it writes at the root of the branch at every hydration, and beside
//! the manifests of each path it changed ([`HydratedCommit::metadata_files`], read by the
//! caller from the repository, parsed by [`metadata`]).
//!
//! Hydration is a step of its own, so its state is kept ([`Hydration::current`]): a dry
//! commit Argo CD is still hydrating, a hydration that failed (in Argo CD's words), a hydrated
//! commit waiting on the `hydrateTo` branch. Pure: nothing here reads Git or the cluster, and
//! nothing here judges; [`super::gitops`] does, with the rest of what Applications say.

use serde_json::Value;

/// The file Argo CD's commit server writes in a hydrated commit: at the root of the branch
/// (rewritten at every hydration) and in each hydrated path (rewritten when that path's
/// manifests change), a JSON object whose `drySha` is the dry commit.
pub(crate) const METADATA_FILE: &str = "hydrator.metadata";

/// The largest `hydrator.metadata` read: Argo CD writes a few hundred bytes (a commit message
/// body at most); anything much larger is not Argo CD's.
pub(crate) const MAX_METADATA_BYTES: usize = 64 * 1024;

/// `spec.sourceHydrator` and `status.sourceHydrator` of one Application, with the hydrated
/// commit it synced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hydration {
    /// `syncSource.targetBranch`: the hydrated branch Argo CD syncs from.
    pub sync_branch: String,
    /// `syncSource.path`, as written: where the hydrated manifests are on that branch.
    pub sync_path: String,
    /// `hydrateTo.targetBranch`: where Argo CD commits instead, for something else (a person
    /// merging a pull request, GitOps Promoter) to move the commit to the sync branch.
    pub hydrate_to: Option<String>,
    /// The hydrated commit the Application synced (`status.sync.revision`).
    pub synced: Option<String>,
    /// `status.sourceHydrator.currentOperation`: the hydration under way or last finished.
    pub current: Option<Operation>,
    /// `status.sourceHydrator.lastSuccessfulOperation`.
    pub last: Option<Hydrated>,
}

/// A hydrate operation (`currentOperation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    pub phase: Phase,
    /// The dry commit being hydrated; empty in the moment before Argo CD resolved the dry
    /// revision, and kept on failure when it got that far.
    pub dry: Option<String>,
    pub hydrated: Option<String>,
    /// Why it failed, in Argo CD's words (`Failed to hydrate revision "…": …`).
    pub message: Option<String>,
}

/// The phase of a hydrate operation (an enum of the CRD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Hydrating,
    Failed,
    Hydrated,
    /// A phase this version of tagpin does not know, as Argo CD wrote it.
    Other(String),
}

/// A successful hydration (`lastSuccessfulOperation`): the dry commit and the hydrated commit
/// Argo CD made of it (or found already holding it, when nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hydrated {
    pub dry: String,
    pub hydrated: String,
}

/// What `spec.sourceHydrator` says besides the hydration: the dry source, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrySource {
    pub url: String,
    pub path: String,
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn non_empty(value: &Value) -> Option<String> {
    value.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The dry source and hydration of an Application, listed as JSON; `None` when it has no
/// `spec.sourceHydrator`.
pub fn read(app: &Value) -> Option<(DrySource, Hydration)> {
    let spec = app["spec"]["sourceHydrator"].as_object()?;
    let status = &app["status"]["sourceHydrator"];
    let current = status["currentOperation"].as_object().map(|op| Operation {
        phase: match op.get("phase").and_then(Value::as_str).unwrap_or_default() {
            "Hydrating" => Phase::Hydrating,
            "Failed" => Phase::Failed,
            "Hydrated" => Phase::Hydrated,
            other => Phase::Other(other.to_string()),
        },
        dry: op.get("drySHA").and_then(non_empty),
        hydrated: op.get("hydratedSHA").and_then(non_empty),
        message: op.get("message").and_then(non_empty),
    });
    let last = &status["lastSuccessfulOperation"];
    let last = match (non_empty(&last["drySHA"]), non_empty(&last["hydratedSHA"])) {
        (Some(dry), Some(hydrated)) => Some(Hydrated { dry, hydrated }),
        _ => None,
    };
    let field = |section: &str, name: &str| {
        spec.get(section)
            .map(|s| text(&s[name]))
            .unwrap_or_default()
    };
    let dry = DrySource {
        url: field("drySource", "repoURL"),
        path: field("drySource", "path"),
    };
    let hydration = Hydration {
        sync_branch: field("syncSource", "targetBranch"),
        sync_path: field("syncSource", "path"),
        hydrate_to: spec
            .get("hydrateTo")
            .and_then(|h| non_empty(&h["targetBranch"])),
        synced: non_empty(&app["status"]["sync"]["revision"]),
        current,
        last,
    };
    Some((dry, hydration))
}

impl Hydration {
    /// The dry commit of the hydrated commit the Application synced, when its status pairs
    /// them: the last successful hydration made (or confirmed) that very commit.
    pub(crate) fn dry_of_synced(&self) -> Option<&str> {
        let synced = self.synced.as_deref()?;
        let last = self
            .last
            .iter()
            .filter(|h| h.hydrated == synced)
            .map(|h| h.dry.as_str());
        let current = self
            .current
            .iter()
            .filter(|op| op.phase == Phase::Hydrated && op.hydrated.as_deref() == Some(synced))
            .filter_map(|op| op.dry.as_deref());
        last.chain(current).next()
    }

    /// The hydrate operation, when it failed.
    pub fn failed(&self) -> Option<&Operation> {
        self.current.as_ref().filter(|op| op.phase == Phase::Failed)
    }

    /// Whether Argo CD is hydrating now.
    pub fn hydrating(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|op| op.phase == Phase::Hydrating)
    }

    /// The dry commits the status names, to ask the repository where they stand.
    pub(crate) fn dry_commits(&self) -> impl Iterator<Item = &str> {
        self.last
            .iter()
            .map(|h| h.dry.as_str())
            .chain(self.current.iter().filter_map(|op| op.dry.as_deref()))
    }

    /// The synced hydrated commit, when the status does not say its dry commit: the
    /// repository must ([`HydratedCommit::metadata_files`]).
    pub(crate) fn unresolved(&self) -> Option<HydratedCommit> {
        if self.dry_of_synced().is_some() {
            return None;
        }
        Some(HydratedCommit {
            commit: self.synced.clone()?,
            branch: self.sync_branch.clone(),
            path: self.sync_path.clone(),
        })
    }
}

/// A hydrated commit whose dry commit is read from the repository: the commit, and the branch
/// and path Argo CD hydrated it to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HydratedCommit {
    pub commit: String,
    pub branch: String,
    pub path: String,
}

impl HydratedCommit {
    /// Where the commit names its dry commit, first to last: the root `hydrator.metadata`,
    /// which every hydration rewrites (so it names the newest dry commit the commit holds),
    /// then the one beside the path's manifests, which only a change of them rewrites.
    pub(crate) fn metadata_files(&self) -> Vec<String> {
        let path = self.path.trim_start_matches("./").trim_matches('/');
        let mut files = vec![METADATA_FILE.to_string()];
        if !path.is_empty() && path != "." {
            files.push(format!("{path}/{METADATA_FILE}"));
        }
        files
    }
}

/// What a `hydrator.metadata` says about where its commit comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// `drySha`: the dry commit, lowercase.
    pub dry: String,
    /// `repoURL`: the dry source's repository, when written.
    pub repository: Option<String>,
}

/// Reads a `hydrator.metadata` (a JSON object, as Argo CD's commit server writes it: `drySha`,
/// `repoURL`, and the dry commit's author, date, subject, body and references). Keys are matched
/// regardless of case, as Go's `encoding/json` matches them when Argo CD and GitOps Promoter
/// read the file back (hand-written files often say `drySHA`). `None` for anything else: not
/// JSON, too large, no `drySha`, or one that is not a full commit id.
pub fn metadata(bytes: &[u8]) -> Option<Metadata> {
    if bytes.len() > MAX_METADATA_BYTES {
        return None;
    }
    let object: serde_json::Map<String, Value> = serde_json::from_slice(bytes).ok()?;
    let field = |name: &str| {
        object
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| value.as_str())
    };
    let dry = field("drySha")?;
    let full = (dry.len() == 40 || dry.len() == 64) && dry.bytes().all(|b| b.is_ascii_hexdigit());
    full.then(|| Metadata {
        dry: dry.to_ascii_lowercase(),
        repository: field("repoURL").map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn fixture(path: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/gitops")
            .join(path);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn application() -> Value {
        serde_yaml::from_slice(&fixture("argocd-application-hydrator.yaml")).unwrap()
    }

    #[test]
    fn the_documented_application_reads_as_its_dry_source_and_hydration() {
        let (dry, hydration) = read(&application()).unwrap();
        assert_eq!(
            dry,
            DrySource {
                url: "https://github.com/argoproj/argocd-example-apps".into(),
                path: "helm-guestbook".into(),
            }
        );
        assert_eq!(hydration.sync_branch, "environments/dev");
        assert_eq!(hydration.sync_path, "helm-guestbook");
        assert_eq!(
            hydration.hydrate_to.as_deref(),
            Some("environments/dev-next")
        );
        let current = hydration.current.as_ref().unwrap();
        assert_eq!(current.phase, Phase::Hydrated);
        assert_eq!(current.message, None, "an empty message is no message");
        assert_eq!(
            hydration.dry_of_synced(),
            Some("6cb951525937865dced818bbdd78c89b2d2b3045"),
            "the synced commit is the last one hydrated"
        );
        assert_eq!(hydration.unresolved(), None);
        assert!(!hydration.hydrating() && hydration.failed().is_none());
    }

    #[test]
    fn a_synced_commit_the_status_does_not_pair_is_read_from_the_repository() {
        let mut app = application();
        app["status"]["sync"]["revision"] = json!("0123456789012345678901234567890123456789");
        let (_, hydration) = read(&app).unwrap();
        assert_eq!(hydration.dry_of_synced(), None);
        let unresolved = hydration.unresolved().unwrap();
        assert_eq!(unresolved.branch, "environments/dev");
        assert_eq!(
            unresolved.metadata_files(),
            ["hydrator.metadata", "helm-guestbook/hydrator.metadata"]
        );
    }

    #[test]
    fn a_failed_hydration_keeps_argo_cds_words() {
        let mut app = application();
        app["status"]["sourceHydrator"]["currentOperation"] = json!({
            "phase": "Failed",
            "drySHA": "",
            "message": "Failed to hydrate revision \"\": failed to get relevant apps",
            "startedAt": "2025-06-09T17:50:20Z",
            "sourceHydrator": app["spec"]["sourceHydrator"].clone(),
        });
        let (_, hydration) = read(&app).unwrap();
        let failed = hydration.failed().unwrap();
        assert_eq!(failed.dry, None);
        assert_eq!(
            failed.message.as_deref(),
            Some("Failed to hydrate revision \"\": failed to get relevant apps")
        );
    }

    #[test]
    fn an_application_without_a_source_hydrator_has_none() {
        let plain: Value =
            serde_yaml::from_slice(&fixture("argocd-application-sock-shop.yaml")).unwrap();
        assert_eq!(read(&plain), None);
    }

    #[test]
    fn the_documented_metadata_names_its_dry_commit_and_repository() {
        let root = metadata(&fixture("argocd-hydrated-branch/hydrator.metadata")).unwrap();
        assert_eq!(root.dry, "6cb951525937865dced818bbdd78c89b2d2b3045");
        assert_eq!(
            root.repository.as_deref(),
            Some("https://git.example.com/owner/manifests-repo")
        );
        let path = metadata(&fixture(
            "argocd-hydrated-branch/helm-guestbook/hydrator.metadata",
        ))
        .unwrap();
        assert_eq!(path, root);
    }

    #[test]
    fn metadata_that_is_not_argo_cds_names_no_commit() {
        let sha = "6CB951525937865DCED818BBDD78C89B2D2B3045";
        assert_eq!(
            metadata(format!("{{\"drySHA\": \"{sha}\"}}").as_bytes()).map(|m| m.dry),
            Some(sha.to_lowercase()),
            "a hand-written drySHA, as Go reads it"
        );
        for bad in [
            "".to_string(),
            "not json".to_string(),
            "[\"drySha\"]".to_string(),
            "{\"drySha\": \"abc123\"}".to_string(),
            "{\"drySha\": \"HEAD\"}".to_string(),
            "{\"drySha\": 42}".to_string(),
            "{\"repoURL\": \"https://github.com/acme/gitops\"}".to_string(),
            format!(
                "{{\"drySha\": \"{sha}\", \"body\": \"{}\"}}",
                "x".repeat(MAX_METADATA_BYTES)
            ),
        ] {
            assert_eq!(metadata(bad.as_bytes()), None, "{bad:.60}");
        }
    }
}
