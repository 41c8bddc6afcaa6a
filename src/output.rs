//! What each command prints, and the exit code it ends with.
//!
//! Commands return data; this module alone renders it, as human text or as one JSON document
//! (`--output json`), and decides the exit code. Rendering is pure ([`render`] returns what
//! would be written), so each report's text and code are unit-tested; [`print`] writes it:
//! results on stdout, errors on stderr, skips in the log.
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | done, or nothing to do |
//! | 1 | something needs attention: an image or file failed (the rest was done), or `pin --check` found references to pin |
//! | 2 | usage, configuration or fatal error: nothing was done |
//! | 3 | `verify`: the cluster is still progressing (at the timeout, with `--wait`); `promote`: the source stage is still rolling out or soaking |
//! | 4 | `verify`: unverified: some pinned image matched no live workload, a manifest could not be read, or nothing was selected; `promote`: the source stage is unverified |
//!
//! `verify`'s exit code is its state and nothing else, so the headline, `state` in JSON, the
//! commit status and the code agree; a configured path the commit does not hold is a
//! configuration error (2). With `--output json`, an error that stops a command (2) is also a
//! document on stdout: `{"state": "error", "error": "…"}`.
//! `promote` exits 1 when the source stage Failed or a manifest could not be read. `audit` exits
//! 1 when a live template drifted from Git, pods of one image reference run different digests,
//! or a list or a manifest could not be read; what is only tag-only, missing or not in Git is
//! reported and exits 0.

use std::fmt::Display;
use std::io::Write;

use serde_json::json;

use crate::forge::ChangeRequestNoun;
use crate::pass::{self, Pass};
use crate::plan::Plan;
use crate::registry;
use crate::sync::{Outcome, SyncReport};
use crate::verify::judge::report;
use crate::verify::judge::verdict::State;

/// The result format on stdout (`--output`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Human,
    Json,
}

/// What rendering a report produced: the text for stdout, the error lines for stderr, what
/// was skipped (logged at info), and the exit code.
#[derive(Debug)]
pub(crate) struct Printed {
    pub(crate) stdout: String,
    pub(crate) errors: Vec<String>,
    pub(crate) skipped: Vec<String>,
    pub(crate) exit: Exit,
}

impl Printed {
    fn text(&mut self, text: &str) {
        self.stdout.push_str(text);
    }

    fn json(&mut self, value: &serde_json::Value) {
        self.stdout
            .push_str(&serde_json::to_string_pretty(value).unwrap_or_default());
        self.stdout.push('\n');
    }

    fn error(&mut self, message: impl Display) {
        self.errors.push(message.to_string());
    }

    fn skipped(&mut self, skipped: impl Display) {
        self.skipped.push(skipped.to_string());
    }

    fn problems(&mut self, pass: &Pass) {
        for skipped in &pass.skipped {
            self.skipped(skipped);
        }
        for failure in pass.failures() {
            self.error(failure);
        }
    }
}

/// What `report` prints in `format`, and its exit code.
pub(crate) fn render(report: &Report, format: OutputFormat) -> Printed {
    let mut out = Printed {
        stdout: String::new(),
        errors: Vec::new(),
        skipped: Vec::new(),
        exit: Exit::Ok,
    };
    out.exit = match report {
        Report::Resolve(r) => render_resolve(r, format, &mut out),
        Report::Plan(pass, mode) => render_plan(pass, format, *mode, &mut out),
        Report::Pin(pass, written) => render_pin(pass, written, format, &mut out),
        Report::Sync(r) => render_sync(r, format, &mut out),
        Report::Verify(r) => render_verify(r, format, &mut out),
        Report::Audit(r) => render_audit(r, format, &mut out),
        Report::Promote(r) => render_promote(r, format, &mut out),
        Report::Delivery(r) => render_delivery(r, format, &mut out),
        Report::Stopped => Exit::Ok,
        // A document meant for `kubectl apply -f -`: the same bytes in either format.
        Report::Document(text) => {
            out.stdout.push_str(text);
            Exit::Ok
        }
    };
    out
}

/// What an error that stopped the command prints: a line on stderr and, with `--output json`,
/// a document on stdout, so a script reading stdout gets one for every exit code.
pub(crate) fn render_error(error: &dyn Display, format: OutputFormat) -> Printed {
    let mut out = Printed {
        stdout: String::new(),
        errors: vec![error.to_string()],
        skipped: Vec::new(),
        exit: Exit::Fatal,
    };
    if format == OutputFormat::Json {
        out.json(&json!({ "state": "error", "error": error.to_string() }));
    }
    out
}

/// Writes what was rendered and returns its exit code. A closed pipe (`tagpin plan … | head`)
/// is not an error.
pub(crate) fn print(printed: Printed) -> Exit {
    for skipped in &printed.skipped {
        tracing::info!("skipped {skipped}");
    }
    for error in &printed.errors {
        eprintln!("error: {error}");
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out
        .write_all(printed.stdout.as_bytes())
        .and_then(|_| out.flush())
    {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to stdout: {e}");
        }
    }
    printed.exit
}

