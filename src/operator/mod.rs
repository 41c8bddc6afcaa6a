//! `tagpin operator`: many repositories, each declared as a `PinnedRepository` object, each
//! reconciled on its own by a kube-runtime `Controller`.
//!
//! Kubernetes is the engine: a watch brings each object (and each Secret it names) to
//! [`reconcile`], its outcome is written to the object's status and as Events, and an error
//! requeues that object alone with backoff. One object's broken spec, missing Secret or
//! unreachable remote never stops another's work. What objects share is what is expensive and
//! safe to share: the registry client (its tokens, per-host limits) and the registry answers
//! of one interval, among objects with the same registry credentials; each object has its
//! own Git mirror.

pub mod crd;
pub mod events;
pub mod mirrors;
pub mod promotion;
pub mod reconcile;
pub mod registries;
pub mod report;
pub mod routes;
pub mod secrets;
pub mod slots;
pub mod status;
pub mod verdicts;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::ResourceExt;

use crate::cluster::{Cluster, HomeCluster, OPERATOR_LIST_AGE};
use crate::lifecycle;
use crate::mutex::lock;
use crate::registry::Settings;
use crate::server::{self, Listening};
use crd::PinnedRepository;
use reconcile::Context;
use registries::RegistryClients;

pub use secrets::{SECRET_LABEL, SECRET_LABEL_VALUE};

/// How long a watch request may stay open before the API server ends it (and the watcher
/// starts another): bounds a watch on a connection that went silent.
const WATCH_TIMEOUT_SECONDS: u32 = 290;

/// Objects a webhook delivery hands to the controller without waiting for it to take them.
const DELIVERY_QUEUE: usize = 1024;

/// Everything `tagpin operator` was given.
pub struct Setup {
    pub registry: Settings,
    pub cache_dir: PathBuf,
    pub interval: Duration,
    pub verify_interval: Duration,
    pub grace: Duration,
    /// At most one webhook-started reconcile of all objects per window (`--webhook-window`).
    pub webhook_window: Duration,
    pub api_timeout: Duration,
    pub listen: SocketAddr,
    pub health_listen: Option<SocketAddr>,
    /// Only objects with these labels (`sharding.tagpin.dev/key=shard1`).
    pub label_selector: Option<String>,
    /// Only objects of this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Objects reconciled at once (a namespace with none running may start one beyond it, up
    /// to twice as many: see [`slots`]).
    pub concurrency: u16,
    /// How long one reconcile may take, everything included; the ceiling of the timeouts a
    /// spec sets.
    pub reconcile_timeout: Duration,
    /// A repository whose mirror would grow larger than this is refused.
    pub max_repository_bytes: u64,
    /// The registries for which the controller's own Docker config (and its credential
    /// helpers) also serves `PinnedRepository` objects; no other registry ever gets them.
    pub shared_registry_credentials: Vec<String>,
    /// Whether a repository may be a local path or file:// URL (`--allow-local-repositories`).
    pub allow_local_repositories: bool,
    /// `--default-service-account`: the ServiceAccount (of each object's own namespace) whose
    /// rights an object that names none reads its cluster with; `None`: the operator's own.
    pub default_service_account: Option<String>,
    /// `--notify-allow-http`: the hosts notifications may reach over plain HTTP.
    pub notify_allow_http: Vec<String>,
    /// Names this replica in Events (the pod name).
    pub instance: Option<String>,
    /// With `--leader-elect`: only the holder of the Lease reconciles.
    pub leader: Option<crate::leader::Elector>,
    /// `--ui-listen`: the dashboard, and how its viewers are checked.
    pub ui: Option<UiSetup>,
}

/// The operator's dashboard: where it listens, and how viewers are known.
pub struct UiSetup {
    pub listen: SocketAddr,
    pub mode: crate::ui::auth::Mode,
    /// The proxy's user and groups headers (`--ui-auth proxy`).
    pub user_header: axum::http::HeaderName,
    pub groups_header: axum::http::HeaderName,
}

