//! Subcommands, their flags, and running them.
//!
//! Every command returns its report or a [`CliError`]; [`run`] alone hands either to
//! [`crate::output`], which prints it and decides the exit code, as ripgrep's `main` does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::cluster::Cluster;
use crate::config::{self, Config, DurationError, Stage};
use crate::forge::ForgeClient;
use crate::manifest::walk::FileFilter;
use crate::pass;
use crate::reference::Reference;
use crate::registry::docker_config::DockerConfigError;
use crate::registry::{self, Client, CredentialStore, Settings};
use crate::sync::{SyncOptions, SyncReport, Syncer};
use crate::verify::Source;

use crate::output;
pub use crate::output::{Exit, OutputFormat};
use crate::output::{Mode, Report, ResolveFailure, ResolveReport, VerifyReport};

/// Pins Kubernetes image tags to registry digests, byte-exactly.
#[derive(Debug, Parser)]
#[command(name = "tagpin", version, about, max_term_width = 100)]
pub struct Cli {
    /// Result format on stdout.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Human)]
    pub output: OutputFormat,

    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Log lines as JSON instead of text.
    #[arg(long, global = true)]
    pub log_json: bool,

    #[command(flatten)]
    pub registry: RegistryArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the digest each image's tag points to now (like `crane digest`).
    Resolve {
        /// Image references, e.g. nginx:1.27 or quay.io/acme/web:latest.
        #[arg(required = true, value_name = "IMAGE")]
        images: Vec<String>,
    },
    /// Show the diff that pinning would make, and a summary; write nothing.
    Plan(ScanArgs),
    /// Rewrite manifests in place to `repo:tag@sha256:<digest>`.
    Pin {
        #[command(flatten)]
        scan: ScanArgs,
        /// Write nothing; exit 1 if any image is unpinned or its pin is stale (for CI).
        #[arg(long)]
        check: bool,
    },
    /// One pass over the configured Git repository: commit the pins, or open/update a PR.
    Sync {
        /// The configuration file.
        #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
        config: PathBuf,
        /// Print the plan, the diff and the pull request it would open; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Where the Git mirror is kept [default: repository.cache_dir, else
        /// $XDG_CACHE_HOME/tagpin, else ~/.cache/tagpin].
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
    },
    /// Run the controller: a sync pass every interval, registry webhooks, health and metrics.
    Run {
        /// The configuration file.
        #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
        config: PathBuf,
        /// Address for /healthz, /readyz, /metrics and /webhooks/<sender>.
        #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
        listen: std::net::SocketAddr,
        /// Also serve /healthz, /readyz and /metrics here, apart from the webhook port, so
        /// slow webhook clients never delay the kubelet's probes.
        #[arg(long, value_name = "ADDR")]
        health_listen: Option<std::net::SocketAddr>,
        /// Time between scheduled passes (with ±10% jitter): 90s, 5m, 1h.
        #[arg(long, value_name = "DURATION", default_value = "5m")]
        interval: String,
        /// Where the Git mirror is kept.
        #[arg(long, value_name = "DIR")]
        cache_dir: Option<PathBuf>,
        /// Time between verifications of what is in flight, when a cluster is reachable.
        #[arg(long, value_name = "DURATION", default_value = "30s")]
        verify_interval: String,
        /// How long work under way may go on after SIGTERM; keep it below the pod's
        /// terminationGracePeriodSeconds.
        #[arg(long, value_name = "DURATION", default_value = "30s")]
        grace_period: String,
        /// At most one webhook pass per window: the first delivery starts one at once, those
        /// that come within the window are served together at its end (500ms, 1s, 0 for none).
        #[arg(long, value_name = "DURATION", default_value = "1s")]
        webhook_window: String,
        #[command(flatten)]
        leader: LeaderElectArgs,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Run the operator: reconcile every PinnedRepository object it selects, each on its own.
    Operator(OperatorArgs),
    /// Print the PinnedRepository CustomResourceDefinition (YAML), generated from the types.
    Crd,
    /// Check that the cluster runs what a pull request, commit or branch pins, and report it.
    ///
    /// Exit 0 converged, 1 failed, 3 still progressing (at the timeout, with --wait).
    Verify(VerifyArgs),
    /// Report what runs against what Git says, per workload and container.
    ///
    /// For every workload of the namespaces the configuration deploys to: whether Git pins it
    /// by digest, whether the live template drifted from Git, which digests its pods run and on
    /// which nodes, and whether pods of one image reference run different digests.
    ///
    /// Exit 0 clean, 1 drift, mixed digests, or something that could not be read.
    Audit(AuditArgs),
    /// Carry the digests that converged in the previous stage to this one, by pull request.
    ///
    /// Exit 0 promoted (or nothing to promote), 1 the source failed, 3 the source is still
    /// rolling out or soaking, 4 the source is unverified.
    Promote(PromoteArgs),
    /// Delivery metrics (DORA) from the repository's history: deployments, change failure
    /// rate, lead time and time to restore per stage, and each change with its outcome.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The configuration file.
    #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
    pub config: PathBuf,
    /// How far back: deployments that landed within this window (30d, 12h).
    #[arg(long, value_name = "DURATION", default_value = "30d")]
    pub since: String,
    /// Only this stage of promotion.stages.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// Where the Git mirror is kept.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The configuration file.
    #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
    pub config: PathBuf,
    /// The stage to promote into (a name from promotion.stages, not the first).
    #[arg(long, value_name = "STAGE")]
    pub to: String,
    /// Verify the source stage and print what would be proposed; set no status, push nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Where the Git mirror is kept.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["pr", "commit", "branch"]))]
pub struct VerifyArgs {
    /// The configuration file.
    #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
    pub config: PathBuf,
    /// Verify what this tagpin pull request promises (its plan block), and report on it. On
    /// GitLab, N is the merge request's IID (`!N`); --mr N says the same. On Gitea, N is the
    /// pull request's number (`#N`); on Bitbucket Cloud and Data Center, the pull request's
    /// id (`#N`); on Azure DevOps, its id (`!N`).
    #[arg(long, value_name = "N", visible_alias = "mr")]
    pub pr: Option<u64>,
    /// Verify the pinned images in the manifests of this commit.
    #[arg(long, value_name = "SHA")]
    pub commit: Option<String>,
    /// Verify the pinned images in the manifests at this branch's tip.
    #[arg(long, value_name = "BRANCH")]
    pub branch: Option<String>,
    /// Keep checking (with backoff) until converged or failed, or until --timeout.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits: 90s, 10m, 1h.
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub timeout: String,
    /// The kubeconfig context [default: the stage's cluster, else verify.context, else the
    /// current one, else in-cluster].
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Verify this stage of promotion.stages: its paths, on its cluster. A promotion pull
    /// request (--pr) is verified against the stage it promotes into without this flag.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// Where the Git mirror is kept (for --commit and --branch).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// The configuration file.
    #[arg(long, short, value_name = "FILE", default_value = "tagpin.yaml")]
    pub config: PathBuf,
    /// Audit only this namespace (one the configuration deploys to).
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Audit this stage of promotion.stages: its paths, on its cluster.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// The kubeconfig context [default: the stage's cluster, else verify.context, else the
    /// first stage's cluster, else the current one, else in-cluster].
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Where the Git mirror is kept.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Manifest files or directories to scan.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Only files matching this glob (relative to a directory argument); repeatable.
    /// Default: **/*.yaml, **/*.yml, **/*.json, **/Kustomization.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// Skip files matching this glob; repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// A tagpin configuration whose `registries:` and `images.signatures` apply: digests of
    /// images an entry matches are pinned only signed, and `pin --check` also fails on a
    /// digest already pinned that is not signed.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `tagpin operator`'s flags.
#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Address for /healthz, /readyz, /metrics and /webhooks/<sender>.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub listen: std::net::SocketAddr,
    /// Also serve /healthz, /readyz and /metrics here, apart from the webhook port.
    #[arg(long, value_name = "ADDR")]
    pub health_listen: Option<std::net::SocketAddr>,
    /// Time between passes of each object: 90s, 5m, 1h. Registry answers are shared by all
    /// objects for as long.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub interval: String,
    /// Time between verifications while a verdict is still progressing.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub verify_interval: String,
    /// Each object's Git mirror lives under DIR/<namespace>/<name>
    /// [default: $XDG_CACHE_HOME/tagpin, else ~/.cache/tagpin].
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// How long reconciles under way may go on after SIGTERM.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub grace_period: String,
    /// At most one webhook-started reconcile of the objects per window: the first delivery
    /// starts one at once, those that come within the window are served together at its end
    /// (500ms, 1s, 0 for none).
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub webhook_window: String,
    /// Only objects matching this label selector (sharding: sharding.tagpin.dev/key=shard1).
    #[arg(long, value_name = "SELECTOR", env = "TAGPIN_WATCH_LABEL_SELECTOR")]
    pub watch_label_selector: Option<String>,
    /// Only objects of this namespace [default: all namespaces].
    #[arg(long, value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Objects reconciled at once. A namespace with none under way may start one beyond this,
    /// up to twice as many, so one team's hanging objects never hold up another team's.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub concurrent: u16,
    /// How long one reconcile may take, everything included (Git, registries, forge,
    /// verification); also the ceiling of the timeouts a PinnedRepository's spec sets.
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    pub reconcile_timeout: String,
    /// Let PinnedRepository objects use the controller's own registry credentials
    /// (--docker-config, its credential helpers) for this registry; repeatable. No other
    /// registry ever gets them: objects bring their own in a Secret.
    #[arg(long, value_name = "REGISTRY")]
    pub share_registry_credentials: Vec<String>,
    /// A repository whose mirror would grow larger than this is refused (Stalled,
    /// RepositoryTooLarge): 512MiB, 2GiB, or bytes.
    #[arg(long, value_name = "SIZE", default_value = "1GiB")]
    pub max_repository_size: String,
    /// Also clone repositories named by a local path or a file:// URL (a demo or a test on one
    /// machine). Without it such an object stalls: it would read the controller's own disk,
    /// another object's mirror included.
    #[arg(long)]
    pub allow_local_repositories: bool,
    /// Read each object's cluster as this ServiceAccount of the object's own namespace
    /// (impersonated) unless its spec names another (service_account_name): a shared install,
    /// where each team's RBAC decides what the team's objects see. Without it, objects that
    /// name none read with the operator's own identity.
    #[arg(long, value_name = "NAME")]
    pub default_service_account: Option<String>,
    /// Let notifications go to this host over plain http:// (a receiver inside the cluster,
    /// say); repeatable. Every other notification URL must be https://.
    #[arg(long, value_name = "HOST")]
    pub notify_allow_http: Vec<String>,
    #[command(flatten)]
    pub leader: LeaderElectArgs,
    #[command(flatten)]
    pub ui: UiArgs,
}

/// The dashboard's flags (`run` and the operator); see docs/dashboard.md.
#[derive(Debug, Clone, Args)]
pub struct UiArgs {
    /// Serve the dashboard on this address, a listener of its own (off by default: the
    /// webhook listener, which may face a registry, never serves it).
    #[arg(long, value_name = "ADDR")]
    pub ui_listen: Option<std::net::SocketAddr>,
    /// Who may see which repository: a bearer token checked with a TokenReview (`token`), an
    /// authenticating proxy's headers (`proxy`), both then checked per namespace with a
    /// SubjectAccessReview; or no check (`none`: `run`'s default, and the operator's only with
    /// --ui-allow-anonymous) [default: run none, operator token].
    #[arg(long, value_enum, value_name = "MODE")]
    pub ui_auth: Option<crate::ui::auth::Mode>,
    /// The proxy's header naming the user (`--ui-auth proxy`).
    #[arg(long, value_name = "NAME", default_value = "X-Forwarded-User")]
    pub ui_user_header: String,
    /// The proxy's header naming the user's groups, comma-separated (`--ui-auth proxy`).
    #[arg(long, value_name = "NAME", default_value = "X-Forwarded-Groups")]
    pub ui_groups_header: String,
    /// Let the operator's dashboard show every repository to anyone who reaches it
    /// (`--ui-auth none`).
    #[arg(long)]
    pub ui_allow_anonymous: bool,
}

impl UiArgs {
    /// `run`'s dashboard: one team, no check.
    fn for_run(&self) -> Result<Option<std::net::SocketAddr>, CliError> {
        match self.ui_auth {
            None | Some(crate::ui::auth::Mode::None) => Ok(self.ui_listen),
            Some(_) => Err(CliError::Flag {
                flag: "--ui-auth",
                message: "`tagpin run` serves one team's repository: only `none`; token and \
                          proxy are the operator's"
                    .into(),
            }),
        }
    }

    /// The operator's dashboard: where, and how viewers are checked.
    fn for_operator(&self) -> Result<Option<crate::operator::UiSetup>, CliError> {
        let Some(listen) = self.ui_listen else {
            return Ok(None);
        };
        let mode = self.ui_auth.unwrap_or(crate::ui::auth::Mode::Token);
        if mode == crate::ui::auth::Mode::None && !self.ui_allow_anonymous {
            return Err(CliError::Flag {
                flag: "--ui-auth",
                message: "`none` shows every tenant's repositories to anyone who reaches the \
                          listener: add --ui-allow-anonymous to mean it"
                    .into(),
            });
        }
        let header = |flag: &'static str, name: &str| {
            axum::http::HeaderName::try_from(name).map_err(|_| CliError::Flag {
                flag,
                message: format!("{name:?} is not a header name"),
            })
        };
        Ok(Some(crate::operator::UiSetup {
            listen,
            mode,
            user_header: header("--ui-user-header", &self.ui_user_header)?,
            groups_header: header("--ui-groups-header", &self.ui_groups_header)?,
        }))
    }
}

#[derive(Debug, Args)]
pub struct RegistryArgs {
    /// Reach this registry over plain HTTP; repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST[:PORT]", global = true)]
    pub insecure_registries: Vec<String>,
    /// Trust this PEM CA bundle for registries, besides the system roots; repeatable.
    #[arg(long = "ca-file", value_name = "FILE", global = true)]
    pub ca_files: Vec<PathBuf>,
    /// Directory holding the Docker config.json with registry credentials
    /// [default: $DOCKER_CONFIG, else ~/.docker].
    #[arg(long = "docker-config", value_name = "DIR", global = true)]
    pub docker_config: Option<PathBuf>,
    /// Requests in flight at once per registry host.
    #[arg(long, value_name = "N", global = true, default_value_t = registry::DEFAULT_CONCURRENCY_PER_HOST)]
    pub concurrency: usize,
    /// Timeout of one registry request, in seconds.
    #[arg(
        long = "registry-timeout",
        value_name = "SECONDS",
        global = true,
        default_value_t = 30
    )]
    pub registry_timeout: u64,
}

