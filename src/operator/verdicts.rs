//! The operator's reading of one verification round ([`crate::inflight`], the round `tagpin
//! run` makes too): which verdict the object's status reports, what it awaits, which failures
//! are announced, and each promotion stage's verdict.
//!
//! - Pull-request mode: the open change request this pass proposed, else the sync change
//!   request merged last (it is what the cluster is meant to run now).
//! - Commit mode: the branch's tip (the commit this pass pushed, if it pushed one).
//! - A promotion stage: the promotion into it merged last.
//!
//! What the round did not verify because its verdict is final (found so by this process, or
//! by tagpin's own status on the forge) keeps the verdict the status already holds for it.

use std::collections::BTreeMap;

use super::crd::VerdictSummary;
use super::status::{self, Awaiting};
use crate::config::{Config, WriteMode};
use crate::forge::ChangeRequestNoun;
use crate::inflight::rule::{self, Facts};
use crate::inflight::{Report, Unverifiable, Verified};
use crate::verify::judge::verdict::State;

/// A verdict as the status holds it, and what it awaits.
pub type Summed = (VerdictSummary, Option<Awaiting>);

/// What the status makes of a round.
#[derive(Debug, Default)]
pub struct Reported {
    /// `status.verdict`, and what `Ready` says it awaits.
    pub verdict: Option<Summed>,
    /// Verdicts verified this round other than the reported one (posted to their change
    /// requests): a Failed one is announced.
    pub others: Vec<VerdictSummary>,
    /// Each promotion stage's verdict: its last merged promotion's, verified this round.
    pub promotions: BTreeMap<String, VerdictSummary>,
}

/// What is reported of `round`. `open`: the change request this pass proposed (pull-request
/// mode); `tip`: the commit verified as the branch's tip (commit mode); `previous`: the
/// status's verdict before the pass; `now`: Unix seconds; `time`: the verdicts' timestamp.
pub fn reported(
    config: &Config,
    round: &Report<'_>,
    open: Option<u64>,
    tip: Option<&str>,
    previous: Option<&VerdictSummary>,
    (now, time): (i64, &str),
) -> Reported {
    let noun = ChangeRequestNoun::of(config.forge.as_ref());
    let facts = Facts {
        now,
        grace: std::time::Duration::ZERO,
        me: &round.me,
        change_requests: &round.listed,
        tip: None,
    };
    let label_of_merged = |stage: Option<&str>| {
        let pr = rule::last_merged(config, &facts, stage)?;
        let sha = pr.merge_commit_sha.as_deref()?;
        Some(match stage {
            None => rule::merged_label(noun, pr.number, sha),
            Some(_) => rule::commit_label(sha),
        })
    };
    let summed: Vec<(String, Option<&str>, Summed)> = round
        .verified
        .iter()
        .filter_map(|(item, verified)| {
            let label = item.label(noun);
            let summed = summary(&label, verified, time)?;
            Some((label, item.stage.map(|s| s.name.as_str()), summed))
        })
        .collect();
    let wanted = match config.mode {
        WriteMode::PullRequest => open.map(|n| noun.name(n)).or_else(|| label_of_merged(None)),
        WriteMode::Commit => tip.map(rule::commit_label),
    };
    let mut reported = Reported::default();
    for (label, stage, summed) in summed {
        match stage {
            Some(stage) if label_of_merged(Some(stage)).as_deref() == Some(label.as_str()) => {
                reported.promotions.insert(stage.to_string(), summed.0);
            }
            None if wanted.as_deref() == Some(label.as_str()) => reported.verdict = Some(summed),
            _ => reported.others.push(summed.0),
        }
    }
    if reported.verdict.is_none() {
        let kept = previous.filter(|p| wanted.as_deref() == Some(p.source.as_str()));
        reported.verdict = kept.map(|p| (p.clone(), None));
    }
    reported
}

