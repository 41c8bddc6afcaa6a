//! The configuration's types, as `tagpin.yaml` and a `PinnedRepository` spec describe them
//! once validated, with their defaults and the rules of the names and durations they hold.
//! Read and validated by the parent module ([`super::Config::parse`]).

use std::path::{Component, Path, PathBuf};

pub use super::choices::{Grouping, NotifyKind, OnFailure, Order, SigningFormat, WriteMode};

/// A validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub repository: Repository,
    pub author: Author,
    /// Directories or files to scan, relative to the repository root.
    pub paths: Vec<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub images: ImageRules,
    pub registries: Registries,
    pub mode: WriteMode,
    pub commit_message: String,
    pub pull_request: PullRequest,
    pub forge: Option<Forge>,
    pub verify: Verify,
    /// `promotion.stages`, when the repository promotes between environments. With it,
    /// [`Config::paths`] is the first stage's paths: `sync` pins only that stage from the
    /// registry, and every later stage is only ever promoted (see [`crate::promote`]).
    pub promotion: Option<Promotion>,
    /// `helm:`: Helm values files and how digests are written into image blocks.
    pub helm: Helm,
    /// A `PinnedRepository`'s `secret_ref`: the Secret of its namespace whose keys the
    /// `*_env` fields (and `repository.auth.ssh_key_file`) name. Always `None` from a file.
    pub secret_ref: Option<String>,
    /// A `PinnedRepository`'s `service_account_name`: the ServiceAccount of its namespace that
    /// the operator impersonates to read the cluster for it. Always `None` from a file.
    pub service_account_name: Option<String>,
    /// `notifications:`: where events are told (see [`crate::notify`]); empty: nowhere.
    pub notifications: Vec<Notification>,
}

/// One `notifications` entry: where to tell which events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub kind: NotifyKind,
    /// Where the URL is read: `url_env` (a file) or `url_secret_key` (a `PinnedRepository`).
    /// The URL itself is a secret (a Slack or Teams webhook's path is its credential), so
    /// the configuration only names where it is.
    pub url: SecretName,
    /// `kind: webhook` only: where the HMAC-SHA256 key is read (`secret_env` or `secret_key`);
    /// `None`: the body is not signed.
    pub secret: Option<SecretName>,
    /// The kinds of event told, at least one.
    pub events: Vec<crate::event::EventKind>,
    /// The stages told about; empty: every stage.
    pub stages: Vec<String>,
}

/// Where a secret is read: an environment variable (a file's `*_env`), or a key of the
/// `secret_ref` Secret (a `PinnedRepository`'s `*_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretName {
    Env(String),
    SecretKey(String),
}

/// Whether `name` is a DNS-1123 label (at most 63 lowercase letters, digits and '-', starting
/// and ending with a letter or digit): what a ServiceAccount's name must be for tagpin, which
/// puts it in a user name (`system:serviceaccount:<namespace>:<name>`).
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Why `name` is refused as a ServiceAccount name (see [`is_dns_label`]).
pub fn not_a_service_account(name: &str) -> String {
    format!(
        "{name:?} is not a ServiceAccount name (a DNS-1123 label: at most 63 lowercase letters, \
         digits and '-', starting and ending with a letter or digit)"
    )
}

/// How tagpin reads and writes Helm values (see [`crate::manifest::helm`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Helm {
    /// Globs naming values files beyond `values.yaml`, `values-*.yaml` and `values.*.yaml`,
    /// relative to a scanned directory (`envs/*/overrides.yaml`).
    pub values_files: Vec<String>,
    /// Where a digest goes in an image block without a `digest:` key: into the tag
    /// (`1.2.3@sha256:…`, the default) or a new `digest:` line after it.
    pub digest: crate::manifest::DigestMode,
}

impl Helm {
    /// The scanner's options; validation compiled the globs once already.
    pub fn options(&self) -> Result<crate::manifest::HelmOptions, crate::manifest::ManifestError> {
        crate::manifest::HelmOptions::new(&self.values_files, self.digest)
    }
}