/// Serves the dashboard of `board` as `ui` says (none without `--ui-listen`), reviewing
/// viewers with `client` (the home cluster's).
async fn serve_ui(
    ui: Option<&UiSetup>,
    board: crate::ui::Board,
    client: &kube::Client,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, OperatorError> {
    use crate::ui::auth::{Mode, Reviewer, UiAuth};
    let Some(ui) = ui else {
        return Ok(None);
    };
    let auth = match ui.mode {
        Mode::None => UiAuth::None,
        Mode::Token => UiAuth::Token(Reviewer::new(client.clone())),
        Mode::Proxy => UiAuth::Proxy {
            user: ui.user_header.clone(),
            groups: ui.groups_header.clone(),
            reviewer: Reviewer::new(client.clone()),
        },
    };
    Ok(Some(crate::ui::start(ui.listen, board, auth, stop).await?))
}

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Listen(#[from] crate::server::ListenError),
    #[error("Kubernetes API: {0}")]
    Kube(String),
    #[error(transparent)]
    LostLeadership(#[from] crate::lifecycle::LostLeadership),
}

/// The API clients: one for requests, each bounded by `timeout` (kube retries 5xx and 429
/// within it); one for watches, which are quiet by design and bounded by
/// [`WATCH_TIMEOUT_SECONDS`] instead. Answers are capped as the verifier's are: a Secret or
/// an object list never grows the controller past the cap.
async fn clients(timeout: Duration) -> Result<(kube::Client, kube::Client), OperatorError> {
    let kube = |e: crate::cluster::ClientError| OperatorError::Kube(e.to_string());
    let home = HomeCluster::infer(timeout).await.map_err(kube)?;
    let requests = home.requests(true).map_err(kube)?;
    let watch_read = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECONDS) + 30);
    let watches = home.watches(watch_read).map_err(kube)?;
    Ok((requests, watches))
}

/// Whether an object's spec names the Secret `name` (of its own namespace): its credentials,
/// its Docker config, or a promotion stage's kubeconfig.
pub fn names_secret(spec: &serde_json::Map<String, serde_json::Value>, name: &str) -> bool {
    let at = |path: &[&str]| {
        let mut value = spec.get(path[0]);
        for key in &path[1..] {
            value = value.and_then(|v| v.get(key));
        }
        value.and_then(|v| v.as_str()) == Some(name)
    };
    let stages = spec
        .get("promotion")
        .and_then(|p| p.get("stages"))
        .and_then(|s| s.as_array());
    let kubeconfig = stages.into_iter().flatten().any(|stage| {
        stage
            .get("cluster")
            .and_then(|c| c.get("kubeconfig_secret_ref"))
            .and_then(|r| r.get("name"))
            .and_then(|n| n.as_str())
            == Some(name)
    });
    at(&["secret_ref", "name"])
        || at(&["registries", "docker_config_secret_ref", "name"])
        || kubeconfig
}

/// `tagpin operator`: reconciles every `PinnedRepository` it selects until SIGTERM or SIGINT.
pub async fn run(setup: Setup) -> Result<(), OperatorError> {
    let (client, watch_client) = clients(setup.api_timeout).await?;
    let stop = lifecycle::stop_signal(setup.grace);
    let secret = crate::config::read_env(server::WEBHOOK_SECRET_ENV).ok();
    let Listening {
        shared,
        mut servers,
    } = server::listen(
        setup.listen,
        setup.health_listen,
        secret,
        setup.interval,
        &stop,
    )
    .await?;
    // Series at zero, so that the alerts see the first Failed verdict of any object.
    shared.metrics.zero_verifications();
    // Every object's verification lists the same namespaces: those lists are shared for a
    // second, so API requests grow with the namespaces read, not with the objects.
    let cluster = match Cluster::connect(None, setup.api_timeout).await {
        Ok(cluster) => Some(cluster.sharing_lists(OPERATOR_LIST_AGE)),
        Err(e) => {
            tracing::warn!("no cluster to verify against ({e}); pinning only");
            None
        }
    };
    let ctx = context(&setup, client.clone(), cluster, shared.clone());
    servers.extend(serve_ui(setup.ui.as_ref(), ctx.board.clone(), &client, &stop).await?);
    let (objects, secrets) = watched_apis(&watch_client, setup.namespace.as_deref());
    let mut selection = watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS);
    if let Some(selector) = &setup.label_selector {
        selection = selection.labels(selector);
    }
    let watched_secrets = watcher::Config::default()
        .timeout(WATCH_TIMEOUT_SECONDS)
        .labels(&format!("{SECRET_LABEL}={SECRET_LABEL_VALUE}"));
    let (store, writer) = reflector::store();
    // Webhook deliveries: the answers for the images they name are forgotten, and the objects
    // using them reconciled (see [`routes`]); a burst within the webhook window, by one
    // reconcile of each at its end.
    let delivered = forward_deliveries(
        shared.clone(),
        ctx.clone(),
        store.clone(),
        setup.webhook_window,
    );
    let reflect = (store.clone(), writer);
    let changed = watched(
        objects,
        selection,
        reflect,
        (&ctx, &shared),
        setup.namespace.clone(),
    );
    let controller = Controller::for_stream(changed, store.clone());
    let mut stopped = stop.clone();
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    announce_start(&setup);
    // A standby is alive but not ready: the Service sends webhooks to the leader only.
    let Ok(leadership) = lifecycle::lead(setup.leader, &shared, &stop, &mut servers).await else {
        return Ok(());
    };
    shared.mark_ready();
    let (progress, counted) = (shared.clone(), ctx.clone());
    let work = controller
        .watches(secrets, watched_secrets, move |secret: Secret| {
            objects_naming(&store, &secret)
        })
        .reconcile_on(delivered)
        // Every due object is handed over at once; `ctx.slots` decides who runs.
        .with_config(ControllerConfig::default().concurrency(0))
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(move |result| {
            reconciled(&progress, &counted);
            if let Err(e) = result {
                tracing::debug!("controller: {e}");
            }
            futures::future::ready(())
        });
    // The controller stops starting reconciles at the signal; those under way get the grace
    // period, then are dropped where they stand, so the Lease is released and the process
    // exits as `run` does.
    let bounded = async move {
        if lifecycle::within_grace(&stop, setup.grace, work)
            .await
            .is_none()
        {
            tracing::warn!(
                "the grace period ({:?}) is over; reconciles still under way are abandoned",
                setup.grace
            );
        }
    };
    Ok(lifecycle::work_while_leading(bounded, leadership, servers).await?)
}

