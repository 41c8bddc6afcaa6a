//! Registry credentials from a Docker config file (`config.json`).
//!
//! Users already have `docker login` credentials; reading the same file means tagpin needs no
//! credential format of its own. For each registry host the source is docker's: a
//! `credHelpers` entry for the host, else the host's `auths` entry (a password, or an
//! `identitytoken`), else the `credsStore` helper. With `credsStore` set, `docker login` leaves
//! empty `auths` entries that only list hosts; those are skipped.
//!
//! Helpers run lazily, when a registry first asks for credentials, and once per host for a
//! while: an answer is reused for [`ANSWER_REUSE`], a failure for [`FAILURE_REUSE`], so a pass
//! with many images on one host runs the helper once, not once per image. The answers of
//! cloud helpers expire (ECR passwords after 12 h, Artifact Registry tokens after about an
//! hour, sooner when the helper hands out a cached one), so a controller that kept an answer
//! for ever would fail every image there with 401 until restarted. An answer is therefore
//! asked again when its time is up, and at once when the registry refuses it
//! ([`CredentialStore::refused`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
// tokio's, not std's: cache lifetimes and deadlines follow paused test time (see crate::clock).
use tokio::time::Instant;

use super::auth::{Credential, Login};
use super::cred_helper::{self, HelperError};

/// How long a helper's failure is answered from memory before the helper is run again.
pub(crate) const FAILURE_REUSE: Duration = Duration::from_secs(30);

/// How long a helper's answer is reused before the helper is run again: well inside the
/// shortest credential lifetime of the cloud registries, and one helper run per registry
/// every few minutes costs little.
pub(crate) const ANSWER_REUSE: Duration = Duration::from_secs(300);

/// Why a Docker config file could not be read. Messages name the file, and the `auths` key
/// whose value is wrong; never a value from the file, which holds credentials.
#[derive(Debug, thiserror::Error)]
pub enum DockerConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not JSON, or JSON of another shape. serde's error is kept for its line and column but
    /// not as a source, and not shown in its own words: those quote the value it did not
    /// expect, which in this file may be a credential.
    #[error("{}: not a Docker config file: {}", path.display(), crate::bounded::json_problem(json))]
    NotDockerConfig {
        path: PathBuf,
        json: serde_json::Error,
    },
    #[error("{}: auths[{key:?}].auth: {source}", path.display())]
    BadAuth {
        path: PathBuf,
        key: String,
        #[source]
        source: AuthValueError,
    },
}

/// Why an `auths` entry's `auth` value is not base64 of `user:password`. The decoded bytes
/// are a credential, so no variant holds them.
#[derive(Debug, thiserror::Error)]
pub enum AuthValueError {
    #[error("not valid base64")]
    NotBase64(#[source] base64::DecodeError),
    #[error("not UTF-8 once decoded")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("decoded value has no `user:password` colon")]
    NoColon,
}

/// Why a registry's login could not be had from its credential helper; names the helper and
/// the registry. Cloned: a failure is answered from memory for [`FAILURE_REUSE`].
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoginError {
    /// The config names a helper that tagpin refuses to run.
    #[error("{source} (for {registry})")]
    HelperRefused {
        registry: String,
        #[source]
        source: HelperError,
    },
    #[error("{program} for {registry}: {source}")]
    Helper {
        program: String,
        registry: String,
        #[source]
        source: HelperError,
    },
}

/// Registry credentials keyed by normalized registry name (`docker.io`, `quay.io`, `host:5000`).
#[derive(Debug, Clone, Default)]
pub struct CredentialStore {
    by_registry: HashMap<String, Login>,
    /// `credHelpers`: helper name by registry.
    helpers: HashMap<String, String>,
    /// `credsStore`: the helper for every other registry.
    default_helper: Option<String>,
    /// Helper answers by registry; shared by clones, so one process asks once.
    answers: Arc<Mutex<HashMap<String, HelperSlot>>>,
}

/// One registry's helper answer; locked across the run so concurrent lookups wait for it.
type HelperSlot = Arc<tokio::sync::Mutex<Option<HelperAnswer>>>;

#[derive(Debug)]
enum HelperAnswer {
    Answered {
        login: Option<Login>,
        at: Instant,
        /// Asked because the answer before was refused: if this one is refused too, the
        /// helper is not run again until [`ANSWER_REUSE`] is up, so a host whose credentials
        /// are simply wrong does not run the helper for every image.
        after_refusal: bool,
    },
    Failed {
        error: LoginError,
        at: Instant,
    },
    /// The registry refused the last answer: the next lookup runs the helper.
    Refused,
}

impl HelperAnswer {
    /// Whether this answer is still given at `now`, instead of running the helper.
    fn reusable(&self, now: Instant) -> bool {
        match self {
            HelperAnswer::Answered { at, .. } => now.saturating_duration_since(*at) < ANSWER_REUSE,
            HelperAnswer::Failed { at, .. } => now.saturating_duration_since(*at) < FAILURE_REUSE,
            HelperAnswer::Refused => false,
        }
    }
}

/// Where one registry's credentials come from; decided from the file alone.
#[derive(Debug, PartialEq, Eq)]
enum Source<'a> {
    Helper(&'a str),
    Stored(&'a Login),
    Anonymous,
}

#[derive(Deserialize)]
struct ConfigFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

impl CredentialStore {
    /// `$DOCKER_CONFIG`, else `~/.docker`: where `docker login` writes.
    pub(crate) fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
            return Some(PathBuf::from(dir));
        }
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker"))
    }

