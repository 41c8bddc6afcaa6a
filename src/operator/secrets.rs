//! The Secrets a `PinnedRepository` names, read as the object's owner labelled them: only a
//! Secret labelled `tagpin.dev/secret-type=credentials` is read, so whoever may create
//! objects in a namespace but not label its Secrets cannot have tagpin send an arbitrary
//! Secret's keys anywhere.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::ResourceExt;

use super::status::{Outcome, Reason};
use std::sync::Arc;

use crate::config::{Config, GitAuth, ProvenanceRule, SecretName, SignatureFile, SignatureRule};
use crate::git::Credentials;
use crate::registry::CredentialStore;
use crate::signing::Signer;

/// The label a Secret must carry for a `PinnedRepository` to use it, as Argo CD's
/// `argocd.argoproj.io/secret-type`: whoever may create objects in a namespace but not
/// label its Secrets cannot have tagpin send an arbitrary Secret's keys anywhere. The
/// controller watches the Secrets so labelled, so a rotation reaches the objects that name
/// them at once.
pub const SECRET_LABEL: &str = "tagpin.dev/secret-type";
pub const SECRET_LABEL_VALUE: &str = "credentials";

/// The key of a Docker config Secret (`kubernetes.io/dockerconfigjson`).
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// The Secrets an object's spec names, read now.
pub(super) struct Secrets {
    pub git: Credentials,
    pub forge_token: Option<String>,
    /// `forge.username_env`'s key of the Secret (Bitbucket Cloud app passwords).
    pub forge_username: Option<String>,
    /// `namespace/name@resourceVersion` and the credentials of its Docker config.
    pub docker: Option<(String, CredentialStore)>,
    /// `images.signatures` with each key and trusted root read from the `secret_ref` Secret
    /// (the spec names its keys) and checked.
    pub signatures: Vec<SignatureRule>,
    /// `images.provenance` with each entry's keys and trusted root read from the Secret, as
    /// for `images.signatures`.
    pub provenance: Vec<ProvenanceRule>,
    /// `author.signing`'s key, read from the Secret and tried (it signed a probe).
    pub signer: Option<Arc<Signer>>,
    /// `promotion.require_signed_by` with each public key read from the Secret and checked.
    pub required_signers: Vec<SignatureFile>,
    /// `notifications`, each with its URL (and webhook key) read from the Secret.
    pub notifications: Vec<crate::notify::Target>,
}

/// Reads the Secrets the spec names, now: a rotated Secret is used by the next reconcile.
/// Files (an SSH key) are written under the object's own directory, readable by the
/// controller's user only.
pub(super) async fn read_secrets(
    kube: &kube::Client,
    namespace: &str,
    config: &Config,
    dir: &Path,
) -> Result<Secrets, Outcome> {
    let api: Api<Secret> = Api::namespaced(kube.clone(), namespace);
    let missing = |message: String| Outcome::Stalled {
        reason: Reason::SecretNotFound,
        message,
    };
    let main = match &config.secret_ref {
        Some(name) => Some(fetch(&api, namespace, name).await?),
        None => None,
    };
    let key = |field: &str, key: &str| -> Result<Vec<u8>, Outcome> {
        let Some((name, data, _)) = &main else {
            return Err(missing(format!("spec.{field}: spec.secret_ref is not set")));
        };
        data.get(key).cloned().ok_or_else(|| {
            missing(format!(
                "spec.{field}: Secret {namespace}/{name} has no key {key:?}"
            ))
        })
    };
    let text = |field: &str, name: &str| -> Result<String, Outcome> {
        let bytes = key(field, name)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            missing(format!(
                "spec.{field}: key {name:?} does not hold UTF-8 text"
            ))
        })?;
        match text.trim() {
            "" => Err(missing(format!("spec.{field}: key {name:?} is empty"))),
            t => Ok(t.to_string()),
        }
    };
    let git = match &config.repository.auth {
        GitAuth::None => Credentials::None,
        GitAuth::Token { env, username } => Credentials::Token {
            username: username.clone(),
            token: text("repository.auth.token_env", env)?,
        },
        GitAuth::SshKey {
            key_file,
            passphrase_env,
        } => {
            let field = "repository.auth.ssh_key_file";
            let bytes = key(field, &key_file.to_string_lossy())?;
            let path = dir.join("ssh-key");
            write_private(&path, &bytes).map_err(|e| Outcome::Retrying {
                reason: Reason::Unreachable,
                message: format!("{}: {e}", path.display()),
            })?;
            Credentials::SshKey {
                key_file: path,
                passphrase: match passphrase_env {
                    Some(env) => Some(text("repository.auth.passphrase_env", env)?),
                    None => None,
                },
            }
        }
    };
    let forge_token = match &config.forge {
        Some(forge) => Some(text("forge.token_env", &forge.token_env)?),
        None => None,
    };
    let forge_username = match config.forge.as_ref().and_then(|f| f.username_env.as_ref()) {
        Some(key) => Some(text("forge.username_env", key)?),
        None => None,
    };
    let docker = match &config.registries.docker_config_secret {
        Some(name) => Some(docker_config(&api, namespace, name).await?),
        None => None,
    };
    let signatures = signature_rules(config, &text)?;
    let provenance = provenance_rules(config, &text)?;
    let (signer, required_signers) = commit_keys(config, &key, &text)?;
    let notifications = notification_targets(config, &text)?;
    Ok(Secrets {
        notifications,
        git,
        forge_token,
        forge_username,
        docker,
        signatures,
        provenance,
        signer,
        required_signers,
    })
}

