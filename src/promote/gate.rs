//! The promotion gate, as pure functions: has the source stage been Converged, on the digests
//! it pins now, for at least the soak time?
//!
//! tagpin keeps no state of its own, so the soak clock lives where the team can see it: the
//! `tagpin/stage/<name>` commit status that each promotion pass sets on the source stage's
//! commit. Its description says when the stage was first seen converged and gives a
//! fingerprint of the digests it pins (`converged since 2026-11-23T14:05:00Z · 3 image(s) ·
//! set 1a2b3c4d5e6f`). A restarted controller reads the clock back from there; a new set of
//! digests, or any verdict other than Converged in between, starts it again.
//!
//! Anyone with status rights (any CI job) can post a status in that context with any text, so
//! only statuses created by tagpin's own login count, and the time comes from GitHub's
//! `created_at`, not from the text: the clock starts at the `created_at` of the oldest own
//! success status of the unbroken run for this fingerprint (a status re-posted with the same
//! content keeps the start of the first). When the run began on an earlier commit, the first
//! own status on the new commit carries that start in its description; it is believed only
//! as far back as that status's own `created_at`, and it was written by tagpin from the same
//! rule, so every start goes back to a `created_at` of a status tagpin set.
//!
//! Where tagpin's own statuses on a commit may be hidden (a list cut at its page bound, or on
//! Bitbucket someone else's status in tagpin's key, which replaced tagpin's), the promoter
//! does not read on or look further back: the clock starts again (see
//! [`crate::review::StatusHistory::complete`]). Hiding tagpin's record can only restart a soak.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::forge::ChangeRequestNoun;
use crate::review::{Status, StatusState};
use crate::verify::judge::verdict::State;

/// The status context of a stage's verdict, as set by the promoter.
pub(crate) fn stage_context(stage: &str) -> String {
    format!("tagpin/stage/{stage}")
}

/// The status a promotion pull request carries: success while its evidence holds.
pub const PROMOTION_CONTEXT: &str = "tagpin/promotion";

/// GitHub refuses status descriptions longer than this.
const MAX_DESCRIPTION: usize = 140;

/// Whether a promotion may go ahead now, and why (not).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "gate", rename_all = "snake_case")]
pub enum Gate {
    /// Converged since `since` (Unix seconds), for at least the soak time.
    Open { since: i64 },
    /// Converged since `since`, but not for the soak time yet. `restarted`: this pass found
    /// more container restarts than `soak_restarts` allows, and started the soak again.
    Soaking {
        since: i64,
        remaining_seconds: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        restarted: Option<Restarted>,
    },
    /// Still rolling out: nothing to promote yet.
    Waiting { reason: String },
    /// Failed, or something pinned was not checked: never promoted.
    Refused { state: State, reason: String },
}

impl Gate {
    pub(crate) fn is_open(&self) -> bool {
        matches!(self, Gate::Open { .. })
    }

    /// One line for people: `staging converged since …, held 42m (soak 30m)`.
    pub fn describe(&self, stage: &str, soak: Duration) -> String {
        match self {
            Gate::Open { since } => format!(
                "{stage} converged since {}{}",
                rfc3339(*since),
                if soak.is_zero() {
                    String::new()
                } else {
                    format!(" (soak {} held)", human(soak))
                }
            ),
            // The end of the soak, not the time left: this sentence is in the pull request
            // body and status, which must not change from one pass to the next while the
            // soak runs (`remaining_seconds` is in the report).
            Gate::Soaking {
                since,
                restarted: None,
                ..
            } => format!(
                "{stage} converged since {}; soak {} not over, until {}",
                rfc3339(*since),
                human(soak),
                soak_end(*since, soak)
            ),
            Gate::Soaking {
                since,
                restarted: Some(restarted),
                ..
            } => format!(
                "{}; soaking again since {}, until {}",
                restarted.describe(),
                rfc3339(*since),
                soak_end(*since, soak)
            ),
            Gate::Waiting { reason } => format!("{stage} is not converged yet: {reason}"),
            Gate::Refused { state, reason } => {
                format!("{stage} is {}: {reason}", state.as_str())
            }
        }
    }
}

/// The end of a soak that began at `since`, for people.
fn soak_end(since: i64, soak: Duration) -> String {
    rfc3339(since.saturating_add(i64::try_from(soak.as_secs()).unwrap_or(i64::MAX)))
}