    /// Reads `<dir>/config.json`; a missing file is an empty store, not an error, since most
    /// public images need no credentials.
    pub fn load_dir(dir: &Path) -> Result<CredentialStore, DockerConfigError> {
        let path = dir.join("config.json");
        match std::fs::read(&path) {
            Ok(bytes) => CredentialStore::parse(&bytes, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CredentialStore::default()),
            Err(source) => Err(DockerConfigError::Read { path, source }),
        }
    }

    /// Parses a Docker config file; `source` only names the file in messages.
    pub fn parse(bytes: &[u8], source: &Path) -> Result<CredentialStore, DockerConfigError> {
        let file: ConfigFile =
            serde_json::from_slice(bytes).map_err(|json| DockerConfigError::NotDockerConfig {
                path: source.to_path_buf(),
                json,
            })?;
        let mut store = CredentialStore {
            default_helper: file.creds_store.filter(|s| !s.is_empty()),
            ..CredentialStore::default()
        };
        for (key, helper) in file.cred_helpers {
            store.helpers.insert(normalize_registry_key(&key), helper);
        }
        for (key, entry) in file.auths {
            let registry = normalize_registry_key(&key);
            // docker exchanges an identity token when there is one, whatever `auth` holds.
            let login = match (
                entry.identitytoken,
                entry.auth,
                entry.username,
                entry.password,
            ) {
                (Some(token), _, _, _) if !token.is_empty() => Login::IdentityToken(token),
                (_, Some(auth), _, _) if !auth.is_empty() => {
                    Login::Password(decode_auth(&auth).map_err(|e| DockerConfigError::BadAuth {
                        path: source.to_path_buf(),
                        key: key.clone(),
                        source: e,
                    })?)
                }
                (_, _, Some(username), Some(password)) => {
                    Login::Password(Credential { username, password })
                }
                _ => continue,
            };
            store.by_registry.insert(registry, login);
        }
        Ok(store)
    }

    /// The credential helpers the config names (`credsStore`, then `credHelpers` by registry),
    /// as `key: helper` for messages.
    pub(crate) fn helpers_named(&self) -> Vec<String> {
        let mut named: Vec<String> = self
            .default_helper
            .iter()
            .map(|helper| format!("credsStore: {helper}"))
            .collect();
        let mut by_registry: Vec<_> = self.helpers.iter().collect();
        by_registry.sort();
        named.extend(
            by_registry
                .into_iter()
                .map(|(registry, helper)| format!("credHelpers.{registry}: {helper}")),
        );
        named
    }

    /// Adds or replaces the credential for a registry.
    pub fn insert(&mut self, registry: &str, credential: Credential) {
        self.by_registry.insert(
            normalize_registry_key(registry),
            Login::Password(credential),
        );
    }

    /// Only the credentials of these registries (as `docker login` names them: `ghcr.io`,
    /// `host:5000`), each from the source it has here: its `credHelpers` entry, its `auths`
    /// entry, else `credsStore`. Every other registry is anonymous in the result. The
    /// operator shares its own credentials with its tenants only this way, per registry the
    /// platform names.
    pub(crate) fn restricted_to(&self, registries: &[String]) -> CredentialStore {
        let mut kept = CredentialStore {
            answers: self.answers.clone(),
            ..CredentialStore::default()
        };
        for registry in registries.iter().map(|r| normalize_registry_key(r)) {
            match self.source(&registry) {
                Source::Helper(helper) => {
                    kept.helpers.insert(registry, helper.to_string());
                }
                Source::Stored(login) => {
                    kept.by_registry.insert(registry, login.clone());
                }
                Source::Anonymous => {}
            }
        }
        kept
    }