/// `notifications`, each URL (and webhook key) read from the key of the Secret it names.
fn notification_targets(
    config: &Config,
    text: SecretText<'_>,
) -> Result<Vec<crate::notify::Target>, Outcome> {
    let mut targets = Vec::new();
    for (i, entry) in config.notifications.iter().enumerate() {
        let read = |field: &str, name: &SecretName| match name {
            SecretName::SecretKey(key) => text(&format!("notifications[{i}].{field}"), key),
            // Validation refuses a variable in a resource.
            SecretName::Env(_) => Err(Outcome::Stalled {
                reason: Reason::InvalidSpec,
                message: format!("spec.notifications[{i}].url_env: not read by the operator"),
            }),
        };
        let url = read("url_secret_key", &entry.url)?;
        let secret = match &entry.secret {
            Some(name) => Some(read("secret_key", name)?),
            None => None,
        };
        let target =
            crate::notify::Target::new(entry, &url, secret).map_err(|_| Outcome::Stalled {
                reason: Reason::InvalidSpec,
                message: format!(
                    "spec.notifications[{i}].url_secret_key: the key's value is not an http(s) URL"
                ),
            })?;
        targets.push(target);
    }
    Ok(targets)
}

/// The Docker config of the Secret `registries.docker_config_secret_ref` names, with the
/// Secret's version (a rotated Secret builds a new registry client); one that names
/// credential helpers is refused.
async fn docker_config(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
) -> Result<(String, CredentialStore), Outcome> {
    let (_, data, version) = fetch(api, namespace, name).await?;
    let bytes = data
        .get(DOCKER_CONFIG_KEY)
        .ok_or_else(|| Outcome::Stalled {
            reason: Reason::SecretNotFound,
            message: format!(
                "spec.registries.docker_config_secret_ref: Secret {namespace}/{name} has no \
             key {DOCKER_CONFIG_KEY:?} (create it with `kubectl create secret \
             docker-registry`)"
            ),
        })?;
    let store = CredentialStore::parse(bytes, Path::new(&format!("Secret {namespace}/{name}")))
        .map_err(|e| Outcome::Stalled {
            reason: Reason::InvalidSpec,
            message: format!("spec.registries.docker_config_secret_ref: {e}"),
        })?;
    // A helper would run a program in the controller with the controller's own
    // identity (a node's cloud role, say) on behalf of whoever wrote the Secret.
    let helpers = store.helpers_named();
    if !helpers.is_empty() {
        return Err(Outcome::Stalled {
            reason: Reason::InvalidSpec,
            message: format!(
                "spec.registries.docker_config_secret_ref: Secret {namespace}/{name} \
                 names credential helpers ({}); a Secret's Docker config must carry \
                 its credentials in `auths`",
                helpers.join(", ")
            ),
        });
    }
    Ok((format!("{namespace}/{name}@{version}"), store))
}

/// `images.signatures` with each key and trusted root read from the Secret and checked.
fn signature_rules(config: &Config, text: SecretText<'_>) -> Result<Vec<SignatureRule>, Outcome> {
    let mut signatures = config.images.signatures.clone();
    for (i, rule) in signatures.iter_mut().enumerate() {
        signers_from_secret(&format!("images.signatures[{i}]"), rule, text)?;
    }
    Ok(signatures)
}

/// `images.provenance` with each entry's keys and trusted root read from the Secret and
/// checked, as [`signature_rules`] reads them.
fn provenance_rules(config: &Config, text: SecretText<'_>) -> Result<Vec<ProvenanceRule>, Outcome> {
    let mut provenance = config.images.provenance.clone();
    for (i, rule) in provenance.iter_mut().enumerate() {
        signers_from_secret(&format!("images.provenance[{i}]"), &mut rule.signers, text)?;
    }
    Ok(provenance)
}