/// Container restarts that started a soak again (`soak_restarts`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Restarted {
    /// Restarts since the soak began (more than `soak_restarts` allows).
    pub restarts: u64,
    /// How long the soak had run, in seconds.
    pub over_seconds: u64,
    /// The workloads whose containers restarted, most restarts first (`web`, `api`).
    pub workloads: Vec<String>,
}

impl Restarted {
    /// `web restarted 2 times in the last 12m`.
    pub fn describe(&self) -> String {
        let who = match self.workloads.as_slice() {
            [] => "containers".to_string(),
            [one] => one.clone(),
            [first, second] => format!("{first} and {second}"),
            [first, second, rest @ ..] => format!("{first}, {second} and {} more", rest.len()),
        };
        format!(
            "{who} restarted {} in the last {}",
            match self.restarts {
                1 => "once".to_string(),
                n => format!("{n} times"),
            },
            human(Duration::from_secs(self.over_seconds))
        )
    }
}

/// Where a soak stands: since when it runs, the restart count it counts from (with
/// `soak_restarts`), and the restarts that just started it again, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soak {
    pub since: i64,
    /// The stage's container restarts when the soak began (or when its pods were last
    /// replaced): restarts beyond it happened during the soak. `None` without `soak_restarts`.
    pub baseline: Option<u64>,
    pub restarted: Option<Restarted>,
}

/// The soak clock of a Converged stage, from the start read back from its status (`None`:
/// it starts now) and its container restarts now (`restarts`, with the workloads that
/// restarted). With `allowed` (`soak_restarts`), more restarts than that since the soak began
/// start it again now. A count lower than the baseline means pods were replaced (restart
/// counts belong to a pod): the baseline follows it down, the soak goes on.
pub fn soak(
    start: Option<SoakStart>,
    restarts: u64,
    restarted: &[String],
    allowed: Option<u32>,
    now: i64,
) -> Soak {
    let Some(start) = start else {
        return Soak {
            since: now,
            baseline: allowed.map(|_| restarts),
            restarted: None,
        };
    };
    let Some(allowed) = allowed else {
        return Soak {
            since: start.since,
            baseline: None,
            restarted: None,
        };
    };
    let baseline = start.restarts.unwrap_or(restarts).min(restarts);
    let during = restarts - baseline;
    if during > u64::from(allowed) {
        return Soak {
            since: now,
            baseline: Some(restarts),
            restarted: Some(Restarted {
                restarts: during,
                over_seconds: u64::try_from(now.saturating_sub(start.since)).unwrap_or(0),
                workloads: restarted.to_vec(),
            }),
        };
    }
    Soak {
        since: start.since,
        baseline: Some(baseline),
        restarted: None,
    }
}

/// Decides the gate from the source stage's verdict now and its soak (when Converged).
pub(crate) fn decide(
    state: State,
    summary: &str,
    soak: Option<Soak>,
    duration: Duration,
    now: i64,
) -> Gate {
    match state {
        State::Converged => {
            let (since, restarted) = match soak {
                Some(soak) => (soak.since, soak.restarted),
                None => (now, None),
            };
            let held = u64::try_from(now.saturating_sub(since)).unwrap_or(0);
            if held >= duration.as_secs() && restarted.is_none() {
                Gate::Open { since }
            } else {
                Gate::Soaking {
                    since,
                    remaining_seconds: duration.as_secs().saturating_sub(held).max(1),
                    restarted,
                }
            }
        }
        State::Progressing => Gate::Waiting {
            reason: summary.to_string(),
        },
        State::Failed | State::Unverified => Gate::Refused {
            state,
            reason: summary.to_string(),
        },
    }
}

/// A soak clock read back from a stage status: since when, and the restart count it counts
/// from (written only with `soak_restarts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoakStart {
    pub since: i64,
    pub restarts: Option<u64>,
}