/// The process exit code; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Attention = 1,
    Fatal = 2,
    /// `verify`: still progressing when it stopped looking.
    Progressing = 3,
    /// `verify`: something pinned was not checked; never reported as converged.
    Unverified = 4,
}

/// What a command produced, for the printer.
pub(crate) enum Report {
    Resolve(ResolveReport),
    Plan(Pass, Mode),
    Pin(Pass, Vec<pass::WriteOutcome>),
    Sync(SyncReport),
    Verify(VerifyReport),
    Audit(crate::audit::AuditReport),
    Promote(crate::promote::PromoteReport),
    /// `tagpin report`.
    Delivery(crate::delivery::DeliveryReport),
    Stopped,
    /// YAML printed as it is (`tagpin crd`).
    Document(String),
}

/// The answer for each image asked, in the order asked.
pub(crate) struct ResolveReport {
    pub(crate) lone: bool,
    pub(crate) rows: Vec<(String, Result<registry::Resolved, ResolveFailure>)>,
}

/// Why one image asked of `tagpin resolve` has no digest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResolveFailure {
    #[error(transparent)]
    Reference(#[from] crate::reference::ParseError),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    /// The client gave no answer for it: a bug, never the registry's doing.
    #[error("{image}: not resolved")]
    NotResolved { image: String },
}

