//! What happened to a delivery, in one vocabulary for everything that tells people: the
//! dashboard's timeline, the delivery report (`tagpin report`) and the notifications. Pure:
//! each reader builds its events from what it knows (a cycle's report, Git history) and hands
//! them on; nothing here does I/O.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The kinds of event, named as `notifications[].events` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A pin commit landed, or a change request pinning digests was opened or updated.
    Pinned,
    /// A stage's cluster runs the pinned digests, proved pod by pod.
    Converged,
    /// A stage's verdict is Failed (before or after it first converged).
    Failed,
    /// A change was reverted (`verify.on_failure: revert`).
    Reverted,
    /// A promotion's change request was opened or updated.
    PromotionOpened,
    /// A promotion waits: its gate is closed (the reason says why).
    PromotionBlocked,
    /// A promotion landed on the next stage's branch.
    Promoted,
    /// A digest is held and will not be pinned again until the hold is lifted.
    Held,
}

impl EventKind {
    /// Every kind, in the order of a delivery.
    pub const ALL: [EventKind; 8] = [
        EventKind::Pinned,
        EventKind::Converged,
        EventKind::Failed,
        EventKind::Reverted,
        EventKind::PromotionOpened,
        EventKind::PromotionBlocked,
        EventKind::Promoted,
        EventKind::Held,
    ];

    /// The name the configuration, CloudEvents types and metrics labels use.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Pinned => "pinned",
            EventKind::Converged => "converged",
            EventKind::Failed => "failed",
            EventKind::Reverted => "reverted",
            EventKind::PromotionOpened => "promotion_opened",
            EventKind::PromotionBlocked => "promotion_blocked",
            EventKind::Promoted => "promoted",
            EventKind::Held => "held",
        }
    }

    /// The kind `name` names, if any.
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A change request an event links to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeLink {
    pub number: u64,
    /// Its web address, when the forge gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One thing that happened to a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    /// When it happened (Unix seconds): a commit's time, a verdict's time.
    pub time: i64,
    /// Which repository: the remote's URL (`tagpin run`), or `namespace/name` of the
    /// `PinnedRepository` (operator).
    pub repository: String,
    /// The promotion stage, or the branch's name when the repository has no stages.
    pub stage: String,
    /// The image (repository without tag or digest), when the event is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The commit the event is about (a pin, a promotion, a revert).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_request: Option<ChangeLink>,
    /// Why, in tagpin's words (a verdict's reason, a closed gate's reason, a hold's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Event {
    /// A stable identity: the same event seen again (by the next pass, after a restart, from
    /// Git history) has the same id, so it is told once. Made of what the event is about, not
    /// of when it was seen.
    pub fn id(&self) -> String {
        let mut hash = Sha256::new();
        for part in [
            self.kind.name(),
            &self.repository,
            &self.stage,
            self.image.as_deref().unwrap_or(""),
            self.digest.as_deref().unwrap_or(""),
            self.commit.as_deref().unwrap_or(""),
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        if let Some(link) = &self.change_request {
            hash.update(link.number.to_be_bytes());
        }
        let digest = hash.finalize();
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An event of `kind` for web's image in staging at one commit, with no change request
    /// and no reason.
    pub(crate) fn event(kind: EventKind) -> Event {
        Event {
            kind,
            time: 1_700_000_000,
            repository: "https://git.example/acme/deploy.git".into(),
            stage: "staging".into(),
            image: Some("ghcr.io/acme/web".into()),
            digest: Some(format!("sha256:{}", "a".repeat(64))),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            change_request: None,
            reason: None,
        }
    }

    #[test]
    fn names_read_back_as_their_kind() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(EventKind::parse("deployed"), None);
    }

    #[test]
    fn the_same_event_seen_later_keeps_its_id_and_another_does_not_share_it() {
        let first = event(EventKind::Failed);
        let mut later = first.clone();
        later.time += 3600;
        later.reason = Some("CrashLoopBackOff".into());
        assert_eq!(first.id(), later.id());
        assert_ne!(first.id(), event(EventKind::Converged).id());
        let mut other_stage = first.clone();
        other_stage.stage = "production".into();
        assert_ne!(first.id(), other_stage.id());
    }
}
