//! Registry credentials from a Docker config file (`config.json`).
//!
//! Users already have `docker login` credentials; reading the same file means tagpin needs no
//! credential format of its own. Only the `auths` map is read: credential helpers
//! (`credsStore`, `credHelpers`) run external programs and are reported as unsupported.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use super::auth::Credential;

/// Registry credentials keyed by normalized registry name (`docker.io`, `quay.io`, `host:5000`).
#[derive(Debug, Clone, Default)]
pub struct CredentialStore {
    by_registry: HashMap<String, Credential>,
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
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
            return Some(PathBuf::from(dir));
        }
        std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker"))
    }

    /// Reads `<dir>/config.json`; a missing file is an empty store, not an error, since most
    /// public images need no credentials.
    pub fn load_dir(dir: &Path) -> Result<CredentialStore, String> {
        let path = dir.join("config.json");
        match std::fs::read(&path) {
            Ok(bytes) => CredentialStore::parse(&bytes, &path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CredentialStore::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// Parses a Docker config file; `source` only names the file in messages.
    pub fn parse(bytes: &[u8], source: &Path) -> Result<CredentialStore, String> {
        let file: ConfigFile = serde_json::from_slice(bytes)
            .map_err(|e| format!("{}: not a Docker config file: {e}", source.display()))?;
        if let Some(store) = &file.creds_store {
            tracing::warn!(
                file = %source.display(),
                "credsStore {store:?} is not supported; only `auths` entries are read"
            );
        }
        for registry in file.cred_helpers.keys() {
            tracing::warn!(
                file = %source.display(),
                "credHelpers entry for {registry} is not supported; only `auths` entries are read"
            );
        }
        let mut store = CredentialStore::default();
        for (key, entry) in file.auths {
            let registry = normalize_registry_key(&key);
            let credential = match (entry.auth, entry.username, entry.password) {
                (Some(auth), _, _) if !auth.is_empty() => decode_auth(&auth)
                    .map_err(|e| format!("{}: auths[{key:?}].auth: {e}", source.display()))?,
                (_, Some(username), Some(password)) => Credential { username, password },
                _ if entry.identitytoken.is_some() => {
                    tracing::warn!(
                        file = %source.display(),
                        "auths entry for {key} holds an identity token, which is not supported"
                    );
                    continue;
                }
                _ => continue,
            };
            store.by_registry.insert(registry, credential);
        }
        Ok(store)
    }

    /// The credential for a registry, by its normalized name (`Reference::domain`).
    pub fn get(&self, registry: &str) -> Option<&Credential> {
        self.by_registry.get(&normalize_registry_key(registry))
    }

    /// Adds or replaces the credential for a registry.
    pub fn insert(&mut self, registry: &str, credential: Credential) {
        self.by_registry
            .insert(normalize_registry_key(registry), credential);
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

fn decode_auth(auth: &str) -> Result<Credential, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|_| "not valid base64".to_string())?;
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 once decoded".to_string())?;
    let (username, password) = text
        .split_once(':')
        .ok_or_else(|| "decoded value has no `user:password` colon".to_string())?;
    Ok(Credential {
        username: username.to_string(),
        password: password.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<CredentialStore, String> {
        CredentialStore::parse(json.as_bytes(), Path::new("config.json"))
    }

    #[test]
    fn docker_hub_legacy_key_serves_docker_io_images() {
        // base64("alice:s3cret")
        let store =
            parse(r#"{"auths":{"https://index.docker.io/v1/":{"auth":"YWxpY2U6czNjcmV0"}}}"#)
                .unwrap();
        let cred = store.get("docker.io").expect("credential for docker.io");
        assert_eq!(cred.username, "alice");
        assert_eq!(cred.password, "s3cret");
    }

    #[test]
    fn keys_with_scheme_and_path_match_the_bare_host() {
        let store = parse(
            r#"{"auths":{"https://quay.io":{"username":"bob","password":"pw"},"localhost:5000/v2/":{"auth":"dTpw"}}}"#,
        )
        .unwrap();
        assert_eq!(store.get("quay.io").unwrap().username, "bob");
        assert_eq!(store.get("localhost:5000").unwrap().password, "p");
    }

    #[test]
    fn broken_auth_value_names_the_file_and_key() {
        let err = parse(r#"{"auths":{"quay.io":{"auth":"!!!"}}}"#).unwrap_err();
        assert!(
            err.contains("config.json") && err.contains("quay.io"),
            "{err}"
        );
    }

    #[test]
    fn not_json_is_reported_with_the_file() {
        let err = parse("{").unwrap_err();
        assert!(
            err.starts_with("config.json: not a Docker config file"),
            "{err}"
        );
    }

    #[test]
    fn missing_file_is_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::load_dir(dir.path()).unwrap();
        assert!(store.get("docker.io").is_none());
    }
}
