//! The body of a generic webhook: one CloudEvents 1.0 event in structured JSON mode
//! (`application/cloudevents+json`), signed with HMAC-SHA256 when a key is configured. Pure.
//!
//! - `type`: `dev.tagpin.<event>` (`dev.tagpin.failed`); `id`: [`Event::id`], the same for
//!   the same event however often it is seen, so a receiver can drop a repeat; `source`: the
//!   repository (its remote's URL, or `/namespaces/<ns>/pinnedrepositories/<name>` for an
//!   operator's object); `subject`: the stage; `time`: RFC 3339.
//! - `data`: the event's fields (`repository`, `stage`, `image`, `digest`, `commit`,
//!   `change_request`, `reason`), `verdict` for `converged` and `failed`, and `links`.
//! - The signature: header [`SIGNATURE_HEADER`], `sha256=` and the lowercase hex HMAC-SHA256
//!   of the exact body bytes under the key (GitHub's `X-Hub-Signature-256` scheme). A
//!   receiver computes the same over the body it read and compares in constant time.

use serde_json::{json, Map, Value};

use super::message;
use crate::event::{Event, EventKind};

/// The content type of a structured CloudEvent.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

/// The header carrying the body's HMAC-SHA256, when a key is configured.
pub const SIGNATURE_HEADER: &str = "X-Tagpin-Signature-256";

/// The CloudEvent, as JSON.
pub fn body(event: &Event) -> Value {
    let mut data = Map::new();
    data.insert("repository".into(), json!(event.repository));
    data.insert("stage".into(), json!(event.stage));
    for (key, value) in [
        ("image", &event.image),
        ("digest", &event.digest),
        ("commit", &event.commit),
    ] {
        if let Some(value) = value {
            data.insert(key.into(), json!(value));
        }
    }
    if let Some(link) = &event.change_request {
        data.insert("change_request".into(), json!(link));
    }
    let verdict = match event.kind {
        EventKind::Converged => Some("converged"),
        EventKind::Failed => Some("failed"),
        _ => None,
    };
    if let Some(verdict) = verdict {
        data.insert("verdict".into(), json!(verdict));
    }
    if let Some(reason) = message::reason(event) {
        data.insert("reason".into(), json!(reason));
    }
    let mut links = Map::new();
    if let Some(url) = message::link(event) {
        links.insert("change_request".into(), json!(url));
    }
    data.insert("links".into(), Value::Object(links));
    json!({
        "specversion": "1.0",
        "type": format!("dev.tagpin.{}", event.kind.name()),
        "source": source(&event.repository),
        "id": event.id(),
        "time": rfc3339(event.time),
        "subject": event.stage,
        "datacontenttype": "application/json",
        "data": data,
    })
}

/// The `source` attribute (a URI reference): the remote's URL, or the path of the
/// `PinnedRepository` (`namespace/name`) as the API names it.
pub fn source(repository: &str) -> String {
    if url::Url::parse(repository).is_ok() {
        return repository.to_string();
    }
    match repository.split_once('/') {
        Some((namespace, name)) if !name.contains('/') => {
            format!("/namespaces/{namespace}/pinnedrepositories/{name}")
        }
        _ => format!("/repositories/{}", repository.replace(' ', "%20")),
    }
}

/// `2023-11-14T22:13:20Z`.
pub fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

/// The value of [`SIGNATURE_HEADER`] for `body` under `key`.
pub fn signature(key: &str, body: &[u8]) -> String {
    crate::webhook::sign(key, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::message::sample;

    #[test]
    fn a_failed_verdict_is_a_cloudevent_with_every_required_attribute() {
        let event = sample();
        let body = body(&event);
        assert_eq!(body["specversion"], "1.0");
        assert_eq!(body["type"], "dev.tagpin.failed");
        assert_eq!(body["source"], "https://git.example/acme/gitops.git");
        assert_eq!(body["id"], event.id());
        assert_eq!(body["time"], "2023-11-14T22:13:20Z");
        assert_eq!(body["subject"], "staging");
        assert_eq!(body["datacontenttype"], "application/json");
        let data = &body["data"];
        assert_eq!(data["verdict"], "failed");
        assert_eq!(data["digest"], format!("sha256:{}", "a".repeat(64)));
        assert_eq!(data["change_request"]["number"], 12);
        assert_eq!(
            data["links"]["change_request"],
            "https://github.com/acme/gitops/pull/12"
        );
        let mut pinned = event.clone();
        pinned.kind = EventKind::Pinned;
        assert!(super::body(&pinned)["data"].get("verdict").is_none());
    }

    #[test]
    fn an_operators_object_is_its_api_path() {
        assert_eq!(
            source("team-a/web"),
            "/namespaces/team-a/pinnedrepositories/web"
        );
    }

    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body() {
        use hmac::{Hmac, Mac};
        let body = br#"{"specversion":"1.0"}"#;
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"k3y").unwrap();
        mac.update(body);
        let expected: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(signature("k3y", body), format!("sha256={expected}"));
    }
}