/// Reads the keys and trusted root of the entry at `path` from the Secret, and checks them.
fn signers_from_secret(
    path: &str,
    rule: &mut SignatureRule,
    text: SecretText<'_>,
) -> Result<(), Outcome> {
    for (j, key) in rule.keys.iter_mut().enumerate() {
        let field = format!("{path}.keys[{j}]");
        key.pem = text(&field, &key.path)?;
        checked(
            &field,
            &key.path,
            crate::signature::keys::parse_key(&key.pem),
        )?;
    }
    if let Some(root) = rule.trusted_root.as_mut() {
        let field = format!("{path}.trusted_root");
        root.contents = text(&field, &root.path)?;
        let parsed = crate::signature::keys::parse_trusted_root(&root.contents);
        checked(&field, &root.path, parsed)?;
    }
    let store = rule
        .notation
        .iter_mut()
        .flat_map(|n| n.trust_store.iter_mut());
    for (j, file) in store.enumerate() {
        let field = format!("{path}.notation.trust_store[{j}]");
        file.contents = text(&field, &file.path)?;
        let parsed = crate::signature::trust_policy::NotationTrust::compile(&[&file.contents], &[]);
        checked(&field, &file.path, parsed)?;
    }
    Ok(())
}

/// A Secret's key as bytes, and as trimmed text, each naming the spec field that asked.
type SecretBytes<'k> = &'k dyn Fn(&str, &str) -> Result<Vec<u8>, Outcome>;
type SecretText<'k> = &'k dyn Fn(&str, &str) -> Result<String, Outcome>;

/// `author.signing`'s private key, read from the Secret and tried (a key that cannot sign
/// stalls the object, naming the field), and `promotion.require_signed_by`'s public keys,
/// read and checked.
fn commit_keys(
    config: &Config,
    key: SecretBytes<'_>,
    text: SecretText<'_>,
) -> Result<(Option<Arc<Signer>>, Vec<SignatureFile>), Outcome> {
    let signer = match &config.author.signing {
        Some(signing) => {
            let key_name = match &signing.key {
                crate::config::SigningKey::File(path) => path.to_string_lossy().into_owned(),
                crate::config::SigningKey::Env(name) => name.clone(),
            };
            let key = key(signing.key.field(), &key_name)?;
            let passphrase = match &signing.passphrase_env {
                Some(env) => Some(text("author.signing.passphrase_env", env)?),
                None => None,
            };
            let signer = crate::sync::signer_from(signing, &key, passphrase.as_deref()).map_err(
                |(field, message)| Outcome::Stalled {
                    reason: Reason::InvalidSpec,
                    message: format!("spec.{field}: {message}"),
                },
            )?;
            Some(Arc::new(signer))
        }
        None => None,
    };
    let mut required_signers = config
        .promotion
        .as_ref()
        .map(|p| p.require_signed_by.clone())
        .unwrap_or_default();
    for (i, file) in required_signers.iter_mut().enumerate() {
        let field = format!("promotion.require_signed_by[{i}]");
        file.contents = text(&field, &file.path)?;
        checked(
            &field,
            &file.path,
            crate::signing::PublicKey::parse(&file.contents),
        )?;
    }
    Ok((signer, required_signers))
}

/// A key or trusted root read from the Secret that the verifier cannot use stalls the
/// object, naming the field and the Secret's key.
fn checked<T, E: std::fmt::Display>(
    field: &str,
    key: &str,
    parsed: Result<T, E>,
) -> Result<(), Outcome> {
    parsed.map(|_| ()).map_err(|e| Outcome::Stalled {
        reason: Reason::InvalidSpec,
        message: format!("spec.{field}: Secret key {key:?}: {e}"),
    })
}

/// A Secret's name, data and resourceVersion; a missing Secret stalls the object.
pub(super) async fn fetch(
    api: &Api<Secret>,
    namespace: &str,
    name: &str,
) -> Result<(String, BTreeMap<String, Vec<u8>>, String), Outcome> {
    match api.get_opt(name).await {
        Ok(Some(secret)) if !labelled_for_tagpin(&secret) => Err(Outcome::Stalled {
            reason: Reason::SecretNotLabelled,
            message: format!(
                "Secret {namespace}/{name} is not labelled {}={}; tagpin reads only the \
                 Secrets labelled for it",
                SECRET_LABEL, SECRET_LABEL_VALUE
            ),
        }),
        Ok(Some(secret)) => {
            let version = secret.resource_version().unwrap_or_default();
            let data = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            Ok((name.to_string(), data, version))
        }
        Ok(None) => Err(Outcome::Stalled {
            reason: Reason::SecretNotFound,
            message: format!("Secret {namespace}/{name} not found"),
        }),
        Err(e) => Err(Outcome::Retrying {
            reason: Reason::Unreachable,
            message: format!("cannot read Secret {namespace}/{name}: {e}"),
        }),
    }
}

/// Whether a Secret carries [`SECRET_LABEL`]: its owner let tagpin use it.
fn labelled_for_tagpin(secret: &Secret) -> bool {
    secret
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(SECRET_LABEL))
        .is_some_and(|value| value == SECRET_LABEL_VALUE)
}

/// Writes a secret file readable by this user only.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}
