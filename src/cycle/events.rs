//! What a cycle's report shows, as [`Event`]s: the one place that turns what a pass did into
//! the vocabulary the notifications (and the dashboard's timeline) tell. Pure: it reads a
//! [`CycleReport`] (or a verification round run between passes) and the configuration, and
//! does no I/O.
//!
//! - sync: a commit pushed, or a change request opened or updated, is `pinned` (one event per
//!   image and digest); a field held where it is (a comment, a revert's hold, a minimum age) is
//!   `held`;
//! - verification: a Converged or Failed verdict is `converged` or `failed` (one event per
//!   image and digest the verdict covers: for Failed, those that failed; an item with no
//!   workload verdict gives one event with its summary); a revert written is `reverted`; a
//!   promotion's change request seen merged is `promoted`;
//! - promotion: a promotion committed is `promoted`, one opened or updated `promotion_opened`;
//!   a gate that refuses digests waiting to be carried (the source failed, or something
//!   pinned could not be checked), or a soak started again by restarts, is
//!   `promotion_blocked` with the gate's reason. A soak that runs and a rollout under way are
//!   the normal wait of every promotion and are not events.
//!
//! The same event seen by the next pass has the same [`Event::id`], so whoever tells it can
//! tell it once.

use std::collections::BTreeSet;

use crate::config::Config;
use crate::event::{ChangeLink, Event, EventKind};
use crate::inflight::{Item, Verified};
use crate::plan::{Change, Held};
use crate::promote::gate::Gate;
use crate::promote::round::StagePromotion;
use crate::reference::Reference;
use crate::revert::Reverted;
use crate::sync::{Outcome, SyncReport};
use crate::verify::judge::check::{Check, Expectations};
use crate::verify::judge::verdict::State;
use crate::verify::Source;

use super::report::{CycleReport, Verification};

/// Who the events are about: the repository as the driver names it (`tagpin run`: the
/// remote's URL without credentials; the operator: `namespace/name`), and its configuration.
#[derive(Clone, Copy)]
pub struct About<'a> {
    pub repository: &'a str,
    pub config: &'a Config,
}

impl About<'_> {
    /// The stage sync pins: the first promotion stage, or the branch without stages.
    fn pinned_stage(&self) -> String {
        match &self.config.promotion {
            Some(promotion) => promotion
                .stages
                .first()
                .map(|s| s.name.clone())
                .unwrap_or_default(),
            None => self.config.repository.branch.clone(),
        }
    }

    fn event(&self, kind: EventKind, time: i64, stage: String) -> Event {
        Event {
            kind,
            time,
            repository: self.repository.to_string(),
            stage,
            image: None,
            digest: None,
            commit: None,
            change_request: None,
            reason: None,
        }
    }
}

/// Every event a whole cycle's report shows, in the cycle's order: sync, verification,
/// promotions.
pub fn of_cycle(report: &CycleReport<'_>, about: About<'_>) -> Vec<Event> {
    let mut events = Vec::new();
    if let Some(sync) = report.synced() {
        events.extend(of_sync(sync, report.now, about));
    }
    if let Some(verification) = &report.verification {
        events.extend(of_verification(verification, report.now, about));
    }
    for promotion in report.promotions.iter().flatten() {
        events.extend(of_promotion(promotion, report.now, about));
    }
    events
}

/// What a sync pass pinned and held.
pub fn of_sync(sync: &SyncReport, now: i64, about: About<'_>) -> Vec<Event> {
    let stage = about.pinned_stage();
    let mut events = Vec::new();
    for group in &sync.groups {
        let Some((commit, link)) = written(&group.outcome) else {
            continue;
        };
        for change in distinct(&group.changes) {
            let mut event = about.event(EventKind::Pinned, now, stage.clone());
            event.image = Some(image_name(&change.image));
            event.digest = Some(change.new_digest.to_string());
            event.commit.clone_from(&commit);
            event.change_request.clone_from(&link);
            events.push(event);
        }
    }
    events.extend(held(&sync.held, now, &stage, about));
    events
}