impl Config {
    /// The include globs to walk: the configured ones plus `helm.values_files`, so a values
    /// file the configuration names is read even when `include:` would not list it. Empty when
    /// `include:` is, which means every YAML file.
    pub fn include_globs(&self) -> Vec<String> {
        if self.include.is_empty() {
            return Vec::new();
        }
        self.include
            .iter()
            .chain(&self.helm.values_files)
            .cloned()
            .collect()
    }

    /// `images.minimum_age` as `(match, age)` pairs, in order: what
    /// [`crate::age::MinimumAges::compile`] takes.
    pub fn minimum_ages(&self) -> impl Iterator<Item = (&str, std::time::Duration)> {
        self.images
            .minimum_age
            .iter()
            .map(|rule| (rule.matches.as_str(), rule.age))
    }
}

/// Where a configuration comes from. Both are read by the same types and the same validator;
/// they differ only in where secrets and local files come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `tagpin.yaml`: secrets in environment variables, files on this machine.
    File,
    /// A `PinnedRepository`'s spec: secrets in Secrets of its namespace, nothing from the
    /// controller's disk or environment.
    Resource,
}

/// Environments in promotion order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promotion {
    /// At least two; names unique; paths of different stages never overlap.
    pub stages: Vec<Stage>,
    /// `require_signed_by`: public keys (SSH or OpenPGP), as written with their contents, one
    /// of which must have signed the commit that pinned a stage's digests for them to be
    /// promoted from it. Empty: no such gate. In a `PinnedRepository` each names a key of
    /// the `secret_ref` Secret, read by the operator (contents empty until then).
    pub require_signed_by: Vec<SignatureFile>,
}

impl Promotion {
    /// The stage called `name`.
    pub fn stage(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.name == name)
    }

    /// The stage `name` is promoted from: the one before it. `None` for the first stage and
    /// for names that are not stages.
    pub fn source_of(&self, name: &str) -> Option<&Stage> {
        let i = self.stages.iter().position(|s| s.name == name)?;
        i.checked_sub(1).map(|i| &self.stages[i])
    }
}

/// One environment: where its manifests are, how to reach its cluster, and how promotions
/// into it are gated and written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Lowercase letters, digits, `-`, `_` and `.`: it names a branch and a status context.
    pub name: String,
    /// Directories or files of this stage, relative to the repository root.
    pub paths: Vec<String>,
    pub cluster: ClusterTarget,
    /// How long the previous stage must have stayed Converged before its digests come here.
    /// Zero for the first stage (it is pinned from the registry, not promoted).
    pub soak: std::time::Duration,
    /// With a soak: how many container restarts (of the pods on the digests the previous stage
    /// pins) the soak tolerates; one more starts it again. `None`: restarts are not counted.
    pub soak_restarts: Option<u32>,
    /// What a Failed verdict on a promotion into this stage calls for; `None`: as
    /// `verify.on_failure` says.
    pub on_failure: Option<OnFailure>,
    /// How promotions into this stage are written (`pull-request` unless set). The first
    /// stage takes none: it is the top-level `mode`, with which sync writes its pins.
    pub mode: WriteMode,
}

/// How tagpin reaches a cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ClusterTarget {
    /// As kube does by default: the kubeconfig's current context, else in-cluster.
    #[default]
    Default,
    /// A context of the default kubeconfig (`$KUBECONFIG`, else `~/.kube/config`).
    Context(String),
    /// A kubeconfig file, with its current context unless one is named.
    Kubeconfig {
        path: PathBuf,
        context: Option<String>,
    },
    /// The service account of the pod tagpin runs in.
    InCluster,
    /// A kubeconfig held in a key of a Secret of a `PinnedRepository`'s namespace; the
    /// operator reads it and hands on a [`ClusterTarget::Kubeconfig`].
    KubeconfigSecret { name: String, key: String },
}