/// When the stage converged on the digests `fingerprint` names, from the stage statuses of the
/// newest commit where tagpin (`me`) set any (newest first). Only statuses created by `me`
/// count. The clock runs over the unbroken run of own success statuses for the same
/// fingerprint and restart baseline, from the oldest one's `created_at`, or the earlier start
/// it carries from the commit before; `None` means "starts now".
pub fn converged_since(history: &[Status], fingerprint: &str, me: &str) -> Option<SoakStart> {
    let mut start: Option<SoakStart> = None;
    for status in history.iter().filter(|s| s.creator.as_deref() == Some(me)) {
        let Some(created) = status.created_at else {
            break;
        };
        let Some(read) = parse_description(&status.description) else {
            break;
        };
        if status.state != StatusState::Success || read.set != fingerprint {
            break;
        }
        // A soak started again after restarts is a new run: older statuses are not its start.
        if start.is_some_and(|s| s.restarts != read.restarts) {
            break;
        }
        start = Some(SoakStart {
            since: read.since.min(created),
            restarts: read.restarts,
        });
    }
    start
}

/// The soak runs tagpin saw itself: per source stage, the digest set it last saw Converged
/// there and since when (Unix seconds), forgotten when it sees the stage otherwise. Kept in a
/// file beside the repository's mirror (`--cache-dir`), so `tagpin promote` run again, `tagpin
/// run` and the operator after a restart remember it; a lost cache only starts soaks over.
/// Where a status's time is whatever its poster said (Bitbucket Data Center), a soak start
/// read back from a status is believed only as far back as this ([`within_sight`]): a status
/// of tagpin's saved and posted again with its old time after the stage broke cannot shorten
/// the soak that began after the break.
#[derive(Debug, Clone)]
pub(crate) struct SoakMemory {
    path: std::path::PathBuf,
}

/// What [`SoakMemory`] keeps per stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Seen {
    fingerprint: String,
    since: i64,
}

type Sights = std::collections::BTreeMap<String, Seen>;

/// The file is tagpin's own, small: anything larger was not written by it.
const MAX_SOAK_MEMORY_BYTES: u64 = 1 << 20;

impl SoakMemory {
    /// The memory kept in the file `path`.
    pub fn at(path: std::path::PathBuf) -> SoakMemory {
        SoakMemory { path }
    }

    /// Notes what `stage` is now: Converged on the digests `fingerprint` names
    /// (`converged: Some(fingerprint)`), or not. Returns since when tagpin has seen it
    /// Converged on them without a break (`now` for a run it sees for the first time). The
    /// file is read each time, so processes that share the cache see each other's breaks, and
    /// written only when what it says changes; one that cannot be read is started afresh,
    /// which only restarts soaks.
    pub fn observe(&self, stage: &str, converged: Option<&str>, now: i64) -> Option<i64> {
        let mut sights = self.read();
        let Some(fingerprint) = converged else {
            if sights.remove(stage).is_some() {
                self.write(&sights);
            }
            return None;
        };
        if let Some(run) = sights
            .get(stage)
            .filter(|run| run.fingerprint == fingerprint)
        {
            return Some(run.since);
        }
        let fingerprint = fingerprint.to_string();
        sights.insert(
            stage.to_string(),
            Seen {
                fingerprint,
                since: now,
            },
        );
        self.write(&sights);
        Some(now)
    }

    fn read(&self) -> Sights {
        crate::state_file::read(&self.path, "soak memory", MAX_SOAK_MEMORY_BYTES)
    }

    fn write(&self, sights: &Sights) {
        if let Err(e) = crate::state_file::write(&self.path, sights) {
            tracing::warn!("{}: cannot write ({e})", self.path.display());
        }
    }
}

/// A soak start read back from a status, believed no further back than `seen_since`, when
/// this process first saw the stage's current run Converged ([`SoakMemory::observe`]).
pub(crate) fn within_sight(read: Option<SoakStart>, seen_since: i64) -> Option<SoakStart> {
    read.map(|start| SoakStart {
        since: start.since.max(seen_since),
        restarts: start.restarts,
    })
}

/// The stage status: its state and a description that carries the clock when converged (and
/// with `soak_restarts`, the restart count the soak counts from: `· restarts 4`).
pub(crate) fn stage_status(
    state: State,
    summary: &str,
    soak: Option<&Soak>,
    images: usize,
    fingerprint: &str,
) -> (StatusState, String) {
    let status = match state {
        State::Converged => StatusState::Success,
        State::Progressing => StatusState::Pending,
        State::Failed => StatusState::Failure,
        State::Unverified => StatusState::Error,
    };
    let description = match (state, soak) {
        (State::Converged, Some(soak)) => {
            let mut description = format!(
                "converged since {} · {images} image(s) · set {fingerprint}",
                rfc3339(soak.since)
            );
            if let Some(baseline) = soak.baseline {
                description.push_str(&format!(" · restarts {baseline}"));
            }
            description
        }
        _ => summary.to_string(),
    };
    (status, truncate(&description))
}