    /// These credentials, and `fallback`'s for every registry these leave anonymous.
    pub fn or(mut self, fallback: &CredentialStore) -> CredentialStore {
        for (registry, helper) in &fallback.helpers {
            if matches!(self.source(registry), Source::Anonymous) {
                self.helpers.insert(registry.clone(), helper.clone());
            }
        }
        for (registry, login) in &fallback.by_registry {
            if matches!(self.source(registry), Source::Anonymous) {
                self.by_registry.insert(registry.clone(), login.clone());
            }
        }
        if !fallback.helpers.is_empty() {
            // The fallback's helpers keep their answers where they are kept.
            self.answers = fallback.answers.clone();
        }
        self
    }

    /// The login for a registry (`Reference::domain`), running its helper on first use.
    /// `Ok(None)` means anonymous. Errors name the helper and the registry.
    pub async fn login(&self, registry: &str) -> Result<Option<Login>, LoginError> {
        let registry = normalize_registry_key(registry);
        let helper = match self.source(&registry) {
            Source::Anonymous => return Ok(None),
            Source::Stored(login) => return Ok(Some(login.clone())),
            Source::Helper(helper) => helper,
        };
        let slot = (self.answers.lock().unwrap_or_else(PoisonError::into_inner))
            .entry(registry.clone())
            .or_default()
            .clone();
        // Held across the run: concurrent lookups for one host wait for its single run.
        let mut slot = slot.lock().await;
        let now = Instant::now();
        match &*slot {
            Some(answer @ HelperAnswer::Answered { login, .. }) if answer.reusable(now) => {
                return Ok(login.clone())
            }
            Some(answer @ HelperAnswer::Failed { error, .. }) if answer.reusable(now) => {
                return Err(error.clone())
            }
            _ => {}
        }
        let after_refusal = matches!(*slot, Some(HelperAnswer::Refused));
        let answer = match cred_helper::program(helper) {
            Ok(program) => cred_helper::get(&program, &server_url(&registry), cred_helper::TIMEOUT)
                .await
                .map_err(|source| LoginError::Helper {
                    program,
                    registry: registry.clone(),
                    source,
                }),
            Err(source) => Err(LoginError::HelperRefused {
                registry: registry.clone(),
                source,
            }),
        };
        let at = Instant::now();
        *slot = Some(match &answer {
            Ok(login) => HelperAnswer::Answered {
                login: login.clone(),
                at,
                after_refusal,
            },
            Err(error) => HelperAnswer::Failed {
                error: error.clone(),
                at,
            },
        });
        answer
    }

    /// The registry refused `login` for `registry` (a 401 for Basic credentials, or the token
    /// service refusing them). For a helper's answer, forgets it so the next lookup runs the
    /// helper again: a password rotated or a cloud token expired since it was asked.
    ///
    /// Returns whether looking the login up again may give another: true when this forgot the
    /// answer or another lookup already replaced it; false for credentials from the file, and
    /// when the refused answer was itself asked after a refusal (the helper is then not run
    /// again before [`ANSWER_REUSE`] is up).
    pub async fn refused(&self, registry: &str, login: &Login) -> bool {
        let registry = normalize_registry_key(registry);
        if !matches!(self.source(&registry), Source::Helper(_)) {
            return false;
        }
        let slot = (self.answers.lock().unwrap_or_else(PoisonError::into_inner))
            .get(&registry)
            .cloned();
        let Some(slot) = slot else {
            return false;
        };
        let mut slot = slot.lock().await;
        match &*slot {
            Some(HelperAnswer::Answered {
                login: Some(current),
                after_refusal,
                ..
            }) if current == login => {
                if *after_refusal {
                    return false;
                }
                tracing::info!(
                    registry = %registry,
                    "the registry refused the credential helper's answer; asking the helper again"
                );
                *slot = Some(HelperAnswer::Refused);
                true
            }
            Some(HelperAnswer::Answered { .. }) | Some(HelperAnswer::Refused) => true,
            Some(HelperAnswer::Failed { .. }) | None => false,
        }
    }