impl std::fmt::Display for ClusterTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterTarget::Default => f.write_str("the default kubeconfig context"),
            ClusterTarget::Context(name) => write!(f, "kubeconfig context {name:?}"),
            ClusterTarget::Kubeconfig {
                path,
                context: None,
            } => write!(f, "kubeconfig {}", path.display()),
            ClusterTarget::Kubeconfig {
                path,
                context: Some(name),
            } => write!(f, "context {name:?} of kubeconfig {}", path.display()),
            ClusterTarget::InCluster => f.write_str("the in-cluster service account"),
            ClusterTarget::KubeconfigSecret { name, key } => {
                write!(f, "the kubeconfig in key {key:?} of Secret {name}")
            }
        }
    }
}

/// How `tagpin verify` finds the live objects a manifest describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verify {
    /// The namespace of manifests that name none.
    pub default_namespace: String,
    /// Added around manifest names when a GitOps tool renames objects (kustomize `namePrefix`).
    pub name_prefix: String,
    pub name_suffix: String,
    /// The kubeconfig context to use; default: the current one, or in-cluster.
    pub context: Option<String>,
    /// The Argo CD Applications and Flux Kustomizations that apply the pins, when they are
    /// named rather than found (see `verify::judge::gitops`).
    pub gitops: GitOpsObjects,
    /// What a landed change whose verdict is Failed and final calls for.
    pub on_failure: OnFailure,
}

/// Argo CD Applications and Flux Kustomizations named in `verify.gitops`. Both empty (the
/// default): tagpin finds the objects whose source is the configured repository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitOpsObjects {
    pub applications: Vec<ObjectName>,
    pub kustomizations: Vec<ObjectName>,
}

impl GitOpsObjects {
    pub fn is_empty(&self) -> bool {
        self.applications.is_empty() && self.kustomizations.is_empty()
    }
}

/// A namespaced object, written `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectName {
    pub namespace: String,
    pub name: String,
}

impl ObjectName {
    /// `namespace/name`, both parts non-empty.
    pub fn parse(text: &str) -> Option<ObjectName> {
        let (namespace, name) = text.trim().split_once('/')?;
        let valid = |part: &str| !part.is_empty() && !part.contains('/');
        (valid(namespace) && valid(name)).then(|| ObjectName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    /// `https://…`, `ssh://…`, `git@host:path`, `git://…`, `file://…` or a local path.
    pub url: String,
    /// The branch tagpin pins (commit mode) or targets with pull requests.
    pub branch: String,
    pub auth: GitAuth,
    /// Where the local mirror lives; default under the user's cache directory.
    pub cache_dir: Option<PathBuf>,
}

/// How tagpin authenticates to the Git remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitAuth {
    None,
    /// HTTPS with a token as the password; the token is read from this environment variable.
    Token {
        env: String,
        username: String,
    },
    /// SSH with a private key file (and optionally a passphrase from an environment variable).
    SshKey {
        key_file: PathBuf,
        passphrase_env: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
    /// `author.signing`: every commit tagpin writes is signed with this key.
    pub signing: Option<Signing>,
}

/// `author.signing`: the key tagpin signs its commits with, and where it is read from. Read
/// and tried (it must sign) before anything is written: see [`crate::sync::commit_signer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signing {
    pub format: SigningFormat,
    pub key: SigningKey,
    /// The environment variable (a key of the Secret, in a `PinnedRepository`) holding the
    /// key's passphrase, when it is encrypted.
    pub passphrase_env: Option<String>,
}

/// Where the private signing key is read from: a file (`key_file`) or an environment
/// variable (`key_env`); in a `PinnedRepository` both name a key of the `secret_ref` Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigningKey {
    File(PathBuf),
    Env(String),
}

impl SigningKey {
    /// The field it was set by, for messages.
    pub fn field(&self) -> &'static str {
        match self {
            SigningKey::File(_) => "author.signing.key_file",
            SigningKey::Env(_) => "author.signing.key_env",
        }
    }
}