/// Leader election among replicas (`run`, and the operator): only the holder of a
/// `coordination.k8s.io/v1` Lease acts; see [`crate::leader`].
#[derive(Debug, Clone, Args)]
pub struct LeaderElectArgs {
    /// Act only while holding a Lease; other replicas stand by and take over when the leader
    /// stops renewing it or releases it on shutdown.
    #[arg(long)]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(long, value_name = "NAME", default_value = "tagpin-leader")]
    pub leader_elect_lease_name: String,
    /// The Lease's namespace [default: $POD_NAMESPACE, else the service account's namespace].
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// How long a Lease holds without renewal before another replica may take it (whole
    /// seconds).
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    pub leader_elect_lease_duration: String,
    /// How long the leader keeps failing to renew before it stops acting and exits; shorter
    /// than the lease duration.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub leader_elect_renew_deadline: String,
    /// Time between tries, to renew or to take over: 500ms, 2s.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub leader_elect_retry_period: String,
}

impl LeaderElectArgs {
    /// The candidate for the Lease when `--leader-elect` is on, with its identity from
    /// `POD_NAME` (or the host name) and a random suffix. Errors name the flag.
    pub(crate) async fn elector(
        &self,
        api_timeout: Duration,
    ) -> Result<Option<crate::leader::Elector>, CliError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let duration = |flag: &'static str, text: &str| {
            crate::leader::parse_duration(text)
                .map_err(|source| CliError::Duration { flag, source })
        };
        let namespace = match &self.leader_elect_namespace {
            Some(namespace) => namespace.clone(),
            None => crate::leader::default_namespace().ok_or(CliError::Flag {
                flag: "--leader-elect-namespace",
                message: "not given, and neither POD_NAMESPACE nor the service account's \
                          namespace file says which namespace tagpin runs in"
                    .into(),
            })?,
        };
        let config = crate::leader::ElectionConfig {
            lease_name: self.leader_elect_lease_name.clone(),
            namespace,
            identity: crate::leader::default_identity(),
            lease_duration: duration(
                "--leader-elect-lease-duration",
                &self.leader_elect_lease_duration,
            )?,
            renew_deadline: duration(
                "--leader-elect-renew-deadline",
                &self.leader_elect_renew_deadline,
            )?,
            retry_period: duration(
                "--leader-elect-retry-period",
                &self.leader_elect_retry_period,
            )?,
        };
        config.validate().map_err(CliError::LeaderElect)?;
        let client = crate::leader::Elector::client(api_timeout).await?;
        Ok(Some(crate::leader::Elector::new(client, config)?))
    }
}