/// The `tagpin/promotion` status of an open promotion pull request; `noun` is how the forge
/// names it.
pub(crate) fn promotion_status(
    gate: &Gate,
    stage: &str,
    soak: Duration,
    proposes_current: bool,
    noun: ChangeRequestNoun,
) -> (StatusState, String) {
    let state = match gate {
        Gate::Open { .. } if proposes_current => StatusState::Success,
        Gate::Open { .. } | Gate::Soaking { .. } | Gate::Waiting { .. } => StatusState::Pending,
        Gate::Refused { .. } => StatusState::Failure,
    };
    let description = if matches!(gate, Gate::Open { .. }) && !proposes_current {
        format!(
            "{stage} now runs other digests; this {} is being updated",
            noun.word()
        )
    } else {
        gate.describe(stage, soak)
    };
    (state, truncate(&description))
}

/// The `tagpin/promotion` status of an open promotion pull request when the pass could not
/// read every manifest: pending, naming the first.
pub(crate) fn blocked_status(count: usize, first: &str) -> (StatusState, String) {
    (
        StatusState::Pending,
        truncate(&format!(
            "not updated: {count} manifest(s) or field(s) cannot be read: {first}"
        )),
    )
}

/// What a stage status description carries.
struct Described {
    since: i64,
    set: String,
    restarts: Option<u64>,
}

/// `since <RFC 3339>`, `set <hex>` and `restarts <n>` read back from a stage status
/// description.
fn parse_description(description: &str) -> Option<Described> {
    let since = description
        .split("since ")
        .nth(1)?
        .split_whitespace()
        .next()?;
    let since: Timestamp = since.parse().ok()?;
    let set = description
        .split("set ")
        .nth(1)?
        .split_whitespace()
        .next()?;
    let restarts = description
        .split(" · restarts ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok());
    Some(Described {
        since: since.as_second(),
        set: set.to_string(),
        restarts,
    })
}

/// `2026-11-23T14:05:00Z`.
pub fn rfc3339(unix: i64) -> String {
    Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| unix.to_string())
}

/// `30m`, `1h5m`, `45s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