/// Which image references tagpin manages, as globs over the normalized name
/// (`docker.io/library/nginx`, `ghcr.io/acme/*`). Empty `manage` means all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageRules {
    pub manage: Vec<String>,
    pub ignore: Vec<String>,
    /// How each image's tag may move (`images.policies`); the first matching entry wins, and
    /// an image no entry matches keeps its tag (see [`crate::policy`]).
    pub policies: Vec<PolicyRule>,
    /// Which images need a valid signature (cosign or Notation) before a digest of theirs is
    /// pinned (`images.signatures`); the first matching entry applies, and an image no entry
    /// matches is not checked (see [`crate::signature`]).
    pub signatures: Vec<SignatureRule>,
    /// How old a digest of an image must be before it is pinned (`images.minimum_age`); the
    /// first matching entry applies, with the same matching as `images.signatures` (see
    /// [`crate::age`]).
    pub minimum_age: Vec<MinimumAgeRule>,
    /// Which images need a signed SLSA provenance attestation naming an accepted builder and
    /// source before a digest of theirs is pinned (`images.provenance`); the first matching
    /// entry applies, with the same matching as `images.signatures` (see [`crate::provenance`]).
    pub provenance: Vec<ProvenanceRule>,
}

/// One `images.provenance` entry: a glob over the image name (matched as `images.signatures`
/// entries are), the builder and source a provenance attestation must name, and who may sign
/// the attestation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenanceRule {
    pub matches: String,
    /// A regex over the predicate's builder id, anchored at both ends when compiled.
    pub builder_id: String,
    /// The source repository's URI, compared exactly (`https://github.com/acme/web`); a
    /// `git+` prefix and a `.git` suffix in the attestation are not part of it.
    pub source_repository: String,
    /// A regex over the source ref (`refs/tags/v.*`), anchored; `None` accepts any ref.
    pub source_ref: Option<String>,
    /// Who may sign the attestation: `keys`, `keyless` and `trusted_root` as an
    /// `images.signatures` entry has them (its `matches` is this entry's).
    pub signers: SignatureRule,
}

/// One `images.minimum_age` entry: a glob over the image name (matched as `images.signatures`
/// entries are) and how old a digest of the images it matches must be before it is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinimumAgeRule {
    pub matches: String,
    pub age: std::time::Duration,
}

// The signature rule types (`SignatureRule`, `NotationRule`, `SignatureKey`, `SignatureFile`,
// `KeylessIdentity`) live with the gate that reads them, in `crate::signature::rules`; they
// are part of the configuration's vocabulary, so `config` names them too.
pub use crate::signature::rules::{
    KeylessIdentity, NotationRule, SignatureFile, SignatureKey, SignatureRule,
};

/// One `images.policies` entry: a glob over the image name (as written or normalized) and the
/// policy of the images it matches. Kept as text here; [`crate::policy::Policies::compile`]
/// compiles it (validation has already compiled it once, so that cannot fail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRule {
    pub matches: String,
    pub policy: TagPolicy,
}

/// How a tag may move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagPolicy {
    /// Keep the tag written, pin its digest: tagpin's behaviour without policies.
    Digest,
    /// The highest tag satisfying a semver range (`~1.4`, `>=2, <3`).
    Semver { range: String },
    /// The highest tag matching a regex, compared by the value `extract` makes of it.
    Pattern {
        pattern: String,
        extract: String,
        order: Order,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registries {
    pub insecure: Vec<String>,
    pub ca_files: Vec<PathBuf>,
    pub docker_config: Option<PathBuf>,
    /// A `PinnedRepository`'s `docker_config_secret_ref`: a `kubernetes.io/dockerconfigjson`
    /// Secret of its namespace. Always `None` from a file.
    pub docker_config_secret: Option<String>,
    pub concurrency: usize,
    pub timeout_seconds: u64,
    /// How long one pass waits for any one image (see `registry::Settings::resolve_budget`).
    pub budget_seconds: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub grouping: Grouping,
    pub title: String,
    pub labels: Vec<String>,
    pub branch_prefix: String,
}

/// The `forge:` section, and which forge it names: the forge's own settings, read and checked
/// there (each adapter validates the keys of its kind, [`crate::forge::settings`]).
pub use crate::forge::settings::{Kind as ForgeKind, Settings as Forge};

/// Placeholders the commit message and PR title templates may use.
pub const TEMPLATE_PLACEHOLDERS: [&str; 3] = ["{count}", "{branch}", "{images}"];

pub(super) const DEFAULT_COMMIT_MESSAGE: &str = "Pin {count} image(s) to digests on {branch}";
pub(super) const DEFAULT_PR_TITLE: &str = "Pin {count} image(s) to digests";
pub(super) const DEFAULT_BRANCH_PREFIX: &str = "tagpin/";
pub(super) const DEFAULT_AUTHOR_NAME: &str = "tagpin";
pub(super) const DEFAULT_AUTHOR_EMAIL: &str = "tagpin@localhost";
pub(super) const DEFAULT_TOKEN_USERNAME: &str = "x-access-token";
pub(super) const DEFAULT_TIMEOUT_SECONDS: u64 = 30;
/// The default of `forge.timeout_seconds`: how long one forge call may take, from the request
/// to the last byte of its answer. GitHub and GitLab answer in well under a second; a forge
/// that sends its answer a byte at a time is given up on here, whatever its pace.
pub const DEFAULT_FORGE_TIMEOUT_SECONDS: u64 = 60;

/// A problem found at a field path (`pull_request.grouping`, `paths[1]`, `(top level)`).
pub(super) struct Problem {
    pub(super) path: String,
    pub(super) message: String,
}

/// The rules of `git check-ref-format` that matter for names people type.
pub fn valid_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with(".lock")
        && !name.ends_with('.')
        && !name.starts_with('-')
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.split('/').any(|c| c.starts_with('.'))
        && !name
            .chars()
            .any(|c| c.is_ascii_control() || " ~^:?*[\\".contains(c))
}