    fn source(&self, registry: &str) -> Source<'_> {
        if let Some(helper) = self.helpers.get(registry) {
            return Source::Helper(helper);
        }
        if let Some(login) = self.by_registry.get(registry) {
            return Source::Stored(login);
        }
        match &self.default_helper {
            Some(helper) => Source::Helper(helper),
            None => Source::Anonymous,
        }
    }
}

/// The server URL a helper is asked about: docker's legacy key for Docker Hub, else the host.
fn server_url(registry: &str) -> String {
    match registry {
        "docker.io" => "https://index.docker.io/v1/".to_string(),
        _ => registry.to_string(),
    }
}

/// `https://index.docker.io/v1/` → `docker.io`; `https://quay.io` → `quay.io`.
fn normalize_registry_key(key: &str) -> String {
    let without_scheme = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = without_scheme
        .split('/')
        .next()
        .unwrap_or(without_scheme)
        .to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_string()
        }
        _ => host,
    }
}

fn decode_auth(auth: &str) -> Result<Credential, AuthValueError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(AuthValueError::NotBase64)?;
    // `String::from_utf8`'s error would hold the decoded bytes: the credential.
    let text = std::str::from_utf8(&bytes).map_err(AuthValueError::NotUtf8)?;
    let (username, password) = text.split_once(':').ok_or(AuthValueError::NoColon)?;
    Ok(Credential {
        username: username.to_string(),
        password: password.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<CredentialStore, DockerConfigError> {
        CredentialStore::parse(json.as_bytes(), Path::new("config.json"))
    }

    fn password(store: &CredentialStore, registry: &str) -> Credential {
        match store.source(&normalize_registry_key(registry)) {
            Source::Stored(Login::Password(c)) => c.clone(),
            other => panic!("expected a stored password for {registry}, got {other:?}"),
        }
    }

    #[test]
    fn docker_hub_legacy_key_serves_docker_io_images() {
        // base64("alice:s3cret")
        let store =
            parse(r#"{"auths":{"https://index.docker.io/v1/":{"auth":"YWxpY2U6czNjcmV0"}}}"#)
                .unwrap();
        let cred = password(&store, "docker.io");
        assert_eq!(cred.username, "alice");
        assert_eq!(cred.password, "s3cret");
    }

    #[test]
    fn cred_helpers_win_over_auths_which_win_over_creds_store() {
        let store = parse(
            r#"{"credsStore":"desktop","credHelpers":{"https://ecr.example":"ecr-login"},
                "auths":{"ecr.example":{"auth":"dTpw"},"ghcr.io":{"auth":"dTpw"},"gcr.io":{}}}"#,
        )
        .unwrap();
        assert_eq!(store.source("ecr.example"), Source::Helper("ecr-login"));
        assert!(matches!(store.source("ghcr.io"), Source::Stored(_)));
        // An empty entry only lists the host: the store holds its credential.
        assert_eq!(store.source("gcr.io"), Source::Helper("desktop"));
        assert_eq!(store.source("docker.io"), Source::Helper("desktop"));
        assert_eq!(store.source("quay.io"), Source::Helper("desktop"));
    }

    #[test]
    fn a_restricted_store_keeps_only_the_registries_named_each_from_its_own_source() {
        let operator = parse(
            r#"{"credsStore":"desktop","credHelpers":{"ecr.example":"ecr-login"},
                "auths":{"ghcr.io":{"auth":"dTpw"},"private.example":{"auth":"dTpw"}}}"#,
        )
        .unwrap();
        let shared = operator.restricted_to(&[
            "https://ghcr.io".to_string(),
            "ecr.example".to_string(),
            "quay.io".to_string(),
        ]);
        assert!(matches!(shared.source("ghcr.io"), Source::Stored(_)));
        assert_eq!(shared.source("ecr.example"), Source::Helper("ecr-login"));
        // credsStore serves a named registry that has no entry of its own, and no other.
        assert_eq!(shared.source("quay.io"), Source::Helper("desktop"));
        assert_eq!(shared.source("private.example"), Source::Anonymous);
        assert_eq!(shared.source("docker.io"), Source::Anonymous);
        assert!(shared
            .helpers_named()
            .iter()
            .all(|h| !h.starts_with("credsStore")));
        assert_eq!(
            operator.restricted_to(&[]).source("ghcr.io"),
            Source::Anonymous
        );
    }

    #[test]
    fn a_tenants_own_credentials_win_over_the_shared_ones() {
        let tenant = parse(r#"{"auths":{"ghcr.io":{"auth":"dGVuYW50OnQ="}}}"#).unwrap();
        let shared =
            parse(r#"{"auths":{"ghcr.io":{"auth":"b3A6bw=="},"quay.io":{"auth":"b3A6bw=="}}}"#)
                .unwrap();
        let store = tenant.or(&shared);
        assert_eq!(password(&store, "ghcr.io").username, "tenant");
        assert_eq!(password(&store, "quay.io").username, "op");
        assert_eq!(store.source("docker.io"), Source::Anonymous);
    }

    #[test]
    fn identity_token_in_auths_is_kept_as_such() {
        let store = parse(
            r#"{"auths":{"acr.example":{"auth":"MDAwMDAwMDAtMDAwMDo=","identitytoken":"rt-1"}}}"#,
        )
        .unwrap();
        assert_eq!(
            store.source("acr.example"),
            Source::Stored(&Login::IdentityToken("rt-1".into()))
        );
        assert_eq!(store.source("other.example"), Source::Anonymous);
    }

    #[test]
    fn docker_hub_is_asked_about_by_its_legacy_url() {
        assert_eq!(server_url("docker.io"), "https://index.docker.io/v1/");
        assert_eq!(server_url("host:5000"), "host:5000");
    }

    #[tokio::test]
    async fn a_helper_that_is_not_a_plain_name_is_refused_naming_the_registry() {
        let store = parse(r#"{"credHelpers":{"r.example":"../sh"}}"#).unwrap();
        let err = store.login("r.example").await.unwrap_err().to_string();
        assert!(
            err.contains("not a plain name") && err.contains("r.example"),
            "{err}"
        );
    }

    #[test]
    fn helper_answers_are_reused_for_a_while_failures_shorter_and_refusals_never() {
        let t0 = Instant::now();
        let answered = HelperAnswer::Answered {
            login: None,
            at: t0,
            after_refusal: false,
        };
        assert!(answered.reusable(t0));
        assert!(answered.reusable(t0 + ANSWER_REUSE - Duration::from_secs(1)));
        assert!(!answered.reusable(t0 + ANSWER_REUSE));
        let failed = HelperAnswer::Failed {
            error: LoginError::HelperRefused {
                registry: "r.example".into(),
                source: HelperError::NotFound,
            },
            at: t0,
        };
        assert!(failed.reusable(t0 + FAILURE_REUSE - Duration::from_secs(1)));
        assert!(!failed.reusable(t0 + FAILURE_REUSE));
        assert!(!HelperAnswer::Refused.reusable(t0));
        // A clock that reads earlier than the answer (it cannot, but `Instant` arithmetic
        // must not panic if it did) keeps the answer.
        assert!(answered.reusable(t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0)));
    }

    #[test]
    fn keys_with_scheme_and_path_match_the_bare_host() {
        let store = parse(
            r#"{"auths":{"https://quay.io":{"username":"bob","password":"pw"},"localhost:5000/v2/":{"auth":"dTpw"}}}"#,
        )
        .unwrap();
        assert_eq!(password(&store, "quay.io").username, "bob");
        assert_eq!(password(&store, "localhost:5000").password, "p");
    }

    #[test]
    fn broken_auth_value_names_the_file_and_key() {
        let err = parse(r#"{"auths":{"quay.io":{"auth":"!!!"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.json") && err.contains("quay.io"),
            "{err}"
        );
    }

    #[test]
    fn not_json_is_reported_with_the_file() {
        let err = parse("{").unwrap_err().to_string();
        assert!(
            err.starts_with("config.json: not a Docker config file"),
            "{err}"
        );
    }

    #[test]
    fn a_config_of_another_shape_is_named_without_quoting_its_values() {
        // `auth` written straight under the host: serde's own message quoted the credential.
        let err = parse(r#"{"auths":{"quay.io":"YWxpY2U6czNjcmV0"}}"#)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "config.json: not a Docker config file: JSON, but not of the shape expected \
             (line 1, column 38)"
        );
    }

    #[test]
    fn missing_file_is_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::load_dir(dir.path()).unwrap();
        assert_eq!(store.source("docker.io"), Source::Anonymous);
    }
}
