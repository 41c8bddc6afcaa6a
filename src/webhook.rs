//! Registry push events: who may send them, and which images they name.
//!
//! A webhook turns "pinned at the next poll" into "pinned in seconds". Each registry speaks
//! its own dialect; this module reduces every dialect to the list of image repositories
//! (normalized, `ghcr.io/acme/web`) that just received a push. Pure: the HTTP server hands in
//! the headers, query and body it received.
//!
//! Authentication, as each sender supports it:
//! - GHCR (GitHub `package` events) signs the body: `X-Hub-Signature-256: sha256=<HMAC>`.
//! - Harbor and the distribution registry send a configured `Authorization` header:
//!   `Authorization: Bearer <secret>` (or the bare secret).
//! - Docker Hub and Quay can sign nothing; their webhook URL carries `?token=<secret>`.
//!
//! Secrets are compared in constant time and never logged.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::reference::Reference;

/// The webhook dialects tagpin understands, by URL path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    DockerHub,
    Quay,
    Harbor,
    Ghcr,
    Distribution,
}

impl Sender {
    /// Every sender, in the order `/webhooks/<name>` lists them.
    pub const ALL: [Sender; 5] = [
        Sender::DockerHub,
        Sender::Quay,
        Sender::Harbor,
        Sender::Ghcr,
        Sender::Distribution,
    ];

    /// `/webhooks/<name>`.
    pub(crate) fn from_path(name: &str) -> Option<Sender> {
        match name {
            "dockerhub" => Some(Sender::DockerHub),
            "quay" => Some(Sender::Quay),
            "harbor" => Some(Sender::Harbor),
            "ghcr" => Some(Sender::Ghcr),
            "distribution" => Some(Sender::Distribution),
            _ => None,
        }
    }

    /// Whether the sender authenticates by signing the body (so the body must be read before
    /// the delivery can be authenticated), rather than by a secret in a header or the URL.
    pub(crate) fn signs_body(self) -> bool {
        matches!(self, Sender::Ghcr)
    }

    pub fn name(self) -> &'static str {
        match self {
            Sender::DockerHub => "dockerhub",
            Sender::Quay => "quay",
            Sender::Harbor => "harbor",
            Sender::Ghcr => "ghcr",
            Sender::Distribution => "distribution",
        }
    }
}

/// Why a delivery was refused; the HTTP status to answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Rejection {
    #[error("missing or wrong credentials")]
    Unauthorized,
    #[error("payload is not a push event tagpin understands: {0}")]
    BadPayload(String),
}

impl Rejection {
    pub fn status(&self) -> u16 {
        match self {
            Rejection::Unauthorized => 401,
            Rejection::BadPayload(_) => 400,
        }
    }
}

/// Checks the delivery's credentials for `sender` against `secret`.
pub(crate) fn authenticate(
    sender: Sender,
    secret: &str,
    authorization: Option<&str>,
    signature: Option<&str>,
    query_token: Option<&str>,
    body: &[u8],
) -> Result<(), Rejection> {
    let ok = match sender {
        Sender::Ghcr => signature.is_some_and(|s| valid_signature(secret, s, body)),
        Sender::Harbor | Sender::Distribution => authorization.is_some_and(|a| {
            let presented = a.strip_prefix("Bearer ").unwrap_or(a).trim();
            constant_time_eq(presented.as_bytes(), secret.as_bytes())
        }),
        Sender::DockerHub | Sender::Quay => {
            query_token.is_some_and(|t| constant_time_eq(t.as_bytes(), secret.as_bytes()))
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Rejection::Unauthorized)
    }
}