/// A duration as written (`90s`, `500ms`) that is not one. Each quotes the text and shows
/// the forms taken; a flag or field name is added by the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a whole number followed by `s`, `m` or `h` (or nothing, for seconds). The number's
    /// own parse error is not kept: the quoted text and the forms say more than "invalid
    /// digit found in string".
    #[error("{text:?} is not a duration like 90s, 10m or 1h")]
    NotADuration { text: String },
    /// The same for a flag that also takes milliseconds ([`crate::leader::parse_duration`]).
    #[error("{text:?} is not a duration like 500ms, 2s or 1m")]
    NotAShortDuration { text: String },
    /// More seconds than a `u64` holds.
    #[error("{text:?} is too long a duration")]
    TooLong { text: String },
}

/// Parses `90s`, `10m`, `1h` or plain seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    let text = text.trim();
    let not_a_duration = || DurationError::NotADuration {
        text: text.to_string(),
    };
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| not_a_duration())?;
    let per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(not_a_duration()),
    };
    let secs = n
        .checked_mul(per_unit)
        .ok_or_else(|| DurationError::TooLong {
            text: text.to_string(),
        })?;
    Ok(std::time::Duration::from_secs(secs))
}

/// The longest stage name: a DNS label's length, so it fits wherever a name is used.
pub(super) const MAX_STAGE_NAME: usize = 63;

/// Why `name` cannot name a stage (it becomes the branch `tagpin/promote/<name>` and part of
/// a commit status context), or `None` when it can.
pub(super) fn invalid_stage_name(name: &str) -> Option<&'static str> {
    if name.len() > MAX_STAGE_NAME {
        return Some("is too long");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return Some("must start with a lowercase letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
    {
        return Some("has a character other than a-z, 0-9, '-', '_' and '.'");
    }
    if !valid_branch_name(&format!("tagpin/promote/{name}")) {
        return Some("is not valid in a Git branch name (no '..', no trailing '.' or '.lock')");
    }
    None
}

/// Whether two repository paths cover a common file: equal once normalised (`./a/` is `a`,
/// `.` is the whole repository), or one a parent directory of the other, component by
/// component (`overlays/prod` and `overlays/production` do not overlap).
pub(super) fn paths_overlap(a: &str, b: &str) -> bool {
    fn components(path: &str) -> Vec<Component<'_>> {
        Path::new(path)
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect()
    }
    let (a, b) = (components(a), components(b));
    a.starts_with(&b) || b.starts_with(&a)
}

/// Plain HTTP is tolerated for a token only on loopback, where it never crosses a network.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    match url::Url::parse(url)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
    {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}