/// One line per image; a lone image prints just its digest, so `$(tagpin resolve nginx)` works
/// in scripts the way `crane digest` does.
fn render_resolve(report: &ResolveReport, format: OutputFormat, out: &mut Printed) -> Exit {
    let mut failed = false;
    let mut rows = Vec::new();
    let mut human = String::new();
    for (image, outcome) in &report.rows {
        match outcome {
            Ok(resolved) => {
                rows.push(
                    json!({"image": image, "digest": resolved.digest.to_string(),
                    "kind": resolved.kind, "media_type": resolved.media_type}),
                );
                if report.lone {
                    human.push_str(&format!("{}\n", resolved.digest));
                } else {
                    human.push_str(&format!("{image}\t{}\n", resolved.digest));
                }
            }
            Err(e) => {
                failed = true;
                out.error(e);
                rows.push(json!({"image": image, "error": e.to_string()}));
            }
        }
    }
    match format {
        OutputFormat::Human => out.text(&human),
        OutputFormat::Json => out.json(&json!({ "images": rows })),
    }
    if failed {
        Exit::Attention
    } else {
        Exit::Ok
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Plan,
    Check,
}

fn render_plan(pass: &Pass, format: OutputFormat, mode: Mode, out: &mut Printed) -> Exit {
    out.problems(pass);
    match format {
        OutputFormat::Human => {
            let mut text = String::new();
            for file in &pass.plan.files {
                text.push_str(&file.diff);
            }
            text.push_str(&read_lines(pass));
            text.push_str(&held_lines(&pass.plan.held));
            text.push_str(&summary_line(&pass.plan));
            out.text(&text);
        }
        OutputFormat::Json => out.json(&plan_json(pass, None)),
    }
    let needs_pinning = mode == Mode::Check && !pass.plan.changes.is_empty();
    if needs_pinning || pass.has_failures() {
        Exit::Attention
    } else {
        Exit::Ok
    }
}

fn render_pin(
    pass: &Pass,
    written: &[pass::WriteOutcome],
    format: OutputFormat,
    out: &mut Printed,
) -> Exit {
    out.problems(pass);
    let mut write_failed = false;
    for outcome in written {
        if let Err(e) = &outcome.result {
            write_failed = true;
            out.error(format!("{}: cannot write: {e}", outcome.path.display()));
        }
    }
    match format {
        OutputFormat::Human => {
            let mut text = String::new();
            for outcome in written.iter().filter(|o| o.result.is_ok()) {
                text.push_str(&format!("pinned {}\n", outcome.path.display()));
            }
            text.push_str(&read_lines(pass));
            text.push_str(&held_lines(&pass.plan.held));
            text.push_str(&summary_line(&pass.plan));
            out.text(&text);
        }
        OutputFormat::Json => out.json(&plan_json(pass, Some(written))),
    }
    if write_failed || pass.has_failures() {
        Exit::Attention
    } else {
        Exit::Ok
    }
}

fn summary_line(plan: &Plan) -> String {
    let s = &plan.summary;
    let held = match s.held {
        0 => String::new(),
        n => format!(", {n} held"),
    };
    format!(
        "{} image reference(s) in {} file(s): {} to pin, {} stale pin(s) to update, {} already current, {} digest-only left alone, {} failed{held}; {} file(s) to change\n",
        s.references, s.files_scanned, s.to_pin, s.to_update, s.current, s.digest_only, s.failed, s.files_changed
    )
}

/// One line per field a comment holds where it is (`# tagpin: hold`): never changed, and
/// never passed over in silence.
fn held_lines(held: &[crate::plan::Held]) -> String {
    held.iter().map(|h| format!("held: {h}\n")).collect()
}

/// What the pass read, before the summary: the kinds whose images it found ("kinds read:
/// Deployment (2), Rollout (1)"), and the manifests it read that hold no image, each with what
/// it holds, so that no file read is passed over in silence.
fn read_lines(pass: &Pass) -> String {
    let mut text = String::new();
    if !pass.kinds.is_empty() {
        let kinds: Vec<String> = pass
            .kinds
            .iter()
            .map(|(kind, images)| format!("{kind} ({images})"))
            .collect();
        text.push_str(&format!("kinds read: {}\n", kinds.join(", ")));
    }
    if !pass.without_images.is_empty() {
        let files: Vec<String> = pass
            .without_images
            .iter()
            .map(ToString::to_string)
            .collect();
        text.push_str(&format!(
            "no image in {} file(s): {}\n",
            files.len(),
            files.join(", ")
        ));
    }
    text
}

fn plan_json(pass: &Pass, written: Option<&[pass::WriteOutcome]>) -> serde_json::Value {
    let mut value = json!({
        "summary": pass.plan.summary,
        "kinds": pass.kinds,
        "files_without_images": pass.without_images,
        "changes": pass.plan.changes,
        "failures": pass.failures().iter().map(|f| f.to_string()).collect::<Vec<_>>(),
        "skipped": pass.skipped,
        "held": pass.plan.held,
        "diff": pass.plan.files.iter().map(|f| f.diff.as_str()).collect::<String>(),
    });
    if let Some(written) = written {
        value["written"] = written
            .iter()
            .filter(|o| o.result.is_ok())
            .map(|o| json!(o.path.display().to_string()))
            .collect();
    }
    value
}

/// What `verify` found, for the printer.
pub(crate) struct VerifyReport {
    pub(crate) check: crate::verify::judge::check::Check,
    pub(crate) expectations: crate::verify::judge::check::Expectations,
}

fn render_promote(
    report: &crate::promote::PromoteReport,
    format: OutputFormat,
    out: &mut Printed,
) -> Exit {
    use crate::promote::Gate;
    for failure in &report.failures {
        out.error(failure);
    }
    match format {
        OutputFormat::Json => out.json(&serde_json::to_value(report).unwrap_or_default()),
        OutputFormat::Human => {
            let mut text = format!(
                "{} -> {} ({} at {}): {}\n",
                report.source.stage,
                report.stage,
                report.source.state.as_str(),
                &report.source.commit[..report.source.commit.len().min(12)],
                report.reason
            );
            match &report.outcome {
                Some(Outcome::DryRun {
                    branch,
                    title,
                    body,
                }) => {
                    text.push_str(&report.diff);
                    text.push_str(&format!(
                        "dry run: would propose on {branch}:\ntitle: {title}\n\n{body}\n"
                    ));
                }
                Some(Outcome::NothingToDo) => text.push_str(&format!(
                    "nothing to promote: {} already pins what {} runs\n",
                    report.stage, report.source.stage
                )),
                Some(Outcome::Committed { branch, commit, .. }) => text.push_str(&format!(
                    "committed {commit} to {branch}: {} image field(s) promoted from {}\n",
                    report.changes.len(),
                    report.source.stage
                )),
                Some(outcome) => {
                    let group = crate::sync::GroupReport {
                        group: report.stage.clone(),
                        outcome: outcome.clone(),
                        changes: report.changes.clone(),
                        diff: String::new(),
                    };
                    text.push_str(&outcome_line(&report.stage, &group, report.noun));
                    text.push('\n');
                }
                None => text.push_str("nothing promoted\n"),
            }
            for skipped in &report.skipped_text {
                text.push_str(&format!("  {skipped}\n"));
            }
            text.push_str(&held_lines(&report.held));
            out.text(&text);
        }
    }
    match &report.gate {
        Gate::Refused {
            state: State::Unverified,
            ..
        } => Exit::Unverified,
        Gate::Refused { .. } => Exit::Attention,
        _ if !report.failures.is_empty() => Exit::Attention,
        Gate::Waiting { .. } | Gate::Soaking { .. } => Exit::Progressing,
        Gate::Open { .. } => Exit::Ok,
    }
}

fn render_verify(report: &VerifyReport, format: OutputFormat, out: &mut Printed) -> Exit {
    let VerifyReport {
        check,
        expectations,
    } = report;
    for skipped in &expectations.skipped {
        out.skipped(skipped);
    }
    for failure in &expectations.failures {
        out.error(failure);
    }
    match format {
        OutputFormat::Json => {
            let mut document = json!({
                "state": check.state,
                "summary": check.summary,
                "verdicts": check.verdicts,
                "not_verified": check.not_verified(expectations).collect::<Vec<_>>(),
                "failures": expectations.failures,
                "skipped": expectations.skipped,
            });
            // Only when a GitOps object applies the pins, so other documents keep their shape.
            if !check.gitops.objects.is_empty() {
                document["gitops"] = json!(check.gitops.objects);
            }
            out.json(&document)
        }
        OutputFormat::Human => {
            let mut text = format!("{}: {}\n", report::state_word(check.state), check.summary);
            for v in &check.verdicts {
                text.push_str(&format!(
                    "  {} {}: {} ({} of {} pods on {}) {}\n",
                    v.workload,
                    v.container,
                    report::state_word(v.state),
                    v.pods_on_pinned,
                    v.pods_total,
                    v.pinned_digest,
                    v.reason
                ));
                if !v.finished_pods.is_empty() {
                    text.push_str(&format!(
                        "    not counted (ended or being deleted): {}\n",
                        v.finished_pods.join(", ")
                    ));
                }
            }
            for object in &check.gitops.objects {
                text.push_str(&format!("  {}\n", object.summary));
            }
            for n in check.not_verified(expectations) {
                text.push_str(&format!(
                    "  {} {}: not verified: {}\n",
                    n.workload,
                    n.image,
                    n.why()
                ));
            }
            out.text(&text);
        }
    }
    // The exit code is the state, nothing else: a manifest that could not be read leaves its
    // pins unchecked, which the state already says (Unverified, unless something Failed).
    match check.state {
        State::Failed => Exit::Attention,
        State::Converged => Exit::Ok,
        State::Progressing => Exit::Progressing,
        State::Unverified => Exit::Unverified,
    }
}

/// `audit`: a headline, one table line per workload and container, then what the lines do not
/// hold (what drifted and how, the references running several digests, what was not audited
/// or read); or one JSON document.
/// `tagpin report`: the JSON of issue #39 as it is, or a table per stage and the changes.
fn render_delivery(
    report: &crate::delivery::DeliveryReport,
    format: OutputFormat,
    out: &mut Printed,
) -> Exit {
    match format {
        OutputFormat::Json => out.json(&serde_json::to_value(report).unwrap_or_default()),
        OutputFormat::Human => out.text(&delivery_text(report)),
    }
    Exit::Ok
}

fn delivery_text(report: &crate::delivery::DeliveryReport) -> String {
    let seconds = |s: Option<i64>| s.map_or("-".to_string(), |s| format!("{s}s"));
    let width = report
        .stages
        .iter()
        .map(|s| s.name.len())
        .max()
        .unwrap_or(0)
        .max("stage".len());
    let mut text = format!("Delivery since {}\n\n", report.since);
    text.push_str(&format!(
        "{:width$}  deployments  failures  failure rate  lead time median / p90  time to restore median\n",
        "stage"
    ));
    for s in &report.stages {
        let rate = s
            .change_failure_rate
            .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
        let lead = format!(
            "{} / {}",
            seconds(s.lead_time_seconds.median),
            seconds(s.lead_time_seconds.p90)
        );
        text.push_str(&format!(
            "{:width$}  {:>11}  {:>8}  {:>12}  {:>22}  {:>22}\n",
            s.name,
            s.deployments,
            s.failures,
            rate,
            lead,
            seconds(s.time_to_restore_seconds.median),
        ));
    }
    if !report.changes.is_empty() {
        text.push_str("\nchanges, oldest first:\n");
    }
    for c in &report.changes {
        text.push_str(&format!(
            "  {} {}@{}: {}, pinned {}, converged {} (built {}, from {})\n",
            c.stage,
            c.image,
            c.digest,
            c.outcome.name(),
            c.pinned,
            c.converged.as_deref().unwrap_or("-"),
            c.created,
            c.created_from.name(),
        ));
    }
    text
}

fn render_audit(
    report: &crate::audit::AuditReport,
    format: OutputFormat,
    out: &mut Printed,
) -> Exit {
    for skipped in &report.skipped {
        out.skipped(skipped);
    }
    for failure in &report.failures {
        out.error(failure);
    }
    let state = match report.clean() {
        true => "clean",
        false => "attention",
    };
    let audit = &report.audit;
    let counts = audit.workloads_with();
    match format {
        OutputFormat::Json => {
            let mut summary = serde_json::Map::new();
            summary.insert("workloads".into(), json!(audit.workloads()));
            for (finding, n) in &counts {
                summary.insert(finding.as_str().into(), json!(n));
            }
            out.json(&json!({
                "state": state,
                "branch": report.branch,
                "commit": report.commit,
                "namespaces": report.namespaces,
                "summary": summary,
                "containers": audit.rows,
                "mixed": audit.mixed,
                "not_audited": audit.not_audited,
                "unread": audit.unread,
                "failures": report.failures,
                "skipped": report.skipped,
            }))
        }
        OutputFormat::Human => out.text(&audit_text(report, state, &counts)),
    }
    match report.clean() {
        true => Exit::Ok,
        false => Exit::Attention,
    }
}

fn audit_text(
    report: &crate::audit::AuditReport,
    state: &str,
    counts: &std::collections::BTreeMap<crate::verify::judge::findings::Finding, usize>,
) -> String {
    let audit = &report.audit;
    let found: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(finding, n)| format!("{n} {finding}"))
        .collect();
    let namespaces = match report.namespaces.is_empty() {
        true => "no namespace".to_string(),
        false => report.namespaces.join(", "),
    };
    let mut text = format!(
        "{state}: {} workload(s) in {namespaces} at {} {}{}\n",
        audit.workloads(),
        report.branch,
        &report.commit[..report.commit.len().min(12)],
        match found.is_empty() {
            true => String::new(),
            false => format!(": {}", found.join(", ")),
        }
    );
    let mut table = vec![[
        "WORKLOAD".to_string(),
        "CONTAINER".to_string(),
        "FINDING".to_string(),
        "GIT".to_string(),
        "TEMPLATE".to_string(),
        "RUNNING".to_string(),
    ]];
    for row in &audit.rows {
        let findings: Vec<&str> = row.findings.iter().map(|f| f.as_str()).collect();
        table.push([
            row.workload.to_string(),
            row.container.clone(),
            findings.join(","),
            row.git.as_deref().map_or("-".into(), short_reference),
            row.template.as_deref().map_or("-".into(), short_reference),
            running_cell(&row.running),
        ]);
    }
    if !audit.rows.is_empty() {
        text.push_str(&columns(&table));
    }
    for row in &audit.rows {
        if let Some(drift) = &row.drift {
            let (w, c) = (&row.workload, &row.container);
            text.push_str(&format!("drift: {w} {c}: {drift}\n"));
        }
        if let Some(note) = &row.note {
            let (w, c) = (&row.workload, &row.container);
            text.push_str(&format!("note: {w} {c}: {note}\n"));
        }
    }
    for mixed in &audit.mixed {
        let digests: Vec<String> = mixed
            .digests
            .iter()
            .map(|d| pods_on(&short_digest(&d.digest), d.pods, &d.nodes))
            .collect();
        text.push_str(&format!(
            "mixed: {} runs {}\n",
            mixed.image,
            digests.join("; ")
        ));
    }
    for n in &audit.not_audited {
        text.push_str(&format!(
            "not audited: {} {}: {}\n",
            n.workload, n.image, n.reason
        ));
    }
    for unread in &audit.unread {
        text.push_str(&format!("unread: {unread}\n"));
    }
    text
}

