//! The report of `tagpin report` (the JSON of issue #39) and the history's events, shaped
//! from what [`super::figures`] makes of the history. Pure.

use serde::Serialize;

use super::figures::{self, CreatedFrom, Deployment, Kind, Landed, Outcome, Recorded, Verdict};
use crate::event::{Event, EventKind};

/// A nearest-rank median and 90th percentile, in seconds; `null` without values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Spread {
    pub median: Option<i64>,
    pub p90: Option<i64>,
}

/// A median alone, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Median {
    pub median: Option<i64>,
}

/// One stage's figures over the report's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageFigures {
    pub name: String,
    pub deployments: usize,
    pub failures: usize,
    /// failures / deployments; `null` without deployments.
    pub change_failure_rate: Option<f64>,
    pub lead_time_seconds: Spread,
    pub time_to_restore_seconds: Median,
}

/// One image of one deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    pub image: String,
    pub digest: String,
    pub stage: String,
    /// When the digest was built (RFC 3339); `created_from` says how that is known.
    pub created: String,
    pub created_from: CreatedFrom,
    /// When the deployment commit landed.
    pub pinned: String,
    /// Its first Converged verdict, if any.
    pub converged: Option<String>,
    pub outcome: Outcome,
    /// The deployment commit.
    pub commit: String,
    /// Lead time in seconds, for a converged deployment.
    #[serde(skip)]
    pub lead_time: Option<i64>,
    /// Its outcome can no longer change: reverted or held, or a later commit of its stage
    /// landed (its stage is no longer judged on it). What the metrics count.
    #[serde(skip)]
    pub settled: bool,
}

/// The report: per stage figures, and each change, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeliveryReport {
    /// The window's start (RFC 3339): deployments that landed since.
    pub since: String,
    pub stages: Vec<StageFigures>,
    pub changes: Vec<Change>,
    /// Each restore: stage, when its failure began (Unix seconds), seconds to restore.
    #[serde(skip)]
    pub restores: Vec<(String, i64, i64)>,
}

/// The report over `landed` and `recorded` for `stages` (in order), counting deployments that
/// landed at or after `since` (Unix seconds).
pub fn build(
    stages: &[String],
    landed: &[Landed],
    recorded: &[Recorded],
    since: i64,
) -> DeliveryReport {
    let all = figures::deployments(landed, recorded);
    let window: Vec<&Deployment<'_>> = all.iter().filter(|d| d.landed.time >= since).collect();
    let changes: Vec<Change> = window
        .iter()
        .flat_map(|d| {
            let later = landed
                .iter()
                .any(|l| l.stage == d.landed.stage && l.position > d.landed.position);
            changes_of(d, later)
        })
        .collect();
    let mut restores = Vec::new();
    let stages = stages
        .iter()
        .map(|stage| {
            let of_stage: Vec<&&Deployment<'_>> =
                window.iter().filter(|d| &d.landed.stage == stage).collect();
            let failures = of_stage.iter().filter(|d| d.outcome.is_failure()).count();
            let leads: Vec<i64> = changes
                .iter()
                .filter(|c| &c.stage == stage)
                .filter_map(|c| c.lead_time)
                .collect();
            let restored = figures::restores(recorded, stage, since);
            restores.extend(restored.iter().map(|(from, s)| (stage.clone(), *from, *s)));
            let restored: Vec<i64> = restored.iter().map(|(_, s)| *s).collect();
            StageFigures {
                name: stage.clone(),
                deployments: of_stage.len(),
                failures,
                change_failure_rate: (!of_stage.is_empty())
                    .then(|| failures as f64 / of_stage.len() as f64),
                lead_time_seconds: Spread {
                    median: figures::percentile(&leads, 50),
                    p90: figures::percentile(&leads, 90),
                },
                time_to_restore_seconds: Median {
                    median: figures::percentile(&restored, 50),
                },
            }
        })
        .collect();
    DeliveryReport {
        since: crate::age::rfc3339(since),
        stages,
        changes,
        restores,
    }
}

fn changes_of(d: &Deployment<'_>, superseded: bool) -> Vec<Change> {
    let settled = superseded || matches!(d.outcome, Outcome::Reverted | Outcome::Held);
    d.landed
        .images
        .iter()
        .map(|i| Change {
            image: i.image.clone(),
            digest: i.digest.clone(),
            stage: d.landed.stage.clone(),
            created: crate::age::rfc3339(i.created.0),
            created_from: i.created.1,
            pinned: crate::age::rfc3339(d.landed.time),
            converged: d.converged.map(crate::age::rfc3339),
            outcome: d.outcome,
            commit: d.landed.commit.clone(),
            lead_time: d.converged.map(|c| (c - i.created.0).max(0)),
            settled,
        })
        .collect()
}

