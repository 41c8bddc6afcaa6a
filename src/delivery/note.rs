//! The note tagpin keeps on a deployment commit (`refs/notes/tagpin`): each final verdict a
//! stage reached on that commit, when, and on which digests. Pure: the text in, the text out.
//!
//! ```json
//! {"verdicts": [{"stage": "staging", "verdict": "converged", "time": "2026-12-07T17:00:00Z",
//!   "at": 1796662800, "images": [{"image": "ghcr.io/acme/web", "digest": "sha256:…"}]}]}
//! ```
//!
//! A verdict is appended only when it differs from the last one of its stage on that commit,
//! so a stage judged Converged at every interval leaves one entry, and a crash-loop an hour
//! later a second (`failed`). A note that cannot be read is replaced rather than kept.

use serde::{Deserialize, Serialize};

use super::figures::Verdict;

/// The most verdicts one note keeps (the oldest are dropped): a stage flapping for days must
/// not grow a note without bound.
pub const MAX_VERDICTS: usize = 200;

/// An image a verdict was about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotedImage {
    pub image: String,
    pub digest: String,
}

/// One verdict as noted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotedVerdict {
    pub stage: String,
    pub verdict: Verdict,
    /// RFC 3339, for people reading `git notes --ref tagpin show`.
    pub time: String,
    /// Unix seconds: what the report reads.
    pub at: i64,
    #[serde(default)]
    pub images: Vec<NotedImage>,
}

/// A note's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    #[serde(default)]
    pub verdicts: Vec<NotedVerdict>,
}

/// The note a text is; `None` when it is not tagpin's.
pub fn parse(text: &str) -> Option<Note> {
    serde_json::from_str(text).ok()
}

/// The note `existing` becomes with `verdict` appended, or `None` when the last verdict of
/// its stage there is the same already.
pub fn append(existing: Option<&str>, verdict: NotedVerdict) -> Option<String> {
    let mut note = existing.and_then(parse).unwrap_or_default();
    let last = note
        .verdicts
        .iter()
        .rev()
        .find(|v| v.stage == verdict.stage)
        .map(|v| v.verdict);
    if last == Some(verdict.verdict) {
        return None;
    }
    note.verdicts.push(verdict);
    if note.verdicts.len() > MAX_VERDICTS {
        let excess = note.verdicts.len() - MAX_VERDICTS;
        note.verdicts.drain(..excess);
    }
    serde_json::to_string(&note).ok().map(|text| text + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noted(stage: &str, verdict: Verdict, at: i64) -> NotedVerdict {
        NotedVerdict {
            stage: stage.into(),
            verdict,
            time: crate::age::rfc3339(at),
            at,
            images: vec![NotedImage {
                image: "ghcr.io/acme/web".into(),
                digest: format!("sha256:{}", "a".repeat(64)),
            }],
        }
    }

    #[test]
    fn a_verdict_is_appended_only_when_its_stage_s_last_differs() {
        let first = append(None, noted("staging", Verdict::Converged, 10)).unwrap();
        assert!(first.contains("\"verdict\":\"converged\""), "{first}");
        assert!(first.contains("1970-01-01T00:00:10Z"), "{first}");
        assert_eq!(
            append(Some(&first), noted("staging", Verdict::Converged, 20)),
            None
        );
        let second = append(Some(&first), noted("production", Verdict::Converged, 20)).unwrap();
        let third = append(Some(&second), noted("staging", Verdict::Failed, 30)).unwrap();
        let note = parse(&third).unwrap();
        let seen: Vec<(&str, Verdict, i64)> = note
            .verdicts
            .iter()
            .map(|v| (v.stage.as_str(), v.verdict, v.at))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("staging", Verdict::Converged, 10),
                ("production", Verdict::Converged, 20),
                ("staging", Verdict::Failed, 30),
            ]
        );
        // Not tagpin's: replaced.
        let replaced = append(Some("hand-written"), noted("staging", Verdict::Failed, 40));
        assert_eq!(parse(&replaced.unwrap()).unwrap().verdicts.len(), 1);
    }
}