/// `sha256:0f152bc1261a: 2 pods on node-a, node-b`.
fn pods_on(digest: &str, pods: usize, nodes: &[String]) -> String {
    let pods = match pods {
        1 => "1 pod".to_string(),
        n => format!("{n} pods"),
    };
    match nodes.is_empty() {
        true => format!("{digest}: {pods}"),
        false => format!("{digest}: {pods} on {}", nodes.join(", ")),
    }
}

/// What a row's pods run, in one cell.
fn running_cell(running: &[crate::verify::judge::findings::Running]) -> String {
    if running.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = running
        .iter()
        .map(|r| {
            let digest = match &r.stands_for {
                Some(image) => format!("{} (of {})", short_digest(&r.digest), short_digest(image)),
                None => short_digest(&r.digest),
            };
            pods_on(&digest, r.pods.len(), &r.nodes)
        })
        .collect();
    parts.join("; ")
}

/// `ghcr.io/acme/web:1@sha256:0f152bc1261a`: a reference with its digest cut for a table.
fn short_reference(image: &str) -> String {
    match image.rsplit_once('@') {
        Some((name, digest)) => format!("{name}@{}", short_digest(digest)),
        None => image.to_string(),
    }
}

/// `sha256:0f152bc1261a`: enough to tell digests apart in a table.
fn short_digest(digest: &str) -> String {
    match digest.split_once(':') {
        Some((algorithm, hex)) => format!("{algorithm}:{}", &hex[..hex.len().min(12)]),
        None => digest.to_string(),
    }
}