/// What a verification round (its final verdicts, its reverts, the promotions it saw merged)
/// shows, at `now`.
pub fn of_verification(verification: &Verification<'_>, now: i64, about: About<'_>) -> Vec<Event> {
    let round = &verification.round;
    let mut events = Vec::new();
    for (item, verified) in &round.verified {
        let Ok(verified) = verified else {
            continue;
        };
        let link = item.change_request.map(|number| ChangeLink {
            number,
            url: round
                .listed
                .iter()
                .find(|pr| pr.number == number)
                .map(|pr| pr.url.clone())
                .filter(|url| !url.is_empty()),
        });
        let stage = match item.stage {
            Some(stage) => stage.name.clone(),
            None => about.pinned_stage(),
        };
        let base = |kind| {
            let mut event = about.event(kind, now, stage.clone());
            event.commit = commit_of(item);
            event.change_request.clone_from(&link);
            event
        };
        // A promotion's change request seen merged: it landed on the stage's branch.
        if item.stage.is_some() && item.change_request.is_some() && item.landed.is_some() {
            events.push(base(EventKind::Promoted));
        }
        let Some(check) = &verified.check else {
            continue;
        };
        let kind = match check.state {
            State::Converged => EventKind::Converged,
            // As the round decides: with a revert to make, a young commit's failure is asked
            // again once its grace is over; it is not final yet.
            State::Failed if item.young && reverts(item, about.config) => continue,
            State::Failed => EventKind::Failed,
            State::Progressing | State::Unverified => continue,
        };
        for (image, digest, reason) in subjects(check, &verified.expectations) {
            let mut event = base(kind);
            (event.image, event.digest, event.reason) = (image, digest, Some(reason));
            events.push(event);
        }
        if let Some(event) = reverted(verified, base(EventKind::Reverted), check) {
            events.push(event);
        }
    }
    events
}

/// What one promotion pass wrote, or why it waits.
pub fn of_promotion(promotion: &StagePromotion<'_>, now: i64, about: About<'_>) -> Vec<Event> {
    let Some(Ok(report)) = &promotion.result else {
        return Vec::new();
    };
    let stage = promotion.target.name.clone();
    let mut events = Vec::new();
    let written = report.outcome.as_ref().and_then(written);
    if let Some((commit, link)) = written {
        let kind = match commit {
            Some(_) => EventKind::Promoted,
            None => EventKind::PromotionOpened,
        };
        for change in distinct(&report.changes) {
            let mut event = about.event(kind, now, stage.clone());
            event.image = Some(image_name(&change.image));
            event.digest = Some(change.new_digest.to_string());
            event.commit.clone_from(&commit);
            event.change_request.clone_from(&link);
            event.reason = Some(report.reason.clone());
            events.push(event);
        }
    }
    let blocked = match &report.gate {
        Gate::Refused { .. } => true,
        Gate::Soaking { restarted, .. } => restarted.is_some(),
        Gate::Open { .. } | Gate::Waiting { .. } => false,
    };
    if blocked && !report.changes.is_empty() {
        let mut event = about.event(EventKind::PromotionBlocked, now, stage.clone());
        // The source stage's commit: the same gate on the same commit is told once.
        event.commit = Some(report.source.commit.clone());
        event.reason = Some(report.reason.clone());
        events.push(event);
    }
    events.extend(held(&report.held, now, &stage, about));
    events
}

/// The commit a write pushed (commit mode) or the change request it opened or updated; `None`
/// when it wrote nothing new (nothing to do, unchanged, closed or edited by hand, a dry run,
/// a failure).
fn written(outcome: &Outcome) -> Option<(Option<String>, Option<ChangeLink>)> {
    match outcome {
        Outcome::Committed { commit, .. } => Some((Some(commit.clone()), None)),
        Outcome::PullRequestOpened { number, url, .. }
        | Outcome::PullRequestUpdated { number, url, .. } => Some((
            None,
            Some(ChangeLink {
                number: *number,
                url: Some(url.clone()).filter(|u| !u.is_empty()),
            }),
        )),
        _ => None,
    }
}

/// One change per image and digest (a digest pinned in several files is one event).
fn distinct(changes: &[Change]) -> Vec<&Change> {
    let mut seen = BTreeSet::new();
    changes
        .iter()
        .filter(|c| seen.insert((image_name(&c.image), c.new_digest.to_string())))
        .collect()
}

fn held(held: &[Held], now: i64, stage: &str, about: About<'_>) -> Vec<Event> {
    let mut seen = BTreeSet::new();
    held.iter()
        .filter(|h| seen.insert((image_name(&h.image), h.would_be.to_string())))
        .map(|h| {
            let mut event = about.event(EventKind::Held, now, stage.to_string());
            event.image = Some(image_name(&h.image));
            event.digest = Some(h.would_be.to_string());
            event.commit.clone_from(&h.commit);
            event.reason = Some(h.reason.clone());
            event
        })
        .collect()
}