/// The objects of `store` that name `secret` (of their own namespace): a change of it
/// reconciles them.
fn objects_naming(
    store: &reflector::Store<PinnedRepository>,
    secret: &Secret,
) -> Vec<ObjectRef<PinnedRepository>> {
    let (namespace, name) = (secret.namespace(), secret.name_any());
    store
        .state()
        .into_iter()
        .filter(|object| {
            object.namespace() == namespace && names_secret(&object.spec.fields, &name)
        })
        .map(|object| ObjectRef::from_obj(&*object))
        .collect()
}

/// The PinnedRepositories and Secrets watched: in `namespace`, or in all namespaces.
fn watched_apis(
    client: &kube::Client,
    namespace: Option<&str>,
) -> (Api<PinnedRepository>, Api<Secret>) {
    match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    }
}

/// After each reconcile: the operator made progress; the registry requests and clients of
/// every object's registry clients are counted.
fn reconciled(shared: &server::Shared, ctx: &Context) {
    shared.progressed();
    shared
        .metrics
        .observe_registry_counts(ctx.registries.request_counts());
    shared
        .metrics
        .registry_clients
        .set(i64::try_from(ctx.registries.len()).unwrap_or(i64::MAX));
}

/// The objects to reconcile: the watch of `objects`, reflected into the store `reflect`
/// feeds. A deleted object's mirror, verification memory and metric series are dropped; the
/// first full list sweeps the mirrors of objects deleted while no operator ran. A reconcile's
/// own status write changes the object but not its generation: only a spec change (or a
/// Secret, a webhook, the interval) brings it back.
fn watched(
    objects: Api<PinnedRepository>,
    selection: watcher::Config,
    reflect: (
        reflector::Store<PinnedRepository>,
        reflector::store::Writer<PinnedRepository>,
    ),
    (ctx, shared): (&Arc<Context>, &Arc<server::Shared>),
    namespace: Option<String>,
) -> impl futures::Stream<Item = Result<PinnedRepository, watcher::Error>> + Send + 'static {
    let (listed, writer) = reflect;
    let mirrors = mirrors::Mirrors::new(ctx.cache_dir.clone(), namespace);
    let forget = ctx.clone();
    let metrics = shared.clone();
    watcher(objects, selection)
        .default_backoff()
        .reflect(writer)
        .inspect(move |event| match event {
            Ok(watcher::Event::Delete(object)) => {
                let (namespace, name) = (object.namespace().unwrap_or_default(), object.name_any());
                mirrors.remove(&namespace, &name);
                let key = object_key(object);
                lock(&forget.memories).remove(&key);
                forget.routes.remove(&key);
                forget.board.remove(&key);
                // Its ledger went with its directory: an object made again with the same name
                // starts with none.
                let dir = forget.cache_dir.join(&namespace).join(&name);
                forget.notifications.forget(&dir);
                metrics
                    .metrics
                    .object_reconciled
                    .remove(&crate::metrics::ObjectLabels { namespace, name });
            }
            Ok(watcher::Event::InitDone) => mirrors.sweep(
                &listed
                    .state()
                    .iter()
                    .map(|o| (o.namespace().unwrap_or_default(), o.name_any()))
                    .collect(),
            ),
            _ => {}
        })
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default())
}