/// Left-aligned columns two spaces apart; the last one is not padded.
fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn render_sync(report: &SyncReport, format: OutputFormat, out: &mut Printed) -> Exit {
    for skipped in &report.skipped {
        out.skipped(skipped);
    }
    for failure in &report.failures {
        out.error(failure);
    }
    match format {
        OutputFormat::Json => out.json(&serde_json::to_value(report).unwrap_or_default()),
        OutputFormat::Human => out.text(&sync_text(report)),
    }
    if report.has_failures() {
        Exit::Attention
    } else {
        Exit::Ok
    }
}

fn sync_text(report: &SyncReport) -> String {
    let mut text = held_lines(&report.held);
    for group in &report.groups {
        if let Outcome::DryRun { .. } = &group.outcome {
            text.push_str(&group.diff);
        }
        text.push_str(&outcome_line(&report.target, group, report.noun));
        text.push('\n');
    }
    text
}

/// One line for what a group's write did; `target` is the branch (or stage) written to, and
/// `noun` how the forge names its change requests.
fn outcome_line(target: &str, group: &crate::sync::GroupReport, noun: ChangeRequestNoun) -> String {
    let images = group.changes.len();
    match &group.outcome {
        Outcome::NothingToDo => format!("{target}: nothing to pin"),
        Outcome::Committed { branch, commit, .. } => {
            format!("committed {commit} to {branch}: {images} image field(s) pinned")
        }
        Outcome::PullRequestOpened { number, url, branch } => {
            format!("opened {} from {branch}: {url}", noun.name(*number))
        }
        Outcome::PullRequestUpdated { number, url, branch } => {
            format!("updated {} from {branch}: {url}", noun.name(*number))
        }
        Outcome::PullRequestUnchanged { number, url, .. } => {
            format!("{} already proposes these digests: {url}", noun.name(*number))
        }
        Outcome::ClosedByHand { number, branch } => format!(
            "{} from {branch} was closed by hand for these same digests; not reopening",
            noun.name(*number)
        ),
        Outcome::DryRun { branch, title, body } => {
            format!("dry run: would propose on {branch}:\ntitle: {title}\n\n{body}")
        }
        Outcome::EditedByHand {
            number,
            url,
            branch,
            commit,
        } => format!(
            "{}: {branch} was edited by hand (its tip {} is not tagpin's); left alone until the {} is closed or the branch is reset: {url}",
            noun.name(*number),
            &commit[..commit.len().min(12)],
            noun.word()
        ),
        Outcome::Failed { branch, reason } => format!("{branch}: not proposed: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Digest;
    use crate::registry::{ManifestKind, Resolved};
    use crate::verify::judge::check::{Check, Expectations};

    fn verify_report(state: State, failures: &[&str]) -> Report {
        Report::Verify(VerifyReport {
            check: Check {
                state,
                summary: "1 image(s) checked".into(),
                verdicts: Vec::new(),
                gitops: Default::default(),
            },
            expectations: Expectations {
                failures: failures.iter().map(|f| f.to_string()).collect(),
                ..Expectations::default()
            },
        })
    }

    fn json_of(printed: &Printed) -> serde_json::Value {
        serde_json::from_str(&printed.stdout).expect("one JSON document on stdout")
    }

    #[test]
    fn the_delivery_report_prints_the_issue_s_json_and_a_table() {
        use crate::delivery::figures::{CreatedFrom, Kind, Landed, Recorded, Verdict};
        let landed = vec![Landed {
            commit: "c0".into(),
            position: 0,
            time: 1_000,
            stage: "staging".into(),
            kind: Kind::Deployment,
            images: vec![crate::delivery::figures::Image {
                image: "ghcr.io/acme/web".into(),
                digest: "sha256:aa".into(),
                created: (400, CreatedFrom::FirstSeen),
            }],
            held: Vec::new(),
        }];
        let recorded = vec![Recorded {
            commit: "c0".into(),
            position: 0,
            stage: "staging".into(),
            verdict: Verdict::Converged,
            at: 1_060,
        }];
        let stages = ["staging".to_string(), "production".to_string()];
        let report = crate::delivery::report::build(&stages, &landed, &recorded, 0);
        let json = render(&Report::Delivery(report.clone()), OutputFormat::Json);
        assert_eq!(json.exit, Exit::Ok);
        let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        assert_eq!(keys(&value), ["changes", "since", "stages"]);
        assert_eq!(
            keys(&value["stages"][0]),
            [
                "change_failure_rate",
                "deployments",
                "failures",
                "lead_time_seconds",
                "name",
                "time_to_restore_seconds"
            ]
        );
        assert_eq!(
            keys(&value["changes"][0]),
            [
                "commit",
                "converged",
                "created",
                "created_from",
                "digest",
                "image",
                "outcome",
                "pinned",
                "stage"
            ]
        );
        assert_eq!(value["stages"][0]["lead_time_seconds"]["median"], 660);
        assert_eq!(
            value["stages"][1]["change_failure_rate"],
            serde_json::Value::Null
        );
        assert_eq!(value["changes"][0]["created_from"], "first_seen");
        let human = render(&Report::Delivery(report), OutputFormat::Human).stdout;
        assert!(
            human.starts_with("Delivery since 1970-01-01T00:00:00Z\n"),
            "{human}"
        );
        let words = |line: &str| line.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            human
                .lines()
                .any(|l| words(l) == "staging 1 0 0% 660s / 660s -"),
            "{human}"
        );
        assert!(
            human.contains("ghcr.io/acme/web@sha256:aa: converged, pinned 1970-01-01T00:16:40Z"),
            "{human}"
        );
    }

    #[test]
    fn verify_exits_with_its_state_and_says_the_same_in_json_and_text() {
        let cases = [
            (State::Converged, Exit::Ok, "converged", "Converged"),
            (State::Failed, Exit::Attention, "failed", "Failed"),
            (
                State::Progressing,
                Exit::Progressing,
                "progressing",
                "Progressing",
            ),
            (
                State::Unverified,
                Exit::Unverified,
                "unverified",
                "Unverified",
            ),
        ];
        for (state, exit, word, headline) in cases {
            let report = verify_report(state, &[]);
            let json = render(&report, OutputFormat::Json);
            assert_eq!(json.exit, exit, "{word}");
            assert_eq!(json_of(&json)["state"], word);
            let human = render(&report, OutputFormat::Human);
            assert_eq!(human.exit, exit, "{word}");
            assert!(
                human.stdout.starts_with(&format!("{headline}: ")),
                "{}",
                human.stdout
            );
        }
    }

    fn audit_report(rows: Vec<crate::verify::judge::findings::Row>) -> Report {
        Report::Audit(crate::audit::AuditReport {
            branch: "main".into(),
            commit: "0123456789abcdef0123".into(),
            namespaces: vec!["shop".into()],
            audit: crate::verify::judge::findings::Audit {
                rows,
                ..Default::default()
            },
            failures: Vec::new(),
            skipped: Vec::new(),
            resolved_tags: false,
        })
    }

    fn audit_row(
        workload: &str,
        findings: &[crate::verify::judge::findings::Finding],
    ) -> crate::verify::judge::findings::Row {
        crate::verify::judge::findings::Row {
            workload: workload.parse().unwrap(),
            container: "app".into(),
            findings: findings.to_vec(),
            git: Some("web:1".into()),
            template: Some("web:1".into()),
            drift: None,
            running: vec![crate::verify::judge::findings::Running {
                digest: format!("sha256:{}", "ab".repeat(32)),
                stands_for: None,
                image: "web:1".into(),
                pods: vec!["web-1".into(), "web-2".into()],
                nodes: vec!["node-a".into()],
            }],
            note: None,
        }
    }

    #[test]
    fn an_audit_exits_1_on_drift_mixed_or_an_unreadable_manifest_and_0_otherwise() {
        use crate::verify::judge::findings::Finding;
        let clean = audit_report(vec![
            audit_row("shop/Deployment/web", &[Finding::TagOnly]),
            audit_row("shop/Deployment/other", &[Finding::NotInGit]),
            audit_row("shop/Deployment/gone", &[Finding::Missing]),
        ]);
        let printed = render(&clean, OutputFormat::Human);
        assert_eq!(printed.exit, Exit::Ok);
        assert_eq!(
            printed.stdout,
            "clean: 3 workload(s) in shop at main 0123456789ab: 1 tag-only, 1 not-in-git, 1 missing\n\
             WORKLOAD               CONTAINER  FINDING     GIT    TEMPLATE  RUNNING\n\
             shop/Deployment/web    app        tag-only    web:1  web:1     sha256:abababababab: 2 pods on node-a\n\
             shop/Deployment/other  app        not-in-git  web:1  web:1     sha256:abababababab: 2 pods on node-a\n\
             shop/Deployment/gone   app        missing     web:1  web:1     sha256:abababababab: 2 pods on node-a\n"
        );
        for failing in [Finding::Drift, Finding::Mixed, Finding::Unread] {
            let report = audit_report(vec![audit_row(
                "shop/Deployment/web",
                &[Finding::Pinned, failing],
            )]);
            let json = render(&report, OutputFormat::Json);
            assert_eq!(json.exit, Exit::Attention, "{failing}");
            let document = json_of(&json);
            assert_eq!(document["state"], "attention");
            assert_eq!(document["summary"][failing.as_str()], 1);
            assert_eq!(document["summary"]["workloads"], 1);
            assert_eq!(document["containers"][0]["findings"][1], failing.as_str());
        }
        let Report::Audit(mut broken) = clean else {
            unreachable!()
        };
        broken.failures = vec!["apps/web.yaml:3:1: invalid YAML".into()];
        let printed = render(&Report::Audit(broken), OutputFormat::Json);
        assert_eq!(printed.exit, Exit::Attention);
        assert_eq!(printed.errors, vec!["apps/web.yaml:3:1: invalid YAML"]);
    }

    #[test]
    fn an_unreadable_manifest_is_named_and_exits_as_the_state_says() {
        let broken = "apps/broken.yaml:5:1: invalid YAML: did not find expected key";
        let report = verify_report(State::Unverified, &[broken]);
        let printed = render(&report, OutputFormat::Json);
        assert_eq!(printed.exit, Exit::Unverified);
        assert_eq!(printed.errors, vec![broken.to_string()]);
        assert_eq!(json_of(&printed)["failures"][0], broken);
        // Something that Failed still decides the code.
        let report = verify_report(State::Failed, &[broken]);
        assert_eq!(render(&report, OutputFormat::Json).exit, Exit::Attention);
    }

    #[test]
    fn an_error_that_stops_a_command_is_a_json_document_too() {
        let error = "configuration: paths names aps, which commit 1a2b does not hold";
        let json = render_error(&error, OutputFormat::Json);
        assert_eq!(json.exit, Exit::Fatal);
        assert_eq!(json_of(&json), json!({"state": "error", "error": error}));
        assert_eq!(json.errors, vec![error.to_string()]);
        let human = render_error(&error, OutputFormat::Human);
        assert_eq!((human.exit, human.stdout.as_str()), (Exit::Fatal, ""));
    }

    #[test]
    fn one_resolved_image_prints_its_digest_alone_and_a_failure_exits_1() {
        let digest = Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap();
        let resolved = Resolved {
            digest: digest.clone(),
            kind: ManifestKind::Image,
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        };
        let lone = Report::Resolve(ResolveReport {
            lone: true,
            rows: vec![("nginx:1.27".into(), Ok(resolved.clone()))],
        });
        let printed = render(&lone, OutputFormat::Human);
        assert_eq!(printed.stdout, format!("{digest}\n"));
        assert_eq!(printed.exit, Exit::Ok);

        let two = Report::Resolve(ResolveReport {
            lone: false,
            rows: vec![
                ("nginx:1.27".into(), Ok(resolved)),
                (
                    "acme/gone:1".into(),
                    Err(registry::RegistryError::NotFound {
                        image: "acme/gone:1".into(),
                        host: "registry-1.docker.io".into(),
                        detail: String::new(),
                    }
                    .into()),
                ),
            ],
        });
        let printed = render(&two, OutputFormat::Human);
        assert_eq!(printed.stdout, format!("nginx:1.27\t{digest}\n"));
        assert_eq!(
            printed.errors,
            vec!["acme/gone:1: not found at registry registry-1.docker.io (404)".to_string()]
        );
        assert_eq!(printed.exit, Exit::Attention);
    }

    #[test]
    fn plan_and_pin_check_with_nothing_to_pin_exit_0() {
        let clean = Report::Plan(Pass::default(), Mode::Check);
        let printed = render(&clean, OutputFormat::Human);
        assert_eq!(printed.exit, Exit::Ok);
        assert!(printed
            .stdout
            .starts_with("0 image reference(s) in 0 file(s)"));
        let plan = Report::Plan(Pass::default(), Mode::Plan);
        assert_eq!(render(&plan, OutputFormat::Json).exit, Exit::Ok);
    }

    #[test]
    fn a_sync_pass_prints_one_line_per_group_and_a_failure_exits_1() {
        let report = SyncReport {
            target: "main".into(),
            groups: vec![crate::sync::GroupReport {
                group: "all".into(),
                outcome: Outcome::ClosedByHand {
                    number: 7,
                    branch: "tagpin/pin".into(),
                },
                changes: Vec::new(),
                diff: String::new(),
            }],
            failures: vec!["acme/web:1: registry answered 500".into()],
            ..SyncReport::default()
        };
        let printed = render(&Report::Sync(report), OutputFormat::Human);
        assert_eq!(
            printed.stdout,
            "pull request #7 from tagpin/pin was closed by hand for these same digests; not reopening\n"
        );
        assert_eq!(printed.exit, Exit::Attention);
    }

    #[test]
    fn on_gitlab_the_lines_name_merge_requests() {
        let group = |outcome| crate::sync::GroupReport {
            group: "all".into(),
            outcome,
            changes: Vec::new(),
            diff: String::new(),
        };
        let report = SyncReport {
            target: "main".into(),
            groups: vec![
                group(Outcome::PullRequestOpened {
                    number: 3,
                    url: "https://gitlab.example.com/g/p/-/merge_requests/3".into(),
                    branch: "tagpin/main".into(),
                }),
                group(Outcome::EditedByHand {
                    number: 4,
                    url: "u".into(),
                    branch: "tagpin/x".into(),
                    commit: "0123456789abcdef".into(),
                }),
            ],
            noun: ChangeRequestNoun::MergeRequest,
            ..SyncReport::default()
        };
        let printed = render(&Report::Sync(report), OutputFormat::Human);
        assert_eq!(
            printed.stdout,
            "opened merge request !3 from tagpin/main: https://gitlab.example.com/g/p/-/merge_requests/3\n\
             merge request !4: tagpin/x was edited by hand (its tip 0123456789ab is not tagpin's); left alone until the merge request is closed or the branch is reset: u\n"
        );
    }
}
