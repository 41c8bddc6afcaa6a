//! The body of a Slack incoming webhook: `text` (what notifications and clients without
//! blocks show) and `blocks` (a header, the reason, the facts as fields, a link). Pure.
//!
//! Slack reads `&`, `<` and `>` in `mrkdwn` as markup (`<url|label>` links, `<!channel>`
//! mentions), so every value tagpin did not write itself is escaped as Slack asks: a reason
//! quoting a pod's message can never mention a channel or hide a link.

use serde_json::{json, Value};

use super::message;
use crate::event::Event;

/// Slack's limit on a header block's text.
const MAX_HEADER_CHARS: usize = 150;

/// The JSON body posted to the webhook.
pub fn body(event: &Event) -> Value {
    let headline = message::headline(event);
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": cut(&headline, MAX_HEADER_CHARS)},
    })];
    if let Some(reason) = message::reason(event) {
        blocks.push(json!({
            "type": "section",
            "text": {"type": "mrkdwn", "text": escape(&reason)},
        }));
    }
    let fields: Vec<Value> = message::facts(event)
        .into_iter()
        .map(|(title, value)| {
            json!({"type": "mrkdwn", "text": format!("*{title}*\n{}", escape(&value))})
        })
        .collect();
    blocks.push(json!({"type": "section", "fields": fields}));
    if let Some(url) = message::link(event) {
        blocks.push(json!({
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": format!("<{}|Open the change request>", escape(url))}],
        }));
    }
    let text = match message::reason(event) {
        Some(reason) => format!("{}: {}", escape(&headline), escape(&reason)),
        None => escape(&headline),
    };
    json!({"text": text, "blocks": blocks})
}

/// `&`, `<` and `>` as Slack's mrkdwn wants them.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max - 1) {
        Some((at, _)) if text.chars().count() > max => format!("{}…", &text[..at]),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::message::sample;

    #[test]
    fn a_failed_verdict_is_a_header_a_reason_facts_and_a_link() {
        let body = body(&sample());
        let text = body["text"].as_str().unwrap();
        assert!(text.starts_with(
            "staging: verification failed for ghcr.io/acme/web@sha256:aaaaaaaaaaaa: "
        ));
        // Slack's markup in a reason is escaped.
        assert!(
            text.ends_with("ImagePullBackOff: &lt;back-off&gt; &amp; retry"),
            "{text}"
        );
        let blocks = body["blocks"].as_array().unwrap();
        assert_eq!(blocks[0]["type"], "header");
        assert_eq!(blocks[0]["text"]["type"], "plain_text");
        assert_eq!(blocks[1]["text"]["type"], "mrkdwn");
        let fields = blocks[2]["fields"].as_array().unwrap();
        assert!(fields.len() <= 10, "Slack takes at most 10 fields");
        assert_eq!(fields[1]["text"], "*Stage*\nstaging");
        assert_eq!(
            blocks[3]["elements"][0]["text"],
            "<https://github.com/acme/gitops/pull/12|Open the change request>"
        );
    }

    #[test]
    fn a_header_stays_within_slacks_limit() {
        let mut event = sample();
        event.image = Some("r.example/".to_string() + &"x".repeat(300));
        let body = body(&event);
        let header = body["blocks"][0]["text"]["text"].as_str().unwrap();
        assert_eq!(header.chars().count(), MAX_HEADER_CHARS);
    }
}