/// What every reconcile shares, from the operator's flags.
fn context(
    setup: &Setup,
    client: kube::Client,
    cluster: Option<Cluster>,
    shared: Arc<crate::server::Shared>,
) -> Arc<Context> {
    let shared_for_notifications = shared.clone();
    Arc::new(Context {
        kube: client.clone(),
        registries: RegistryClients::new(
            setup.registry.clone(),
            &setup.shared_registry_credentials,
            setup.interval,
            setup.reconcile_timeout,
        ),
        cache_dir: setup.cache_dir.clone(),
        interval: setup.interval,
        verify_interval: setup.verify_interval,
        events: events::Publisher::new(client.clone(), reconcile::MANAGER, setup.instance.clone()),
        cluster,
        failures: Default::default(),
        api_timeout: setup.api_timeout,
        shared,
        allow_local_repositories: setup.allow_local_repositories,
        slots: slots::Slots::new(usize::from(setup.concurrency)),
        reconcile_timeout: setup.reconcile_timeout,
        max_repository_bytes: setup.max_repository_bytes,
        default_service_account: setup.default_service_account.clone(),
        tenants: Default::default(),
        memories: Default::default(),
        board: Default::default(),
        notifications: crate::notify::Notifications::new(
            shared_for_notifications,
            crate::notify::Transport::HttpsOnly {
                allow_http: setup.notify_allow_http.clone(),
            },
        ),
        routes: Default::default(),
    })
}

/// Webhook deliveries: the answers for the images they name are forgotten, and the objects
/// of `store` they concern (those whose last pass asked about one of them, and those not known
/// yet: [`routes::Routes::concerned`]) handed to the controller to reconcile now; a burst
/// within the webhook window, by one reconcile of each at its end. Each asks the registry only
/// for what was forgotten.
fn forward_deliveries(
    shared: Arc<crate::server::Shared>,
    ctx: Arc<Context>,
    store: reflector::Store<PinnedRepository>,
    webhook_window: Duration,
) -> futures::channel::mpsc::Receiver<ObjectRef<PinnedRepository>> {
    use futures::SinkExt;
    let (mut deliveries, delivered) = futures::channel::mpsc::channel(DELIVERY_QUEUE);
    let mut window = server::WebhookWindow::new(webhook_window);
    tokio::spawn(async move {
        loop {
            let names: Vec<String> = shared
                .next_delivery(&mut window)
                .await
                .into_iter()
                .collect();
            ctx.registries.forget(&names);
            let objects = store.state();
            let keys: Vec<String> = objects.iter().map(|o| object_key(o)).collect();
            let concerned: std::collections::HashSet<&str> = ctx
                .routes
                .concerned(&names, keys.iter().map(String::as_str))
                .into_iter()
                .collect();
            ctx.routes.delivered(concerned.iter().copied());
            tracing::debug!(
                "webhook names {}: {} of {} objects concerned",
                names.join(", "),
                concerned.len(),
                objects.len()
            );
            for (object, key) in objects.iter().zip(&keys) {
                if concerned.contains(key.as_str())
                    && deliveries
                        .send(ObjectRef::from_obj(&**object))
                        .await
                        .is_err()
                {
                    // The controller stopped.
                    return;
                }
            }
        }
    });
    delivered
}

/// `namespace/name`: how the operator keys an object's memories and routes.
fn object_key(object: &PinnedRepository) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// The start line: where it listens, how often, which objects, as whom.
fn announce_start(setup: &Setup) {
    tracing::info!(
        "tagpin operator: listening on {}, a pass of each object every {:?}{}{}",
        setup.listen,
        setup.interval,
        setup
            .label_selector
            .as_deref()
            .map(|s| format!(", objects labelled {s}"))
            .unwrap_or_default(),
        setup
            .default_service_account
            .as_deref()
            .map(|sa| format!(
                ", each object's cluster read as ServiceAccount {sa} of its namespace unless it names another"
            ))
            .unwrap_or_default()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_names_its_own_secrets_only() {
        let spec = serde_json::json!({
            "repository": {"url": "https://git.example/a.git"},
            "secret_ref": {"name": "git"},
            "registries": {"docker_config_secret_ref": {"name": "pull"}},
            "promotion": {"stages": [
                {"name": "staging", "paths": ["staging"], "cluster": {"in_cluster": true}},
                {"name": "production", "paths": ["production"],
                 "cluster": {"kubeconfig_secret_ref": {"name": "prod-kubeconfig"}}}
            ]}
        });
        let spec = spec.as_object().unwrap();
        assert!(names_secret(spec, "git"));
        assert!(names_secret(spec, "pull"));
        assert!(names_secret(spec, "prod-kubeconfig"));
        assert!(!names_secret(spec, "other"));
        assert!(!names_secret(&serde_json::Map::new(), "git"));
    }
}