fn truncate(text: &str) -> String {
    if text.chars().count() <= MAX_DESCRIPTION {
        return text.to_string();
    }
    let mut out: String = text.chars().take(MAX_DESCRIPTION - 1).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_795_000_000;

    const ME: &str = "tagpin-bot";

    /// A soak that began at `since`, without `soak_restarts`.
    fn started(since: i64) -> Soak {
        Soak {
            since,
            baseline: None,
            restarted: None,
        }
    }

    /// The status of a converged stage of three images whose digests are `fingerprint`,
    /// soaking since `since`.
    fn converged_status(since: i64, fingerprint: &str) -> (StatusState, String) {
        stage_status(
            State::Converged,
            "ok",
            Some(&started(since)),
            3,
            fingerprint,
        )
    }

    /// When the run of converged statuses in `history` on digests `abc` began, as tagpin
    /// reads it.
    fn start_of(history: &[Status]) -> Option<i64> {
        converged_since(history, "abc", ME).map(|s| s.since)
    }

    fn at(since: i64) -> Option<Soak> {
        Some(started(since))
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_764_052_215), "2025-11-25T06:30:15Z");
    }

    fn status(state: StatusState, description: &str) -> Status {
        Status {
            state,
            description: description.to_string(),
            created_at: Some(NOW - 100),
            creator: Some(ME.to_string()),
        }
    }

    fn by(creator: &str, created_at: i64, status: Status) -> Status {
        Status {
            creator: Some(creator.to_string()),
            created_at: Some(created_at),
            ..status
        }
    }

    #[test]
    fn only_statuses_tagpin_created_carry_the_clock() {
        // A CI job with status rights posts tagpin's context, claiming a start long ago.
        let (_, forged) = converged_status(NOW - 86_400, "abc");
        let history = [by(
            "ci-bot",
            NOW - 10,
            status(StatusState::Success, &forged),
        )];
        assert_eq!(converged_since(&history, "abc", ME), None);
        // Posted after tagpin's own: ignored, tagpin's clock stands.
        let (_, own) = converged_status(NOW - 60, "abc");
        let history = [
            by("ci-bot", NOW - 10, status(StatusState::Success, &forged)),
            by(ME, NOW - 60, status(StatusState::Success, &own)),
        ];
        assert_eq!(start_of(&history), Some(NOW - 60));
        // Nor can another creator's failure break tagpin's run.
        let history = [
            by("ci-bot", NOW - 10, status(StatusState::Failure, "broken")),
            by(ME, NOW - 60, status(StatusState::Success, &own)),
        ];
        assert_eq!(start_of(&history), Some(NOW - 60));
    }

    #[test]
    fn the_start_is_when_github_says_the_first_own_status_was_set() {
        // Even tagpin's own text is not believed beyond the status's created_at.
        let (_, ahead) = converged_status(NOW - 600, "abc");
        let (_, later) = converged_status(NOW, "abc");
        let history = [by(ME, NOW - 100, status(StatusState::Success, &later))];
        assert_eq!(start_of(&history), Some(NOW - 100));
        // Re-posted with the same content: the first one's start is kept.
        let history = [
            by(ME, NOW - 10, status(StatusState::Success, &later)),
            by(ME, NOW - 300, status(StatusState::Success, &later)),
        ];
        assert_eq!(start_of(&history), Some(NOW - 300));
        // The start carried from an earlier commit, earlier than this status: kept.
        let history = [by(ME, NOW - 10, status(StatusState::Success, &ahead))];
        assert_eq!(start_of(&history), Some(NOW - 600));
    }

    #[test]
    fn the_clock_round_trips_through_the_status_description() {
        let (state, description) = converged_status(NOW - 600, "abc123def456");
        assert_eq!(state, StatusState::Success);
        assert!(
            description.starts_with("converged since 2026-"),
            "{description}"
        );
        let history = [status(StatusState::Success, &description)];
        assert_eq!(
            converged_since(&history, "abc123def456", ME),
            Some(SoakStart {
                since: NOW - 600,
                restarts: None
            })
        );
    }

    #[test]
    fn new_digests_or_a_break_restart_the_clock() {
        let (_, d) = converged_status(NOW - 600, "aaaa");
        assert_eq!(
            converged_since(&[status(StatusState::Success, &d)], "bbbb", ME),
            None
        );
        let broken = [
            status(StatusState::Pending, "1 of 3 pods on an old digest"),
            status(StatusState::Success, &d),
        ];
        assert_eq!(converged_since(&broken, "aaaa", ME), None);
        assert_eq!(converged_since(&[], "aaaa", ME), None);
        // A success status without the clock starts it now.
        assert_eq!(
            converged_since(&[status(StatusState::Success, "fine")], "aaaa", ME),
            None
        );
    }

    #[test]
    fn the_gate_opens_only_after_the_soak() {
        let soak = Duration::from_secs(1800);
        assert_eq!(
            decide(State::Converged, "", at(NOW - 600), soak, NOW),
            Gate::Soaking {
                since: NOW - 600,
                remaining_seconds: 1200,
                restarted: None,
            }
        );
        assert_eq!(
            decide(State::Converged, "", at(NOW - 1800), soak, NOW),
            Gate::Open { since: NOW - 1800 }
        );
        // First seen converged now: with no soak, open at once.
        assert_eq!(
            decide(State::Converged, "", None, Duration::ZERO, NOW),
            Gate::Open { since: NOW }
        );
        assert!(!decide(State::Converged, "", None, soak, NOW).is_open());
    }

    #[test]
    fn a_soak_reads_the_same_on_every_pass_until_it_is_over() {
        let soak = Duration::from_secs(1800);
        let first = decide(State::Converged, "", at(NOW - 600), soak, NOW);
        let later = decide(State::Converged, "", at(NOW - 600), soak, NOW + 61);
        assert_ne!(first, later, "remaining_seconds follows the clock");
        assert_eq!(
            first.describe("staging", soak),
            later.describe("staging", soak)
        );
        assert_eq!(
            first.describe("staging", soak),
            format!(
                "staging converged since {}; soak 30m not over, until {}",
                rfc3339(NOW - 600),
                rfc3339(NOW + 1200)
            )
        );
    }

    #[test]
    fn restarts_beyond_soak_restarts_start_the_soak_again_and_say_who() {
        let soak = Duration::from_secs(1800);
        let start = Some(SoakStart {
            since: NOW - 720,
            restarts: Some(4),
        });
        let web = ["web".to_string()];
        // Within what is allowed: the soak goes on from the same start.
        let kept = self::soak(start, 5, &web, Some(1), NOW);
        assert_eq!(
            (kept.since, kept.baseline, &kept.restarted),
            (NOW - 720, Some(4), &None)
        );
        // Two restarts in the last 12m with none allowed: soaking again since now.
        let again = self::soak(start, 6, &web, Some(0), NOW);
        assert_eq!((again.since, again.baseline), (NOW, Some(6)));
        let gate = decide(State::Converged, "", Some(again.clone()), soak, NOW);
        assert_eq!(
            gate.describe("staging", soak),
            format!(
                "web restarted 2 times in the last 12m; soaking again since {}, until {}",
                rfc3339(NOW),
                rfc3339(NOW + 1800)
            )
        );
        assert!(!gate.is_open());
        // Even a soak that was over is not open on the pass that saw the restarts.
        let long_ago = Some(SoakStart {
            since: NOW - 7200,
            restarts: Some(0),
        });
        let restarted = self::soak(long_ago, 1, &web, Some(0), NOW);
        assert!(!decide(State::Converged, "", Some(restarted), soak, NOW).is_open());
        // The next pass reads the new start back (its baseline breaks the run), no new
        // restarts: soaking, and the sentence no longer names the restarts.
        let (_, description) = stage_status(State::Converged, "ok", Some(&again), 3, "abc");
        assert!(description.ends_with(" · restarts 6"), "{description}");
        let history = [
            by(ME, NOW, status(StatusState::Success, &description)),
            by(
                ME,
                NOW - 720,
                status(
                    StatusState::Success,
                    &stage_status(
                        State::Converged,
                        "ok",
                        Some(&Soak {
                            since: NOW - 720,
                            baseline: Some(4),
                            restarted: None,
                        }),
                        3,
                        "abc",
                    )
                    .1,
                ),
            ),
        ];
        let read = converged_since(&history, "abc", ME).unwrap();
        assert_eq!(
            read,
            SoakStart {
                since: NOW,
                restarts: Some(6)
            }
        );
        let next = self::soak(Some(read), 6, &web, Some(0), NOW + 60);
        assert_eq!((next.since, &next.restarted), (NOW, &None));
    }

    #[test]
    fn replaced_pods_lower_the_baseline_without_restarting_the_soak() {
        let start = Some(SoakStart {
            since: NOW - 600,
            restarts: Some(5),
        });
        // The pod with 5 restarts was replaced: nothing restarted during the soak.
        let soak = self::soak(start, 0, &[], Some(0), NOW);
        assert_eq!(
            (soak.since, soak.baseline, soak.restarted),
            (NOW - 600, Some(0), None)
        );
        // A status written before soak_restarts was set: counting starts now.
        let old = Some(SoakStart {
            since: NOW - 600,
            restarts: None,
        });
        let soak = self::soak(old, 9, &[], Some(0), NOW);
        assert_eq!((soak.since, soak.baseline), (NOW - 600, Some(9)));
        // Without soak_restarts nothing is counted or written.
        let soak = self::soak(start, 99, &[], None, NOW);
        assert_eq!((soak.since, soak.baseline), (NOW - 600, None));
        let (_, description) = stage_status(State::Converged, "ok", Some(&soak), 1, "abc");
        assert!(!description.contains("restarts"), "{description}");
    }

    #[test]
    fn many_workloads_restarting_are_named_briefly() {
        let restarted = |workloads: &[&str], restarts| Restarted {
            restarts,
            over_seconds: 90,
            workloads: workloads.iter().map(|w| w.to_string()).collect(),
        };
        assert_eq!(
            restarted(&["web"], 1).describe(),
            "web restarted once in the last 1m30s"
        );
        assert_eq!(
            restarted(&["web", "api"], 3).describe(),
            "web and api restarted 3 times in the last 1m30s"
        );
        assert_eq!(
            restarted(&["web", "api", "db", "q"], 4).describe(),
            "web, api and 2 more restarted 4 times in the last 1m30s"
        );
    }

    #[test]
    fn progressing_waits_and_failed_or_unverified_refuse() {
        let soak = Duration::ZERO;
        assert!(
            matches!(decide(State::Progressing, "rolling", None, soak, NOW), Gate::Waiting { reason } if reason == "rolling")
        );
        assert!(matches!(
            decide(State::Failed, "crash", at(NOW - 9999), soak, NOW),
            Gate::Refused {
                state: State::Failed,
                ..
            }
        ));
        assert!(matches!(
            decide(State::Unverified, "2 not checked", None, soak, NOW),
            Gate::Refused {
                state: State::Unverified,
                ..
            }
        ));
    }

    #[test]
    fn the_promotion_status_follows_the_gate() {
        const PR: ChangeRequestNoun = ChangeRequestNoun::PullRequest;
        const MR: ChangeRequestNoun = ChangeRequestNoun::MergeRequest;
        let soak = Duration::from_secs(1800);
        let open = Gate::Open { since: NOW - 3600 };
        assert_eq!(
            promotion_status(&open, "staging", soak, true, PR).0,
            StatusState::Success
        );
        assert_eq!(
            promotion_status(&open, "staging", soak, false, PR).0,
            StatusState::Pending
        );
        assert_eq!(
            promotion_status(&open, "staging", soak, false, MR).1,
            "staging now runs other digests; this merge request is being updated"
        );
        let refused = decide(State::Failed, "web: CrashLoopBackOff", None, soak, NOW);
        let (state, description) = promotion_status(&refused, "staging", soak, true, PR);
        assert_eq!(state, StatusState::Failure);
        assert!(
            description.contains("staging is failed: web: CrashLoopBackOff"),
            "{description}"
        );
        let waiting = decide(
            State::Progressing,
            "1 of 3 pods on an old digest",
            None,
            soak,
            NOW,
        );
        assert_eq!(
            promotion_status(&waiting, "staging", soak, true, PR).0,
            StatusState::Pending
        );
    }

    #[test]
    fn a_pass_that_cannot_read_every_manifest_holds_the_pull_request_pending() {
        let (state, description) = blocked_status(
            2,
            "overlays/production/kustomization.yaml:3:1: invalid YAML",
        );
        assert_eq!(state, StatusState::Pending);
        assert!(
            description.starts_with(
                "not updated: 2 manifest(s) or field(s) cannot be read: overlays/production"
            ),
            "{description}"
        );
    }

    #[test]
    fn descriptions_stay_within_what_github_accepts() {
        let long = "x".repeat(500);
        let (_, d) = stage_status(State::Failed, &long, None, 1, "f");
        assert_eq!(d.chars().count(), MAX_DESCRIPTION);
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(1800)), "30m");
        assert_eq!(human(Duration::from_secs(3900)), "1h5m");
        assert_eq!(human(Duration::ZERO), "0s");
    }

    #[test]
    fn a_soak_start_read_back_is_believed_no_further_back_than_tagpin_saw_the_run_begin() {
        let read = |since| {
            Some(SoakStart {
                since,
                restarts: Some(2),
            })
        };
        assert_eq!(
            within_sight(read(100), 400),
            read(400),
            "a replayed older start"
        );
        assert_eq!(
            within_sight(read(500), 400),
            read(500),
            "a later start stands"
        );
        assert_eq!(
            within_sight(None, 400),
            None,
            "no record: the soak starts now"
        );
    }

    #[test]
    fn the_soak_memory_forgets_a_run_at_a_break_and_outlives_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tagpin-soaks.json");
        let memory = SoakMemory::at(path.clone());
        assert_eq!(memory.observe("staging", Some("set-a"), 100), Some(100));
        assert_eq!(memory.observe("staging", Some("set-a"), 200), Some(100));
        assert_eq!(memory.observe("qa", Some("set-q"), 200), Some(200));
        // Another process sharing the cache (or this one restarted) remembers both runs.
        let again = SoakMemory::at(path.clone());
        assert_eq!(again.observe("staging", Some("set-a"), 300), Some(100));
        // A break ends the run; the next convergence starts a new one.
        assert_eq!(again.observe("staging", None, 400), None);
        assert_eq!(memory.observe("staging", Some("set-a"), 500), Some(500));
        // Other digests are another run.
        assert_eq!(memory.observe("staging", Some("set-b"), 600), Some(600));
        assert_eq!(memory.observe("qa", Some("set-q"), 600), Some(200));
        // A file that is not tagpin's starts afresh: soaks start over, never earlier.
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(memory.observe("qa", Some("set-q"), 700), Some(700));
    }
}
