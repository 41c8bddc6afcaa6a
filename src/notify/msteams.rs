//! The body of a Microsoft Teams workflow webhook ("When a Teams webhook request is
//! received", which replaced the Office 365 connectors): a `message` with one Adaptive Card
//! 1.4 attachment. Pure. Text blocks are plain text with Adaptive Cards' markdown subset; the
//! values are put in a FactSet, whose values Teams does not read as links.

use serde_json::{json, Value};

use super::message;
use crate::event::{Event, EventKind};

/// The content type Teams expects of an Adaptive Card attachment.
pub const ADAPTIVE_CARD: &str = "application/vnd.microsoft.card.adaptive";

/// The JSON body posted to the workflow.
pub fn body(event: &Event) -> Value {
    let attention = matches!(
        event.kind,
        EventKind::Failed | EventKind::Reverted | EventKind::PromotionBlocked
    );
    let mut card_body = vec![json!({
        "type": "TextBlock",
        "text": message::headline(event),
        "weight": "Bolder",
        "size": "Medium",
        "wrap": true,
        "color": if attention { "Attention" } else { "Default" },
    })];
    if let Some(reason) = message::reason(event) {
        card_body.push(json!({"type": "TextBlock", "text": reason, "wrap": true}));
    }
    let facts: Vec<Value> = message::facts(event)
        .into_iter()
        .map(|(title, value)| json!({"title": title, "value": value}))
        .collect();
    card_body.push(json!({"type": "FactSet", "facts": facts}));
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": card_body,
    });
    if let Some(url) = message::link(event) {
        card["actions"] = json!([{
            "type": "Action.OpenUrl",
            "title": "Open the change request",
            "url": url,
        }]);
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": ADAPTIVE_CARD,
            "contentUrl": null,
            "content": card,
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::message::sample;

    #[test]
    fn a_failed_verdict_is_one_adaptive_card_with_its_facts_and_link() {
        let body = body(&sample());
        assert_eq!(body["type"], "message");
        let attachments = body["attachments"].as_array().unwrap();
        assert_eq!(attachments.len(), 1);
        assert_eq!(attachments[0]["contentType"], ADAPTIVE_CARD);
        let card = &attachments[0]["content"];
        assert_eq!(card["type"], "AdaptiveCard");
        assert_eq!(card["version"], "1.4");
        assert_eq!(card["body"][0]["type"], "TextBlock");
        assert_eq!(card["body"][0]["color"], "Attention");
        assert_eq!(card["body"][2]["type"], "FactSet");
        assert_eq!(card["body"][2]["facts"][2]["title"], "Image");
        assert_eq!(card["body"][2]["facts"][2]["value"], "ghcr.io/acme/web");
        assert_eq!(card["actions"][0]["type"], "Action.OpenUrl");
        assert_eq!(
            card["actions"][0]["url"],
            "https://github.com/acme/gitops/pull/12"
        );
    }
}