/// The history's events, oldest first, as the dashboard's timeline shows them: each
/// deployment (`pinned` into the first stage, `promoted` into a later one), each recorded
/// verdict (`converged`, `failed`), each revert (`reverted`) and hold (`held`).
pub fn events(
    repository: &str,
    first_stage: &str,
    landed: &[Landed],
    recorded: &[Recorded],
) -> Vec<Event> {
    let event = |kind, time, stage: &str, commit: &str| Event {
        kind,
        time,
        repository: repository.to_string(),
        stage: stage.to_string(),
        image: None,
        digest: None,
        commit: Some(commit.to_string()),
        change_request: None,
        reason: None,
    };
    let mut out = Vec::new();
    for l in landed {
        let kind = match (&l.kind, l.stage == first_stage) {
            (Kind::Deployment, true) => EventKind::Pinned,
            (Kind::Deployment, false) => EventKind::Promoted,
            (Kind::Revert { .. }, _) => EventKind::Reverted,
        };
        for i in &l.images {
            let mut e = event(kind, l.time, &l.stage, &l.commit);
            (e.image, e.digest) = (Some(i.image.clone()), Some(i.digest.clone()));
            out.push(e);
        }
        for (image, digest) in &l.held {
            let mut e = event(EventKind::Held, l.time, &l.stage, &l.commit);
            (e.image, e.digest) = (Some(image.clone()), Some(digest.clone()));
            out.push(e);
        }
    }
    for r in recorded {
        let kind = match r.verdict {
            Verdict::Converged => EventKind::Converged,
            Verdict::Failed => EventKind::Failed,
        };
        out.push(event(kind, r.at, &r.stage, &r.commit));
    }
    out.sort_by_key(|e| e.time);
    out
}

#[cfg(test)]
mod tests {
    use super::super::figures::Image;
    use super::*;

    fn landed(commit: &str, position: usize, stage: &str, kind: Kind, time: i64) -> Landed {
        Landed {
            commit: commit.into(),
            position,
            time,
            stage: stage.into(),
            kind,
            images: vec![Image {
                image: "registry.test/acme/web".into(),
                digest: format!("sha256:{commit}"),
                created: (time - 600, CreatedFrom::Annotation),
            }],
            held: Vec::new(),
        }
    }

    fn verdict(position: usize, stage: &str, verdict: Verdict, at: i64) -> Recorded {
        Recorded {
            commit: format!("c{position}"),
            position,
            stage: stage.into(),
            verdict,
            at,
        }
    }

    #[test]
    fn the_report_counts_a_stage_s_deployments_failures_lead_times_and_restores() {
        let mut revert = landed(
            "r",
            2,
            "staging",
            Kind::Revert {
                reverts: Some("b".into()),
            },
            3000,
        );
        revert.held = vec![("registry.test/acme/web".into(), "sha256:b".into())];
        let history = vec![
            landed("old", 0, "staging", Kind::Deployment, 500),
            landed("a", 1, "staging", Kind::Deployment, 1000),
            landed("b", 2, "staging", Kind::Deployment, 2000),
            revert,
            landed("p", 4, "production", Kind::Deployment, 4000),
        ];
        // Positions must grow along the branch: b is 2, the revert 3.
        let history: Vec<Landed> = history
            .into_iter()
            .enumerate()
            .map(|(n, mut l)| {
                l.position = n;
                l
            })
            .collect();
        let recorded = vec![
            verdict(1, "staging", Verdict::Converged, 1100),
            verdict(2, "staging", Verdict::Converged, 2050),
            verdict(2, "staging", Verdict::Failed, 2500),
            verdict(3, "staging", Verdict::Converged, 3060),
            verdict(4, "production", Verdict::Converged, 4100),
        ];
        let stages = ["staging".to_string(), "production".to_string()];
        let report = build(&stages, &history, &recorded, 900);
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["since"], "1970-01-01T00:15:00Z");
        assert_eq!(value["stages"][0]["name"], "staging");
        assert_eq!(value["stages"][0]["deployments"], 2, "{value:#}");
        assert_eq!(value["stages"][0]["failures"], 1);
        assert_eq!(value["stages"][0]["change_failure_rate"], 0.5);
        // Lead times 700 (a) and 650 (b): nearest rank.
        assert_eq!(value["stages"][0]["lead_time_seconds"]["median"], 650);
        assert_eq!(value["stages"][0]["lead_time_seconds"]["p90"], 700);
        assert_eq!(value["stages"][0]["time_to_restore_seconds"]["median"], 560);
        assert_eq!(value["stages"][1]["deployments"], 1);
        assert_eq!(value["stages"][1]["change_failure_rate"], 0.0);
        assert_eq!(
            value["stages"][1]["time_to_restore_seconds"]["median"],
            serde_json::Value::Null
        );
        let outcomes: Vec<&str> = value["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, vec!["converged", "reverted", "converged"]);
        let b = &value["changes"][1];
        assert_eq!(b["created"], "1970-01-01T00:23:20Z");
        assert_eq!(b["created_from"], "annotation");
        assert_eq!(b["pinned"], "1970-01-01T00:33:20Z");
        assert_eq!(b["converged"], "1970-01-01T00:34:10Z");

        let kinds: Vec<EventKind> = events("repo", "staging", &history, &recorded)
            .iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::Pinned,
                EventKind::Pinned,
                EventKind::Converged,
                EventKind::Pinned,
                EventKind::Converged,
                EventKind::Failed,
                EventKind::Reverted,
                EventKind::Held,
                EventKind::Converged,
                EventKind::Promoted,
                EventKind::Converged,
            ]
        );
    }
}
