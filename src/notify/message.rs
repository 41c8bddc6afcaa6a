//! What every message says of an event, whatever carries it: a headline, the facts (stage,
//! image, digest, commit, change request) and the link to follow. Pure; each kind's body
//! (`slack.rs`, `msteams.rs`, `cloudevents.rs`) lays these out its own way.

use crate::event::{Event, EventKind};

/// The longest reason a message carries, in characters: a verdict's reason can list many
/// pods, and every receiver caps what it shows (Slack's section text at 3,000).
pub const MAX_REASON_CHARS: usize = 1_000;

/// One line: what happened, where.
pub fn headline(event: &Event) -> String {
    let stage = &event.stage;
    let what = event.image.as_deref().map(|image| match &event.digest {
        Some(digest) => format!("{image}@{}", short(digest)),
        None => image.to_string(),
    });
    let what = what.as_deref().unwrap_or("its pins");
    match event.kind {
        EventKind::Pinned => format!("{stage}: pinned {what}"),
        EventKind::Converged => format!("{stage}: converged on {what}"),
        EventKind::Failed => format!("{stage}: verification failed for {what}"),
        EventKind::Reverted => format!("{stage}: reverted {what}"),
        EventKind::PromotionOpened => format!("{stage}: promotion of {what} proposed"),
        EventKind::PromotionBlocked => format!("{stage}: promotion blocked"),
        EventKind::Promoted => format!("{stage}: promoted {what}"),
        EventKind::Held => format!("{stage}: held {what}"),
    }
}

/// `(title, value)` pairs of what the event names, in a fixed order.
pub fn facts(event: &Event) -> Vec<(&'static str, String)> {
    let mut facts = vec![
        ("Repository", event.repository.clone()),
        ("Stage", event.stage.clone()),
    ];
    if let Some(image) = &event.image {
        facts.push(("Image", image.clone()));
    }
    if let Some(digest) = &event.digest {
        facts.push(("Digest", digest.clone()));
    }
    if let Some(commit) = &event.commit {
        facts.push(("Commit", commit.clone()));
    }
    if let Some(link) = &event.change_request {
        facts.push(("Change request", format!("#{}", link.number)));
    }
    facts
}

/// The reason, cut to [`MAX_REASON_CHARS`].
pub fn reason(event: &Event) -> Option<String> {
    let reason = event.reason.as_deref()?;
    Some(match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &reason[..cut]),
        None => reason.to_string(),
    })
}

/// The page to open: the change request, when the forge gave its address.
pub fn link(event: &Event) -> Option<&str> {
    event.change_request.as_ref()?.url.as_deref()
}

/// `sha256:0f152bc1261a`: a digest short enough for a headline.
pub fn short(digest: &str) -> &str {
    let cut = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..cut).unwrap_or(digest)
}

/// A sample event for the bodies' tests: a Failed verdict of `web` in staging.
#[cfg(test)]
pub(crate) fn sample() -> Event {
    Event {
        repository: "https://git.example/acme/gitops.git".into(),
        change_request: Some(crate::event::ChangeLink {
            number: 12,
            url: Some("https://github.com/acme/gitops/pull/12".into()),
        }),
        reason: Some("shop/Deployment/web (web): ImagePullBackOff: <back-off> & retry".into()),
        ..crate::event::tests::event(EventKind::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headline_names_stage_image_and_short_digest() {
        assert_eq!(
            headline(&sample()),
            "staging: verification failed for ghcr.io/acme/web@sha256:aaaaaaaaaaaa"
        );
        let mut blocked = sample();
        blocked.kind = EventKind::PromotionBlocked;
        assert_eq!(headline(&blocked), "staging: promotion blocked");
    }

    #[test]
    fn a_long_reason_is_cut() {
        let mut event = sample();
        event.reason = Some("é".repeat(5_000));
        let cut = reason(&event).unwrap();
        assert_eq!(cut.chars().count(), MAX_REASON_CHARS + 1);
    }
}
