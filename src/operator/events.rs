//! Events about `PinnedRepository` objects (`events.k8s.io/v1`), one per thing announced.
//!
//! kube-runtime's `Recorder` folds Events of the same type, reason and object into a series
//! for six minutes: a second `Pinned` Event only raised the count of the first, and its commit
//! appeared nowhere. Here every Event is its own object with its own note. What is announced
//! is already decided once per change from the object's status (see `reconcile`), so there is
//! no repetition for a series to fold.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::Resource;

use super::crd::PinnedRepository;

/// The API server refuses a longer note.
pub const MAX_NOTE_BYTES: usize = 1024;

/// Normal or Warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Writes Events as this controller and replica.
pub struct Publisher {
    client: kube::Client,
    controller: String,
    instance: String,
    /// Tells apart Events created within one clock tick.
    sequence: AtomicU64,
}

impl Publisher {
    /// `instance`: the replica (its pod name); the controller's name when unknown.
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Publisher {
        Publisher {
            client,
            controller: controller.to_string(),
            instance: instance.unwrap_or_else(|| controller.to_string()),
            sequence: AtomicU64::new(0),
        }
    }

    /// Creates one Event about `object`.
    pub async fn publish(
        &self,
        object: &PinnedRepository,
        type_: EventType,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let namespace = object.meta().namespace.clone().unwrap_or_default();
        let now = k8s_openapi::jiff::Timestamp::now();
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let object_name = object.meta().name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                // As client-go names Events: the object, then something unique.
                name: Some(format!(
                    "{}.{:x}{:04x}",
                    truncated(&object_name, 200),
                    now.as_nanosecond(),
                    sequence % 0x1_0000
                )),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.as_str().to_string()),
            reason: Some(reason.to_string()),
            action: Some("Reconcile".to_string()),
            note: Some(truncated(note, MAX_NOTE_BYTES).to_string()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            regarding: Some(ObjectReference {
                api_version: Some(PinnedRepository::api_version(&()).to_string()),
                kind: Some(PinnedRepository::kind(&()).to_string()),
                namespace: Some(namespace.clone()),
                name: Some(object_name),
                uid: object.meta().uid.clone(),
                resource_version: object.meta().resource_version.clone(),
                ..ObjectReference::default()
            }),
            ..Event::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event).await.map(|_| ())
    }
}

/// The longest prefix of `text` within `max` bytes, cut on a character boundary.
fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The Events a pass has to publish: type, reason, note.
pub(super) type Events = Vec<(EventType, &'static str, String)>;

/// Now, as RFC 3339 in UTC with seconds, as `metav1.Time` is written.
pub(super) fn timestamp() -> String {
    crate::promote::gate::rfc3339(k8s_openapi::jiff::Timestamp::now().as_second())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_the_api_servers_limit_on_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = truncated(&note, MAX_NOTE_BYTES);
        assert_eq!(cut.len(), 1024);
        assert!(truncated("ab€", 3) == "ab");
        assert_eq!(truncated("short", MAX_NOTE_BYTES), "short");
    }
}