/// Whether a Failed verdict on `item` calls for a revert (`on_failure` of the stage it
/// promotes into, else `verify.on_failure`).
fn reverts(item: &Item<'_>, config: &Config) -> bool {
    let on_failure = item
        .stage
        .and_then(|stage| stage.on_failure)
        .unwrap_or(config.verify.on_failure);
    on_failure == crate::config::OnFailure::Revert
}

/// The commit a verified item is about: the one whose verdict ends its verification.
fn commit_of(item: &Item<'_>) -> Option<String> {
    item.final_sha.clone().or_else(|| match &item.source {
        Source::Commit(sha) => Some(sha.clone()),
        Source::PullRequest(_) | Source::Branch(_) => None,
    })
}

/// The images and digests a final verdict is about, each with its reason: for Failed, the
/// workloads that failed; for Converged, all. A check without workload verdicts (what
/// failed is a manifest, or what could not be checked) is one subject, its summary.
fn subjects(
    check: &Check,
    expectations: &Expectations,
) -> Vec<(Option<String>, Option<String>, String)> {
    let mut seen = BTreeSet::new();
    let mut subjects = Vec::new();
    for verdict in &check.verdicts {
        if check.state == State::Failed && verdict.state != State::Failed {
            continue;
        }
        let image = expectations
            .expected
            .iter()
            .find(|e| e.workload == verdict.workload && e.container == verdict.container)
            .map(|e| image_name(&e.pinned_ref));
        let digest = verdict.pinned_digest.to_string();
        if seen.insert((image.clone(), digest.clone())) {
            let reason = match check.state {
                State::Failed => format!(
                    "{} ({}): {}",
                    verdict.workload, verdict.container, verdict.reason
                ),
                _ => check.summary.clone(),
            };
            subjects.push((image, Some(digest), reason));
        }
    }
    if subjects.is_empty() {
        subjects.push((None, None, check.summary.clone()));
    }
    subjects
}

/// The revert a Failed verdict called for, when one was written.
fn reverted(verified: &Verified, mut event: Event, check: &Check) -> Option<Event> {
    match verified.revert.as_ref()? {
        Ok(Reverted::Committed { commit, .. }) => event.commit = Some(commit.clone()),
        Ok(Reverted::Proposed(outcome)) => {
            let (_, link) = written(outcome)?;
            event.change_request = link;
        }
        Ok(Reverted::Refused(_)) | Err(_) => return None,
    }
    event.reason = Some(check.summary.clone());
    Some(event)
}

/// The image's repository without tag or digest (`ghcr.io/acme/web`), as events name it.
fn image_name(reference: &str) -> String {
    match Reference::parse(reference) {
        Ok(parsed) => parsed.canonical_name(),
        Err(_) => reference.split('@').next().unwrap_or(reference).to_string(),
    }
}