/// How tagpin talks to the Kubernetes API (`verify`, `promote`, `run`).
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Timeout of one Kubernetes API request, in seconds: to connect, to send, and between two
    /// reads of the answer. A read is tried 3 times before the check fails.
    #[arg(
        long = "kube-timeout",
        value_name = "SECONDS",
        global = true,
        default_value_t = crate::cluster::DEFAULT_API_TIMEOUT.as_secs()
    )]
    pub kube_timeout: u64,
}

impl ClusterArgs {
    fn timeout(&self) -> Result<Duration, CliError> {
        if self.kube_timeout == 0 {
            return Err(CliError::Flag {
                flag: "--kube-timeout",
                message: "must be at least 1 second".into(),
            });
        }
        Ok(Duration::from_secs(self.kube_timeout))
    }
}

/// Why a command could not run at all (exit 2). Each names the file, flag, host or object.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Sync(#[from] crate::sync::SyncError),
    #[error(transparent)]
    Verify(#[from] crate::verify::VerifyError),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    Forge(#[from] crate::forge::ForgeError),
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    Gates(#[from] pass::GateRuleError),
    /// Boxed: the largest cause, and rare.
    #[error(transparent)]
    Promote(Box<crate::promote::PromoteError>),
    #[error("registry credentials: {0}")]
    Credentials(#[from] DockerConfigError),
    /// A flag's value breaks a rule of its own; the message says which.
    #[error("{flag}: {message}")]
    Flag { flag: &'static str, message: String },
    #[error("{flag}: {source}")]
    Duration {
        flag: &'static str,
        #[source]
        source: DurationError,
    },
    #[error("{flag}: {source}")]
    Size {
        flag: &'static str,
        #[source]
        source: SizeError,
    },
    /// The `--leader-elect-*` durations do not fit together.
    #[error("--leader-elect: {0}")]
    LeaderElect(#[source] crate::leader::LeaderError),
    #[error("crd: {0}")]
    Crd(#[source] serde_yaml::Error),
    /// Boxed: rare.
    #[error("report: {0}")]
    Delivery(#[source] Box<crate::delivery::ReadError>),
    #[error("forge.token_env: {0}")]
    ForgeToken(#[source] config::EnvError),
    #[error("forge.username_env: {0}")]
    ForgeUsername(#[source] config::EnvError),
    #[error("no cache directory: set repository.cache_dir or --cache-dir")]
    NoCacheDir,
    #[error(transparent)]
    Daemon(#[from] crate::daemon::DaemonError),
    #[error(transparent)]
    Operator(#[from] crate::operator::OperatorError),
    #[error(transparent)]
    Leader(#[from] crate::leader::LeaderError),
}

impl From<crate::promote::PromoteError> for CliError {
    fn from(e: crate::promote::PromoteError) -> CliError {
        CliError::Promote(Box::new(e))
    }
}

/// kube's client logs whole answer bodies it cannot parse (at warn, and at debug for error
/// answers), whatever the server: with a stage kubeconfig's `server` a tenant's to name, that
/// would copy any service's answer into tagpin's log. Its request failures (status, transport)
/// are errors and stay; what tagpin makes of them is logged by tagpin.
const QUIET_KUBE_BODIES: &str = "kube_client::client=error";

/// Sets up `tracing` on stderr: `RUST_LOG` when set, else warn (or info/debug with -v/-vv);
/// never kube's logging of answer bodies ([`QUIET_KUBE_BODIES`]), whatever `RUST_LOG` says.
pub fn init_logging(cli: &Cli) {
    let default = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    if let Ok(quiet) = QUIET_KUBE_BODIES.parse() {
        filter = filter.add_directive(quiet);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = if cli.log_json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // A second init (tests calling run twice) keeps the first subscriber.
    drop(result);
}

impl Command {
    /// Whether the command is one pass that ends (`resolve`, `plan`, `pin`). These run on a
    /// current-thread runtime: their work is a few hundred registry requests and one blocking
    /// scanning thread, and on a multi-thread runtime every answer also hopped between worker
    /// threads, which cost `plan` about 20 ms more CPU per 500 images (`bench_plan`), taken
    /// from the registry on a small machine. The long-running commands keep a multi-thread
    /// runtime.
    pub fn is_one_shot(&self) -> bool {
        matches!(
            self,
            Command::Resolve { .. } | Command::Plan(_) | Command::Pin { .. }
        )
    }

    /// Whether the command reaches a Git remote. Setting libgit2's network timeouts initialises
    /// libgit2, and with it OpenSSL's default certificate store: about 245 million
    /// instructions (some 25 ms) spent parsing every system CA, 91% of an empty `plan`'s work,
    /// for commands that never open a repository.
    pub fn uses_git(&self) -> bool {
        !matches!(
            self,
            Command::Resolve { .. } | Command::Plan(_) | Command::Pin { .. } | Command::Crd
        )
    }
}

/// Runs the command, then prints its report (or its error) and decides the exit code: the one
/// place that does.
pub async fn run(cli: Cli) -> Exit {
    run_keeping_report(cli).await.0
}

/// [`run`], handing the report back once printed, so that the binary can exit without
/// freeing it: a `plan` of 2,000 manifests spent 3.8 million instructions (about 1%) freeing
/// its diffs and references on the way out.
pub async fn run_keeping_report(cli: Cli) -> (Exit, impl Sized) {
    let format = cli.output;
    match execute(cli).await {
        Ok(report) => {
            let exit = output::print(output::render(&report, format));
            (exit, Some(report))
        }
        Err(e) => (
            output::print(output::render_error(&e, format)),
            None::<Report>,
        ),
    }
}

async fn execute(cli: Cli) -> Result<Report, CliError> {
    match cli.command {
        Command::Sync {
            config,
            dry_run,
            cache_dir,
        } => sync(&cli.registry, &config, dry_run, cache_dir.as_deref())
            .await
            .map(Report::Sync),
        Command::Verify(args) => verify(&cli.registry, &cli.cluster, &args)
            .await
            .map(Report::Verify),
        Command::Audit(args) => audit(&cli.registry, &cli.cluster, &args)
            .await
            .map(Report::Audit),
        Command::Promote(args) => promote(&cli.registry, &cli.cluster, &args)
            .await
            .map(Report::Promote),
        Command::Report(args) => report(&cli.registry, &args).await.map(Report::Delivery),
        Command::Run {
            config,
            listen,
            health_listen,
            interval,
            cache_dir,
            verify_interval,
            grace_period,
            webhook_window,
            leader,
            ui,
        } => {
            run_controller(
                (&cli.registry, &cli.cluster),
                &config,
                (listen, health_listen),
                (&interval, &verify_interval, &grace_period, &webhook_window),
                cache_dir.as_deref(),
                (&leader, &ui),
            )
            .await?;
            Ok(Report::Stopped)
        }
        Command::Operator(args) => {
            run_operator((&cli.registry, &cli.cluster), &args).await?;
            Ok(Report::Stopped)
        }
        Command::Crd => crate::operator::crd::crd_yaml()
            .map(Report::Document)
            .map_err(CliError::Crd),
        Command::Resolve { images } => {
            let client = build_client(&cli.registry, None)?;
            Ok(Report::Resolve(resolve(&client, &images).await))
        }
        Command::Plan(scan) => {
            let (client, signed) = scan_setup(&cli.registry, &scan)?;
            let filter = scan_filter(&scan)?;
            let pass = pass::run_signed(&scan.paths, &filter, &client, &signed, false).await;
            Ok(Report::Plan(pass, Mode::Plan))
        }
        Command::Pin { scan, check } => {
            let (client, signed) = scan_setup(&cli.registry, &scan)?;
            let filter = scan_filter(&scan)?;
            let pass = pass::run_signed(&scan.paths, &filter, &client, &signed, check).await;
            if check {
                Ok(Report::Plan(pass, Mode::Check))
            } else {
                let written = pass::write(&pass.plan);
                Ok(Report::Pin(pass, written))
            }
        }
    }
}

/// The registry client from the command line, plus a configuration file's `registries:`
/// section when `sync` has one (the command line adds to it).
fn build_client(
    args: &RegistryArgs,
    config: Option<&config::Registries>,
) -> Result<Client, CliError> {
    Ok(Client::new(registry_settings(args, config)?)?)
}

/// The registry settings from the command line and a configuration file's `registries:`.
fn registry_settings(
    args: &RegistryArgs,
    config: Option<&config::Registries>,
) -> Result<Settings, CliError> {
    let docker_config = args
        .docker_config
        .clone()
        .or_else(|| config.and_then(|c| c.docker_config.clone()))
        .or_else(CredentialStore::default_dir);
    let credentials = match docker_config {
        Some(dir) => CredentialStore::load_dir(&dir)?,
        None => CredentialStore::default(),
    };
    let mut settings = Settings {
        insecure_hosts: args.insecure_registries.clone(),
        ca_files: args.ca_files.clone(),
        credentials,
        concurrency_per_host: args.concurrency.max(1),
        request_timeout: Duration::from_secs(args.registry_timeout.max(1)),
        ..Settings::default()
    };
    if let Some(c) = config {
        settings.insecure_hosts.extend(c.insecure.iter().cloned());
        settings.ca_files.extend(c.ca_files.iter().cloned());
        settings.concurrency_per_host = c.concurrency;
        settings.request_timeout = Duration::from_secs(c.timeout_seconds);
        settings.resolve_budget = Duration::from_secs(c.budget_seconds);
    }
    Ok(settings)
}

/// The registry client and the signature rules of `plan` and `pin`: with `--config`, its
/// `registries:` (the command line adds to them) and `images.signatures`; without, none.
fn scan_setup(
    registry: &RegistryArgs,
    scan: &ScanArgs,
) -> Result<(Client, pass::Signed), CliError> {
    let Some(path) = &scan.config else {
        return Ok((build_client(registry, None)?, pass::Signed::default()));
    };
    let config = Config::load(path)?;
    // First sightings (`images.minimum_age`) are kept in the cache directory `sync` uses,
    // when there is one.
    let first_seen = match cache_dir_for(&config, None) {
        Ok(dir) => crate::age::seen::FirstSeen::in_dir(&dir),
        Err(_) => crate::age::seen::FirstSeen::in_memory(),
    };
    let gates = pass::ImageGates::compile(&config)?;
    let signed = pass::Signed {
        rules: gates.signatures,
        budget: std::time::Duration::from_secs(config.registries.budget_seconds),
        ages: gates.ages,
        provenance: gates.provenance,
        first_seen,
    };
    Ok((build_client(registry, Some(&config.registries))?, signed))
}

fn scan_filter(scan: &ScanArgs) -> Result<FileFilter, CliError> {
    Ok(FileFilter::with_default_include(
        &scan.include,
        &scan.exclude,
    )?)
}

/// `tagpin resolve`: asks the registry about each image once.
async fn resolve(client: &Client, images: &[String]) -> ResolveReport {
    let parsed: Vec<(String, Result<Reference, ResolveFailure>)> = images
        .iter()
        .map(|image| (image.clone(), Reference::parse(image).map_err(From::from)))
        .collect();
    let valid: Vec<&Reference> = parsed.iter().filter_map(|(_, r)| r.as_ref().ok()).collect();
    let results = client.resolve_all(valid.iter().copied()).await;
    let rows = parsed
        .into_iter()
        .map(|(image, reference)| {
            let outcome = match reference {
                Err(e) => Err(e),
                Ok(r) => match results.get(&registry::ResolveKey::of(&r)) {
                    Some(Ok(resolved)) => Ok(resolved.clone()),
                    Some(Err(e)) => Err(e.clone().into()),
                    None => Err(ResolveFailure::NotResolved {
                        image: image.clone(),
                    }),
                },
            };
            (image, outcome)
        })
        .collect();
    ResolveReport {
        lone: images.len() == 1,
        rows,
    }
}

/// The forge named by the configuration, with its token read from the environment.
fn forge_from(config: &Config) -> Result<Option<ForgeClient>, CliError> {
    let Some(forge_config) = &config.forge else {
        return Ok(None);
    };
    let token = config::read_env(&forge_config.token_env).map_err(CliError::ForgeToken)?;
    let username = match &forge_config.username_env {
        Some(env) => Some(config::read_env(env).map_err(CliError::ForgeUsername)?),
        None => None,
    };
    Ok(Some(ForgeClient::with_username(
        forge_config,
        token,
        username,
    )?))
}

fn cache_dir_for(config: &Config, flag: Option<&Path>) -> Result<PathBuf, CliError> {
    flag.map(Path::to_path_buf)
        .or_else(|| config.repository.cache_dir.clone())
        .or_else(default_cache_dir)
        .ok_or(CliError::NoCacheDir)
}

/// A size as written that is not one; quotes what was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error("unknown unit {unit:?}: use KiB, MiB or GiB")]
    UnknownUnit { unit: String },
    /// Not a whole number above zero, or more bytes than a `u64` holds.
    #[error("{text:?} is not a size such as 512MiB or 2GiB")]
    NotASize { text: String },
}

/// A size in bytes: a whole number, or with a binary unit (`KiB`, `MiB`, `GiB`).
pub(crate) fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(SizeError::UnknownUnit {
                unit: other.to_string(),
            })
        }
    };
    number
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| SizeError::NotASize {
            text: text.to_string(),
        })
}

fn duration_flag(flag: &'static str, text: &str) -> Result<Duration, CliError> {
    crate::config::parse_duration(text).map_err(|source| CliError::Duration { flag, source })
}

/// `--since`: days too (`30d`), besides what every duration flag takes.
fn since_flag(text: &str) -> Result<Duration, CliError> {
    match text.trim().strip_suffix('d').map(str::parse::<u64>) {
        Some(Ok(days)) => Ok(Duration::from_secs(days.saturating_mul(86_400))),
        _ => duration_flag("--since", text),
    }
}

/// `--webhook-window`: milliseconds allowed (`500ms`), zero too (nothing held back).
fn window_flag(text: &str) -> Result<Duration, CliError> {
    crate::leader::parse_duration(text).map_err(|source| CliError::Duration {
        flag: "--webhook-window",
        source,
    })
}

/// `tagpin verify`: gather what is expected, check the cluster, report on the PR.
async fn verify(
    registry: &RegistryArgs,
    cluster_args: &ClusterArgs,
    args: &VerifyArgs,
) -> Result<VerifyReport, CliError> {
    let mut config = Config::load(&args.config)?;
    let timeout = duration_flag("--timeout", &args.timeout)?;
    let api_timeout = cluster_args.timeout()?;
    let client = build_client(registry, Some(&config.registries))?;
    let forge = forge_from(&config)?;
    let mirror = open_mirror(&config, args.cache_dir.as_deref())?;
    let mut source = match (&args.pr, &args.commit, &args.branch) {
        (Some(n), _, _) => Source::PullRequest(*n),
        (_, Some(sha), _) => Source::Commit(sha.clone()),
        (_, _, Some(b)) => Source::Branch(b.clone()),
        _ => {
            return Err(CliError::Flag {
                flag: "--pr, --commit or --branch",
                message: "one is required".into(),
            })
        }
    };
    let mut stage = stage_named(&config, args.stage.as_deref())?;
    // A promotion pull request is verified against the stage it promotes into.
    let mut pr = None;
    if let (Source::PullRequest(number), Some(forge)) = (source.clone(), &forge) {
        let info = forge.pull_request(number).await?;
        crate::verify::refuse_fork(&info, forge.noun())?;
        if let Some(target) = crate::promote::stage_of_branch(&config, &info.head_ref) {
            stage.get_or_insert_with(|| target.clone());
            source = crate::promote::verification_source(&info);
        }
        pr = Some(number);
    }
    let first = config.promotion.as_ref().map(|p| p.stages[0].clone());
    if let Some(stage) = &stage {
        config = crate::promote::stage_config(&config, stage);
    }
    let expectations =
        crate::verify::expectations(&source, &config, &mirror, forge.as_ref(), false).await?;
    let cluster = connect(args.context.as_deref(), stage, &config, first, api_timeout).await?;
    if let Some(forge) = &forge {
        crate::verify::publish_pending(forge, &expectations).await;
    }
    let check = crate::verify::watch(&expectations, &cluster, &client, args.wait, timeout).await?;
    if let Some(forge) = &forge {
        crate::verify::publish(forge, pr, &expectations, &check).await;
    }
    Ok(VerifyReport {
        check,
        expectations,
    })
}

/// The stage `--stage` names, if given; an error naming the flag when there is no such stage.
fn stage_named(config: &Config, name: Option<&str>) -> Result<Option<Stage>, CliError> {
    let Some(name) = name else {
        return Ok(None);
    };
    match config.promotion.as_ref().and_then(|p| p.stage(name)) {
        Some(stage) => Ok(Some(stage.clone())),
        None => Err(CliError::Flag {
            flag: "--stage",
            message: format!("{name}: no such stage in promotion.stages"),
        }),
    }
}

/// The cluster `verify` and `audit` read: `--context`, else the stage's own cluster, else
/// `verify.context`, else the first stage's, else kube's default.
async fn connect(
    context: Option<&str>,
    stage: Option<Stage>,
    config: &Config,
    first: Option<Stage>,
    timeout: Duration,
) -> Result<Cluster, CliError> {
    Ok(match (context, stage, &config.verify.context, first) {
        (Some(context), ..) => Cluster::connect(Some(context), timeout).await?,
        (None, Some(stage), ..) => crate::promote::connect(&stage, timeout).await?,
        (None, None, Some(context), _) => Cluster::connect(Some(context), timeout).await?,
        (None, None, None, Some(first)) => crate::promote::connect(&first, timeout).await?,
        (None, None, None, None) => Cluster::connect(None, timeout).await?,
    })
}

/// `tagpin audit`: the target branch's tip (a stage's paths with `--stage`) against what runs.
async fn audit(
    registry: &RegistryArgs,
    cluster_args: &ClusterArgs,
    args: &AuditArgs,
) -> Result<crate::audit::AuditReport, CliError> {
    let mut config = Config::load(&args.config)?;
    let api_timeout = cluster_args.timeout()?;
    let client = build_client(registry, Some(&config.registries))?;
    let mirror = open_mirror(&config, args.cache_dir.as_deref())?;
    let stage = stage_named(&config, args.stage.as_deref())?;
    let first = config.promotion.as_ref().map(|p| p.stages[0].clone());
    if let Some(stage) = &stage {
        config = crate::promote::stage_config(&config, stage);
    }
    let cluster = connect(args.context.as_deref(), stage, &config, first, api_timeout).await?;
    let namespace = args.namespace.as_deref();
    Ok(crate::audit::of_branch(&config, &mirror, &cluster, &client, namespace).await?)
}

/// `tagpin report`: the delivery figures of the branch's history since `--since`.
async fn report(
    registry: &RegistryArgs,
    args: &ReportArgs,
) -> Result<crate::delivery::DeliveryReport, CliError> {
    let config = Config::load(&args.config)?;
    let window = since_flag(&args.since)?;
    stage_named(&config, args.stage.as_deref())?;
    let client = build_client(registry, Some(&config.registries))?;
    let mirror = open_mirror(&config, args.cache_dir.as_deref())?;
    let branch = &config.repository.branch;
    mirror.fetch(branch, &config.pull_request.branch_prefix)?;
    crate::delivery::history::fetch_notes(&mirror);
    let now = (crate::clock::system())();
    let since = now - i64::try_from(window.as_secs()).unwrap_or(i64::MAX / 2);
    let url = mirror.display_url();
    let window = (since, now);
    let delivery = crate::delivery::read(&mirror, &config, Some(&client), &url, window)
        .await
        .map_err(|e| CliError::Delivery(Box::new(e)))?;
    let mut report = delivery.report;
    if let Some(stage) = &args.stage {
        report.stages.retain(|s| &s.name == stage);
        report.changes.retain(|c| &c.stage == stage);
    }
    Ok(report)
}

/// The Git mirror of the configured repository, for `verify`, `audit` and `promote`.
fn open_mirror(config: &Config, cache_dir: Option<&Path>) -> Result<crate::git::Mirror, CliError> {
    let cache_dir = cache_dir_for(config, cache_dir)?;
    let credentials = crate::sync::git_credentials(&config.repository.auth)?;
    // Read before the mirror is opened: a key that cannot sign stops the command first.
    let signer = crate::sync::commit_signer(&config.author)?;
    let mut mirror = crate::git::Mirror::open(&cache_dir, &config.repository.url, credentials)?;
    if let Some(signer) = signer {
        mirror.sign_with(signer);
    }
    Ok(mirror)
}

/// `tagpin promote --to STAGE`: one promotion pass, the same the controller runs.
async fn promote(
    registry: &RegistryArgs,
    cluster_args: &ClusterArgs,
    args: &PromoteArgs,
) -> Result<crate::promote::PromoteReport, CliError> {
    let config = Config::load(&args.config)?;
    let api_timeout = cluster_args.timeout()?;
    let (source, _) = crate::promote::route(&config, &args.to)?;
    let client = build_client(registry, Some(&config.registries))?;
    let forge = forge_from(&config)?;
    let mirror = open_mirror(&config, args.cache_dir.as_deref())?;
    let cluster = crate::promote::connect(source, api_timeout).await?;
    let promoter = crate::promote::Promoter::new(&config, &client, forge.as_ref(), &mirror)?;
    let options = crate::promote::PromoteOptions {
        dry_run: args.dry_run,
    };
    Ok(promoter.run(&args.to, &cluster, options).await?)
}

/// `tagpin run`: the controller, until SIGTERM or SIGINT.
async fn run_controller(
    (registry, cluster_args): (&RegistryArgs, &ClusterArgs),
    config_path: &Path,
    (listen, health_listen): (std::net::SocketAddr, Option<std::net::SocketAddr>),
    (interval, verify_interval, grace_period, webhook_window): (&str, &str, &str, &str),
    cache_dir: Option<&Path>,
    (leader, ui): (&LeaderElectArgs, &UiArgs),
) -> Result<(), CliError> {
    let ui_listen = ui.for_run()?;
    let config = Config::load(config_path)?;
    let api_timeout = cluster_args.timeout()?;
    let leader = leader.elector(api_timeout).await?;
    let mut durations = Vec::new();
    for (flag, text) in [
        ("--interval", interval),
        ("--verify-interval", verify_interval),
    ] {
        let d = duration_flag(flag, text)?;
        if d.is_zero() {
            return Err(CliError::Flag {
                flag,
                message: "must be longer than zero".into(),
            });
        }
        durations.push(d);
    }
    let schedule = crate::daemon::Schedule {
        interval: durations[0],
        verify_every: durations[1],
        webhook_window: window_flag(webhook_window)?,
        grace: duration_flag("--grace-period", grace_period)?,
    };
    let client = build_client(registry, Some(&config.registries))?;
    let forge = forge_from(&config)?;
    let cache_dir = cache_dir_for(&config, cache_dir)?;
    crate::daemon::run(crate::daemon::Setup {
        config: &config,
        registry: &client,
        forge: forge.as_ref(),
        cache_dir: &cache_dir,
        listen,
        health_listen,
        schedule,
        api_timeout,
        leader,
        ui_listen,
    })
    .await?;
    Ok(())
}

/// `tagpin operator`: until SIGTERM or SIGINT.
async fn run_operator(
    (registry, cluster_args): (&RegistryArgs, &ClusterArgs),
    args: &OperatorArgs,
) -> Result<(), CliError> {
    let interval = duration_flag("--interval", &args.interval)?;
    let verify_interval = duration_flag("--verify-interval", &args.verify_interval)?;
    let reconcile_timeout = duration_flag("--reconcile-timeout", &args.reconcile_timeout)?;
    for (flag, d) in [
        ("--interval", interval),
        ("--verify-interval", verify_interval),
        ("--reconcile-timeout", reconcile_timeout),
    ] {
        if d.is_zero() {
            return Err(CliError::Flag {
                flag,
                message: "must be longer than zero".into(),
            });
        }
    }
    if args.concurrent == 0 {
        return Err(CliError::Flag {
            flag: "--concurrent",
            message: "must be at least 1".into(),
        });
    }
    if let Some(selector) = &args.watch_label_selector {
        if selector.trim().is_empty() {
            return Err(CliError::Flag {
                flag: "--watch-label-selector",
                message: "must not be empty (omit it for every object)".into(),
            });
        }
    }
    if let Some(name) = &args.default_service_account {
        if !crate::config::is_dns_label(name) {
            return Err(CliError::Flag {
                flag: "--default-service-account",
                message: crate::config::not_a_service_account(name),
            });
        }
    }
    let settings = registry_settings(registry, None)?;
    let api_timeout = cluster_args.timeout()?;
    let leader = args.leader.elector(api_timeout).await?;
    let ui = args.ui.for_operator()?;
    crate::operator::run(crate::operator::Setup {
        leader,
        ui,
        registry: settings,
        cache_dir: args
            .cache_dir
            .clone()
            .or_else(default_cache_dir)
            .ok_or(CliError::NoCacheDir)?,
        interval,
        verify_interval,
        grace: duration_flag("--grace-period", &args.grace_period)?,
        webhook_window: window_flag(&args.webhook_window)?,
        api_timeout,
        listen: args.listen,
        health_listen: args.health_listen,
        label_selector: args.watch_label_selector.clone(),
        namespace: args.watch_namespace.clone(),
        concurrency: args.concurrent,
        reconcile_timeout,
        max_repository_bytes: parse_size(&args.max_repository_size).map_err(|source| {
            CliError::Size {
                flag: "--max-repository-size",
                source,
            }
        })?,
        shared_registry_credentials: args.share_registry_credentials.clone(),
        allow_local_repositories: args.allow_local_repositories,
        default_service_account: args.default_service_account.clone(),
        notify_allow_http: args.notify_allow_http.clone(),
        instance: std::env::var("POD_NAME").ok(),
    })
    .await?;
    Ok(())
}

/// `tagpin sync`: load and validate the configuration, then run one pass.
async fn sync(
    args: &RegistryArgs,
    config_path: &Path,
    dry_run: bool,
    cache_dir: Option<&Path>,
) -> Result<SyncReport, CliError> {
    let config = Config::load(config_path)?;
    let client = build_client(args, Some(&config.registries))?;
    let forge = forge_from(&config)?;
    let cache_dir = cache_dir_for(&config, cache_dir)?;
    let syncer = Syncer::new(&config, &client, forge.as_ref(), &cache_dir)?;
    let report = syncer.run(SyncOptions { dry_run }).await?;
    if !dry_run {
        notify_sync(&config, &report, syncer.mirror.cache_dir()).await;
    }
    Ok(report)
}

/// `tagpin sync` tells what it pinned and held (`notifications:`), and waits for the
/// messages, each bounded in time, before it exits.
async fn notify_sync(config: &Config, report: &SyncReport, cache_dir: &Path) {
    use crate::cycle::events;
    let targets = crate::notify::targets_from_env(&config.notifications);
    if targets.is_empty() {
        return;
    }
    let shared = crate::server::Shared::new(None, std::time::Duration::from_secs(3600));
    let notifications = crate::notify::Notifications::new(shared, crate::notify::Transport::Any);
    let repository = events::repository_name(&config.repository.url);
    let about = events::About {
        repository: &repository,
        config,
    };
    let told = events::of_sync(report, crate::clock::unix_now(), about);
    if let Some(sending) = notifications.tell(cache_dir, &targets, told) {
        let _ = sending.await;
    }
}

/// `$XDG_CACHE_HOME/tagpin`, else `~/.cache/tagpin`.
fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("tagpin"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_are_bytes_or_binary_units() {
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1000"), Ok(1000));
        for wrong in [
            "",
            "0",
            "1GB",
            "-1MiB",
            "1.5GiB",
            "MiB",
            "99999999999999999GiB",
        ] {
            assert!(parse_size(wrong).is_err(), "{wrong}");
        }
    }
}