/// The Events of the reverts a round wrote or refused (`verify.on_failure: revert`): each
/// happens once, as the verdict that called for it is final.
pub fn revert_events(config: &Config, round: &Report<'_>) -> super::events::Events {
    use super::events::EventType;
    let noun = ChangeRequestNoun::of(config.forge.as_ref());
    round
        .verified
        .iter()
        .filter_map(|(item, verified)| {
            let revert = verified.as_ref().ok()?.revert.as_ref()?;
            let label = item.label(noun);
            Some(match revert {
                Ok(done @ crate::revert::Reverted::Refused(_)) => (
                    EventType::Warning,
                    "RevertRefused",
                    format!("{label}: {}", crate::revert::describe(done, noun)),
                ),
                Ok(done) => (
                    EventType::Warning,
                    "Reverted",
                    format!("{label}: {}", crate::revert::describe(done, noun)),
                ),
                // Tried again next round: logged, not announced each time.
                Err(e) => {
                    tracing::warn!("{label}: cannot revert now, tried again next round: {e}");
                    return None;
                }
            })
        })
        .collect()
}

/// An item's verification as the status holds it, named `label`; `None` when there was
/// nothing to verify in it.
fn summary(label: &str, verified: &Result<Verified, Unverifiable>, time: &str) -> Option<Summed> {
    let check = match verified {
        // Nothing to verify in it, or nowhere to verify it: no verdict.
        Ok(Verified { check: None, .. }) | Err(Unverifiable::NoCluster(_)) => return None,
        Ok(Verified {
            check: Some(check), ..
        }) => check,
        Err(e) => {
            let summary = VerdictSummary {
                state: State::Unverified,
                source: label.to_string(),
                summary: format!("cannot verify: {e}"),
                converged: 0,
                progressing: 0,
                failed: 0,
                unverified: 0,
                time: time.to_string(),
            };
            return Some((summary, None));
        }
    };
    let count = |state: State| {
        u32::try_from(check.verdicts.iter().filter(|v| v.state == state).count())
            .unwrap_or(u32::MAX)
    };
    let summary = VerdictSummary {
        state: check.state,
        source: label.to_string(),
        summary: check.summary.clone(),
        converged: count(State::Converged),
        progressing: count(State::Progressing),
        failed: count(State::Failed),
        unverified: count(State::Unverified),
        time: time.to_string(),
    };
    Some((summary, status::awaiting(check)))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::forge::{ForgeError, PullRequestInfo};
    use crate::inflight::rule::{select, Memory, Tip};
    use crate::verify::judge::check::{Check, Expectations};

    const NOW: i64 = 1_800_000_000;
    const MERGE: &str = "0123456789abcdef0123456789abcdef01234567";

    fn config(mode: &str) -> Config {
        let text = format!(
            "repository: {{url: /srv/git/gitops.git}}\n\
             forge: {{kind: gitlab, project: acme/gitops, token_env: GITLAB_TOKEN}}\n\
             mode: {mode}\n\
             promotion:\n  stages:\n  - name: staging\n    paths: [staging]\n\
             \x20 - name: production\n    paths: [production]\n"
        );
        Config::parse(&text, Path::new("tagpin.yaml")).unwrap()
    }

    fn pr(number: u64, head_ref: &str, merged_ago: Option<i64>) -> PullRequestInfo {
        PullRequestInfo {
            open: merged_ago.is_none(),
            merged: merged_ago.is_some(),
            merge_commit_sha: merged_ago.map(|_| format!("{number}{}", &MERGE[1..])),
            merged_at: merged_ago.map(|ago| NOW - ago),
            ..PullRequestInfo::sample(number, head_ref)
        }
    }

    fn check(state: State) -> Result<Verified, Unverifiable> {
        Ok(Verified {
            revert: None,
            expectations: Expectations::default(),
            check: Some(Check {
                state,
                summary: format!("1 {}", state.as_str()),
                verdicts: Vec::new(),
                gitops: Default::default(),
            }),
        })
    }

    /// A round over `listed` and `tip` in which each selected item got the verdict `states`
    /// gives it, in the order the rule selects them.
    fn round<'c>(
        config: &'c Config,
        listed: Vec<PullRequestInfo>,
        tip: Option<&str>,
        states: &[Result<State, ()>],
    ) -> Report<'c> {
        let facts = Facts {
            now: NOW,
            grace: std::time::Duration::from_secs(300),
            me: "tagpin-bot",
            change_requests: &listed,
            tip: tip.map(|sha| Tip {
                sha: sha.into(),
                landed: Some(NOW),
            }),
        };
        let selection = select(config, &facts, &Memory::default());
        assert_eq!(selection.items.len(), states.len(), "{:?}", selection.items);
        let verified = selection
            .items
            .into_iter()
            .zip(states)
            .map(|(item, state)| match state {
                Ok(state) => (item, check(*state)),
                Err(()) => {
                    let e = ForgeError::Call {
                        forge: "GitLab",
                        host: "gitlab.example".into(),
                        repo: "acme/gitops".into(),
                        what: "commit status".into(),
                        detail: "HTTP 502".into(),
                        status: Some(502),
                    };
                    (item, Err(Unverifiable::Status(e)))
                }
            })
            .collect();
        Report {
            me: "tagpin-bot".into(),
            listed,
            verified,
            ..Report::default()
        }
    }

    #[test]
    fn an_open_change_request_is_reported_and_a_merged_one_still_verified_and_announced() {
        let config = config("pull-request");
        let listed = vec![pr(2, "tagpin/main", None), pr(1, "tagpin/main", Some(600))];
        let round = round(
            &config,
            listed,
            None,
            &[Ok(State::Progressing), Ok(State::Failed)],
        );
        let reported = reported(&config, &round, Some(2), None, None, (NOW, "t"));
        let (verdict, awaiting) = reported.verdict.unwrap();
        assert_eq!(
            (verdict.source.as_str(), verdict.state),
            ("merge request !2", State::Progressing)
        );
        assert!(awaiting.is_some());
        assert_eq!(reported.others.len(), 1);
        assert_eq!(reported.others[0].state, State::Failed);
        assert_eq!(
            reported.others[0].source,
            "merge request !1, merged as 1123456789ab"
        );
    }

    #[test]
    fn without_an_open_one_the_last_merged_is_reported_and_a_final_verdict_kept() {
        let config = config("pull-request");
        let listed = || {
            vec![
                pr(1, "tagpin/main", Some(7200)),
                pr(3, "tagpin/main", Some(60)),
            ]
        };
        let two = round(
            &config,
            listed(),
            None,
            &[Ok(State::Converged), Ok(State::Progressing)],
        );
        let reported = reported(&config, &two, None, None, None, (NOW, "t"));
        let verdict = reported.verdict.unwrap().0;
        assert_eq!(
            (verdict.source.as_str(), verdict.state),
            (
                "merge request !3, merged as 3123456789ab",
                State::Progressing
            )
        );
        assert_eq!(reported.others.len(), 1, "the older merge, verified too");
        // Final before, so not verified this round: the status keeps the verdict it holds.
        let none = Report {
            me: "tagpin-bot".into(),
            listed: listed(),
            ..Report::default()
        };
        let before = VerdictSummary {
            state: State::Converged,
            ..verdict.clone()
        };
        let kept = reported_of(&config, &none, Some(&before));
        assert_eq!(kept, Some(before));
        // A verdict on the change request while it was open says nothing about its merge.
        let open = VerdictSummary {
            source: "merge request !3".into(),
            ..verdict
        };
        assert_eq!(reported_of(&config, &none, Some(&open)), None);
    }

    fn reported_of(
        config: &Config,
        round: &Report<'_>,
        previous: Option<&VerdictSummary>,
    ) -> Option<VerdictSummary> {
        reported(config, round, None, None, previous, (NOW, "t"))
            .verdict
            .map(|(v, _)| v)
    }

    #[test]
    fn commit_mode_reports_the_tip_and_each_stage_its_last_merged_promotion() {
        let config = config("commit");
        let listed = vec![
            pr(4, "tagpin/promote/production", Some(7200)),
            pr(5, "tagpin/promote/production", Some(60)),
        ];
        let tip = "f".repeat(40);
        let round = round(
            &config,
            listed,
            Some(&tip),
            &[Ok(State::Failed), Err(()), Ok(State::Converged)],
        );
        let reported = reported(&config, &round, None, Some(&tip), None, (NOW, "t"));
        let verdict = reported.verdict.unwrap().0;
        assert_eq!(
            (verdict.source.as_str(), verdict.state),
            ("commit ffffffffffff", State::Converged)
        );
        let production = &reported.promotions["production"];
        assert_eq!(production.source, "commit 5123456789ab");
        assert_eq!(production.state, State::Unverified);
        assert!(
            production
                .summary
                .starts_with("cannot verify: cannot read its tagpin/converged"),
            "{}",
            production.summary
        );
        assert_eq!(reported.others.len(), 1, "the older promotion");
        assert_eq!(reported.others[0].state, State::Failed);
    }
}