/// A remote's URL as events may show it: without a user name or password.
pub fn repository_name(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.has_host() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        // scp-like `git@host:path`: the user before `@` is a login, not a secret, but it
        // says nothing either.
        _ => match url.split_once('@') {
            Some((_, rest)) if !url.contains("://") => rest.to_string(),
            _ => url.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inflight::Report;
    use crate::review::PullRequestInfo;
    use crate::sync::GroupReport;
    use crate::verify::judge::samples;

    const REMOTE: &str = "https://git.example/acme/gitops.git";
    const TIP: &str = "0123456789abcdef0123456789abcdef01234567";

    fn config(extra: &str) -> Config {
        let text = format!("repository: {{url: '{REMOTE}', branch: main}}\n{extra}");
        Config::parse(&text, std::path::Path::new("tagpin.yaml")).unwrap()
    }

    fn about(config: &Config) -> About<'_> {
        About {
            repository: REMOTE,
            config,
        }
    }

    /// The change sync plans when `ghcr.io/acme/web:latest` moves to the sample's pinned digest.
    fn change() -> Change {
        let expected = samples::expected();
        Change {
            file: "apps/web.yaml".into(),
            line: 7,
            workload: "Deployment/web".parse().unwrap(),
            container: "web".into(),
            image: "ghcr.io/acme/web:latest".into(),
            old_value: "ghcr.io/acme/web:latest".into(),
            new_value: expected.pinned_ref.clone(),
            old_digest: None,
            new_digest: expected.digest.clone(),
            old_tag: None,
            new_tag: None,
            action: crate::plan::Action::Pin,
            signature: None,
            age: None,
            provenance: None,
        }
    }

    fn synced(outcome: Outcome) -> SyncReport {
        SyncReport {
            target: "main".into(),
            groups: vec![GroupReport {
                group: "all".into(),
                outcome,
                // The same digest pinned in two files is one event.
                changes: vec![change(), change()],
                diff: String::new(),
            }],
            ..SyncReport::default()
        }
    }

    #[test]
    fn a_pushed_pin_and_an_opened_change_request_are_pinned_and_an_unchanged_one_is_not() {
        let config = config("");
        let pushed = synced(Outcome::Committed {
            branch: "main".into(),
            commit: TIP.into(),
            attempts: 1,
        });
        let events = of_sync(&pushed, 1_700_000_000, about(&config));
        assert_eq!(events.len(), 1, "{events:?}");
        let pinned = &events[0];
        assert_at_the_tip(pinned, EventKind::Pinned);
        assert_eq!(pinned.time, 1_700_000_000);

        let opened = synced(Outcome::PullRequestOpened {
            number: 7,
            url: "https://github.com/acme/gitops/pull/7".into(),
            branch: "tagpin/pin".into(),
        });
        let events = of_sync(&opened, 1, about(&config));
        assert_eq!(
            events[0].change_request,
            Some(ChangeLink {
                number: 7,
                url: Some("https://github.com/acme/gitops/pull/7".into())
            })
        );
        let unchanged = synced(Outcome::pull_request(false, 7, String::new(), "b".into()));
        assert!(of_sync(&unchanged, 1, about(&config)).is_empty());
    }

    #[test]
    fn a_held_field_is_held_with_its_reason_and_the_revert_that_holds_it() {
        let config = config("promotion:\n  stages:\n    - {name: staging, paths: [s]}\n    - {name: production, paths: [p], mode: commit}\n");
        let mut report = SyncReport::default();
        report.held.push(Held {
            file: "s/web.yaml".into(),
            line: 3,
            workload: "Deployment/web".parse().unwrap(),
            container: "web".into(),
            image: "ghcr.io/acme/web:latest".into(),
            value: "ghcr.io/acme/web:latest@sha256:0".into(),
            would_be: samples::expected().digest,
            reason: "reverted by 89ab: Failed".into(),
            commit: Some("89ab".into()),
            age: None,
        });
        let events = of_sync(&report, 5, about(&config));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, EventKind::Held);
        // With stages, sync pins the first.
        assert_eq!(events[0].stage, "staging");
        assert_eq!(events[0].commit.as_deref(), Some("89ab"));
        assert_eq!(
            events[0].reason.as_deref(),
            Some("reverted by 89ab: Failed")
        );
    }

    /// A verification round that judged the tip `TIP` on the sample Deployment, its pod in
    /// `pod` state.
    fn round_on(pod: crate::verify::judge::verdict::LivePod) -> (Expectations, Check) {
        judged(samples::found(
            samples::workload(samples::deployment(1, 1, 1, 0)),
            vec![pod],
        ))
    }

    /// The round's expectation (the pinned web container) and the check of `live` against it.
    fn judged(live: crate::verify::judge::verdict::Live) -> (Expectations, Check) {
        let verdict = samples::judge_default(live);
        let expectations = Expectations {
            expected: vec![samples::expected()],
            ..Expectations::default()
        };
        let check = Check::judged(vec![verdict], &expectations, Default::default());
        (expectations, check)
    }

    /// Asserts `event` is a `kind` about the pinned web image at the tip of main.
    fn assert_at_the_tip(event: &Event, kind: EventKind) {
        assert_eq!(event.kind, kind);
        assert_eq!(event.stage, "main");
        assert_eq!(event.image.as_deref(), Some("ghcr.io/acme/web"));
        assert_eq!(event.digest, Some(samples::pinned()));
        assert_eq!(event.commit.as_deref(), Some(TIP));
    }

    fn tip_item() -> Item<'static> {
        Item {
            source: Source::Commit(TIP.into()),
            change_request: None,
            stage: None,
            final_sha: Some(TIP.into()),
            head: None,
            landed: Some(1_699_999_000),
            young: false,
            ask_forge: false,
        }
    }

    fn verification(
        item: Item<'static>,
        expectations: Expectations,
        check: Check,
    ) -> Verification<'static> {
        let mut round = Report::default();
        let mut pr = PullRequestInfo::sample(12, "tagpin/promote/production");
        pr.url = "https://github.com/acme/gitops/pull/12".into();
        round.listed.push(pr);
        round.verified.push((
            item,
            Ok(Verified {
                expectations,
                check: Some(check),
                revert: None,
            }),
        ));
        Verification { round, audit: None }
    }

    #[test]
    fn a_failed_verdict_is_failed_with_the_workload_and_why_and_told_once() {
        let config = config("");
        let pod = samples::waiting_pod("web-0", "ImagePullBackOff", "Back-off pulling image");
        let (expectations, check) = round_on(pod);
        assert_eq!(check.state, State::Failed, "{}", check.summary);
        let verification = verification(tip_item(), expectations, check);
        let events = of_verification(&verification, 1_700_000_100, about(&config));
        assert_eq!(events.len(), 1, "{events:?}");
        let failed = &events[0];
        assert_at_the_tip(failed, EventKind::Failed);
        let reason = failed.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("shop/Deployment/web (web): "),
            "{reason}"
        );
        assert!(reason.contains("ImagePullBackOff"), "{reason}");
        // The next round sees the same verdict: the same event.
        let again = of_verification(&verification, 1_700_000_200, about(&config));
        assert_eq!(again[0].id(), failed.id());
    }

    #[test]
    fn a_converged_promotion_merge_is_promoted_and_converged_in_its_stage() {
        let config = config("mode: commit\npromotion:\n  stages:\n    - {name: staging, paths: [s]}\n    - {name: production, paths: [p], mode: commit}\n");
        let production = &config.promotion.as_ref().unwrap().stages[1];
        // 'static for the test: the stage outlives the round.
        let production: &'static crate::config::Stage = Box::leak(Box::new(production.clone()));
        let live = samples::deployment_with_pods(&[samples::on(&samples::pinned())]);
        let (expectations, check) = judged(live);
        assert_eq!(check.state, State::Converged, "{}", check.summary);
        let item = Item {
            source: Source::PullRequest(12),
            change_request: Some(12),
            stage: Some(production),
            final_sha: Some(TIP.into()),
            head: Some("feed".into()),
            landed: Some(1_699_999_000),
            young: false,
            ask_forge: false,
        };
        let events = of_verification(&verification(item, expectations, check), 9, about(&config));
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::Promoted, EventKind::Converged]);
        for event in &events {
            assert_eq!(event.stage, "production");
            assert_eq!(event.commit.as_deref(), Some(TIP));
            let link = event.change_request.as_ref().unwrap();
            assert_eq!(link.number, 12);
            assert_eq!(
                link.url.as_deref(),
                Some("https://github.com/acme/gitops/pull/12")
            );
        }
        assert_eq!(events[1].image.as_deref(), Some("ghcr.io/acme/web"));
    }

    #[test]
    fn a_young_failure_that_a_revert_awaits_is_not_final_yet() {
        let config = config("verify: {on_failure: revert}\n");
        let pod = samples::waiting_pod("web-0", "ImagePullBackOff", "Back-off pulling image");
        let (expectations, check) = round_on(pod.clone());
        let mut young = tip_item();
        young.young = true;
        let awaited = verification(young, expectations, check);
        assert!(of_verification(&awaited, 1, about(&config)).is_empty());
        // Past its grace it is final: told.
        let (expectations, check) = round_on(pod);
        let last = verification(tip_item(), expectations, check);
        let events = of_verification(&last, 2, about(&config));
        assert_eq!(events[0].kind, EventKind::Failed);
    }

    #[test]
    fn a_progressing_verdict_is_no_event() {
        let config = config("");
        let live = samples::deployment_with_pods(&[samples::on(&samples::old())]);
        let (expectations, check) = judged(live);
        assert_eq!(check.state, State::Progressing, "{}", check.summary);
        let verification = verification(tip_item(), expectations, check);
        assert!(of_verification(&verification, 1, about(&config)).is_empty());
    }

    #[test]
    fn a_remote_is_named_without_its_credentials() {
        assert_eq!(
            repository_name("https://x-access-token:ghs_secret@github.com/acme/gitops.git"),
            "https://github.com/acme/gitops.git"
        );
        assert_eq!(
            repository_name("git@github.com:acme/gitops.git"),
            "github.com:acme/gitops.git"
        );
        assert_eq!(repository_name(REMOTE), REMOTE);
    }
}