/// `sha256=<hex HMAC-SHA256 of the body>`, as GitHub signs webhook deliveries.
fn valid_signature(secret: &str, header: &str, body: &[u8]) -> bool {
    let Some(written) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Ok(expected) = hex::decode(written) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The signature GitHub would send for `body`; for tests and for senders under our control.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The image repositories (normalized names, no tag) a push event names. Events that are not
/// pushes (deletes, pulls, scans) name nothing and are accepted quietly.
pub(crate) fn pushed_repositories(sender: Sender, body: &[u8]) -> Result<Vec<String>, Rejection> {
    let payload: Value = serde_json::from_slice(body)
        .map_err(|e| Rejection::BadPayload(format!("not JSON: {e}")))?;
    let mut names: Vec<String> = match sender {
        // {"repository": {"repo_name": "acme/web"}, "push_data": {"tag": "1.0"}}
        Sender::DockerHub => field(&payload, &["repository", "repo_name"])
            .map(|repo| vec![repo.to_string()])
            .ok_or_else(|| missing("repository.repo_name"))?,
        // {"docker_url": "quay.io/acme/web", "updated_tags": ["1.0"]}
        Sender::Quay => field(&payload, &["docker_url"])
            .map(|url| vec![url.to_string()])
            .ok_or_else(|| missing("docker_url"))?,
        // {"type": "PUSH_ARTIFACT", "event_data": {"resources": [{"resource_url": "harbor.example.com/lib/web:1.0"}]}}
        Sender::Harbor => {
            if payload["type"]
                .as_str()
                .is_some_and(|t| t != "PUSH_ARTIFACT")
            {
                return Ok(Vec::new());
            }
            payload["event_data"]["resources"]
                .as_array()
                .ok_or_else(|| missing("event_data.resources"))?
                .iter()
                .filter_map(|r| r["resource_url"].as_str())
                .map(str::to_string)
                .collect()
        }
        // GitHub `package` event: {"action": "published", "package": {"namespace": "acme", "name": "web", "package_type": "container"}}
        Sender::Ghcr => {
            let package = &payload["package"];
            if payload["action"]
                .as_str()
                .is_some_and(|a| a != "published" && a != "updated")
            {
                return Ok(Vec::new());
            }
            let owner = field(package, &["namespace"])
                .or_else(|| field(package, &["owner", "login"]))
                .ok_or_else(|| missing("package.namespace"))?;
            let name = field(package, &["name"]).ok_or_else(|| missing("package.name"))?;
            vec![format!("ghcr.io/{owner}/{name}")]
        }
        // {"events": [{"action": "push", "target": {"repository": "acme/web", "tag": "1.0"}, "request": {"host": "registry:5000"}}]}
        Sender::Distribution => payload["events"]
            .as_array()
            .ok_or_else(|| missing("events"))?
            .iter()
            .filter(|e| e["action"] == "push")
            .filter_map(|e| {
                let repo = e["target"]["repository"].as_str()?;
                match e["request"]["host"].as_str() {
                    Some(host) => Some(format!("{host}/{repo}")),
                    None => Some(repo.to_string()),
                }
            })
            .collect(),
    };
    names = names
        .iter()
        .filter_map(|n| Reference::parse(n).ok())
        .map(|r| r.canonical_name())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

fn field<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn missing(what: &str) -> Rejection {
    Rejection::BadPayload(format!("no {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cret-hook";

    #[test]
    fn github_signatures_are_checked_against_the_exact_body() {
        let body = br#"{"action":"published"}"#;
        let signature = sign(SECRET, body);
        assert!(authenticate(Sender::Ghcr, SECRET, None, Some(&signature), None, body).is_ok());
        assert_eq!(
            authenticate(Sender::Ghcr, SECRET, None, Some(&signature), None, b"{}"),
            Err(Rejection::Unauthorized)
        );
        assert_eq!(
            authenticate(Sender::Ghcr, SECRET, None, None, None, body),
            Err(Rejection::Unauthorized)
        );
    }

    #[test]
    fn shared_secrets_come_in_the_header_or_the_url_as_each_sender_allows() {
        assert!(authenticate(
            Sender::Harbor,
            SECRET,
            Some("Bearer s3cret-hook"),
            None,
            None,
            b""
        )
        .is_ok());
        assert!(authenticate(
            Sender::Distribution,
            SECRET,
            Some("s3cret-hook"),
            None,
            None,
            b""
        )
        .is_ok());
        assert!(authenticate(
            Sender::DockerHub,
            SECRET,
            None,
            None,
            Some("s3cret-hook"),
            b""
        )
        .is_ok());
        assert!(authenticate(Sender::Quay, SECRET, None, None, Some("wrong"), b"").is_err());
        // A secret in the URL does not authenticate a sender that can send a header.
        assert!(
            authenticate(Sender::Harbor, SECRET, None, None, Some("s3cret-hook"), b"").is_err()
        );
    }

    #[test]
    fn docker_hub_quay_harbor_ghcr_and_distribution_pushes_name_their_repositories() {
        let cases: [(Sender, &str, &str); 5] = [
            (
                Sender::DockerHub,
                r#"{"push_data":{"tag":"1.27"},"repository":{"repo_name":"library/nginx"}}"#,
                "docker.io/library/nginx",
            ),
            (
                Sender::Quay,
                r#"{"docker_url":"quay.io/acme/web","updated_tags":["latest"]}"#,
                "quay.io/acme/web",
            ),
            (
                Sender::Harbor,
                r#"{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"resource_url":"harbor.example.com/lib/web:1.0","tag":"1.0"}]}}"#,
                "harbor.example.com/lib/web",
            ),
            (
                Sender::Ghcr,
                r#"{"action":"published","package":{"name":"web","namespace":"acme","package_type":"container"}}"#,
                "ghcr.io/acme/web",
            ),
            (
                Sender::Distribution,
                r#"{"events":[{"action":"push","target":{"repository":"acme/web","tag":"1"},"request":{"host":"127.0.0.1:5000"}},{"action":"pull","target":{"repository":"acme/other"}}]}"#,
                "127.0.0.1:5000/acme/web",
            ),
        ];
        for (sender, body, want) in cases {
            assert_eq!(
                pushed_repositories(sender, body.as_bytes()),
                Ok(vec![want.to_string()]),
                "{sender:?}"
            );
        }
    }

    #[test]
    fn non_push_events_name_nothing_and_garbage_is_refused() {
        assert_eq!(
            pushed_repositories(
                Sender::Harbor,
                br#"{"type":"DELETE_ARTIFACT","event_data":{}}"#
            ),
            Ok(vec![])
        );
        assert!(matches!(
            pushed_repositories(Sender::Quay, b"not json"),
            Err(Rejection::BadPayload(_))
        ));
        assert!(matches!(
            pushed_repositories(Sender::DockerHub, b"{}"),
            Err(Rejection::BadPayload(_))
        ));
    }
}
